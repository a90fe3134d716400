"""The study driver: Optuna ask/tell in one loop, trials dispatched asynchronously to Ray.

    spec -> (config + search space) -> study -> scheduler -> backend runs trial -> metrics -> storage

One loop iteration: reap trials of dead drivers (periodically), fill free slots (ask, build the trial,
prune infeasible points at once, submit its seeds together), poll Ray for metrics (persist them, report
the mean over seeds at the step every seed reached, stop pruned trials) and finished seed jobs (a failed
seed stops its siblings; when the last seed ends, decide the trial's outcome and record it), beat the
heartbeat. A finished trial frees its slot at once (waiting trials start before it is recorded); there
are no batch barriers. The search stops at
``spec.trials`` trials that count (see ``retry.counts_toward_budget``), counted in storage, so several
drivers on one study share the budget; then the optional confirmation stage (``confirm:``) reruns the
best trials on fresh seeds. The parts: ``trial_builder`` (configs and seed jobs), ``outcome`` (what a
finished trial means), ``study_store`` (writes Optuna's ``Trial`` does not cover), ``scheduler`` (Ray),
``lease``.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import signal
import statistics
import sys
import threading
import time
from bisect import bisect_right
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any, Protocol

import optuna
from optuna.trial import FrozenTrial, TrialState

from grpo._fs import tail_lines
from grpo.engine.metrics import add_final_scalars, tensorboard_dir
from grpo.errors import StudyStopped, UserError
from grpo.report.best import best_trial, ranked
from grpo.report.stats import Interval, verdict
from grpo.report.trial_config import config_pointer
from grpo.sweep.backends import TrialBackend, load_backend
from grpo.sweep.execution.scheduler import Finished, JobKey, RayScheduler
from grpo.sweep.execution.seed_result import Event, SeedResult, SeedStatus, StopReason
from grpo.sweep.execution.trial_storage import local_folder, stored_tail
from grpo.sweep.run.collapse import collapse_reason
from grpo.sweep.run.outcome import Complete, Failed, Interrupted, Outcome, Pruned, SeedEnd, trial_outcome
from grpo.sweep.run.preflight import preflight
from grpo.sweep.run.retention import Retention
from grpo.sweep.run.trial_builder import TrialBuilder, TrialPlan, adopted_history
from grpo.sweep.spec.models import STUDY_NAME, SweepSpec
from grpo.sweep.spec.samplers import make_pruner, make_sampler
from grpo.sweep.spec.space import SearchSpace, format_params
from grpo.sweep.study import lease
from grpo.sweep.study.repeats import answer_repeat
from grpo.sweep.study.retry import (
    counts_toward_budget,
    fail_and_maybe_retry,
    holds_budget,
    is_confirmation,
)
from grpo.sweep.study.store import StudyStore, open_study
from grpo.trial_attrs import (
    ATTEMPT,
    CONFIG_POINTER,
    CONFIRMATION_OF,
    CPU_S,
    DEVICES,
    DRIVER,
    FAILURE_REASON,
    INFEASIBLE,
    NODE,
    NODE_ID,
    NPU_S,
    OVERRIDES,
    PRUNED_REASON,
    RESOURCES,
    RESUME_FROM,
    RESUMED_AT_ITERATION,
    RETRY_OF,
    SEEDS,
    TRIAL_DIR,
    VALUE_INTERVAL,
    VALUE_SPREAD,
    VALUES_PER_SEED,
    WALL_S,
)

POLL_S = 0.05
TIMEOUT_KILL_GRACE_S = 30.0
MAX_INFEASIBLE_IN_A_ROW = 200
MAX_DUPLICATES_IN_A_ROW = 50
# Backfill: while the oldest asked trial waits for room, up to LOOKAHEAD asked trials wait behind it and any
# that fits starts. Once `concurrency` trials have started ahead of it, nothing more does until it has:
# running trials drain until it fits, so a large trial is delayed, never starved.
LOOKAHEAD = 4
CONSTRAINT = "feasible"  # Optuna constraint key: > 0 means the point broke a config rule


@dataclass
class _Live:
    """A trial this driver runs: its Optuna handle, its seed jobs and the curves streamed back so far."""

    trial: optuna.Trial
    number: int
    params: dict[str, Any]
    trial_dir: Path
    plan: TrialPlan
    started_wall: float
    confirmation_of: int | None = None  # the search trial it reruns on fresh seeds (never pruned)
    curves: dict[int, dict[str, list[tuple[int, float]]]] = field(default_factory=dict)  # seed -> metric -> points
    last_iteration: dict[int, int] = field(default_factory=dict)  # seed -> iteration
    running: set[int] = field(default_factory=set)  # indices of the seed jobs still running
    ends: list[SeedEnd] = field(default_factory=list)  # the seed jobs that ended, in the order they did
    results: dict[int, tuple[float, SeedResult]] = field(default_factory=dict)  # index -> (end time, result)
    stop_reason: StopReason | None = None
    pruned_note: str | None = None  # where and at what value the pruner stopped it
    stepped: int = 0  # the common step the intermediate values have been reported up to
    last_report: tuple[int, float] | None = None  # (step, value) of the last intermediate value reported
    passed_over: int = 0  # trials asked after it that started first while it waited for room (backfill)

    def job_keys(self) -> list[JobKey]:
        """The scheduler keys of the seed jobs still running."""
        return [(self.number, index) for index in sorted(self.running)]

    def common_step(self) -> int:
        """The furthest iteration every seed has reached (a seed that ended keeps its last one)."""
        return min(self.last_iteration.get(run.seed, 0) for run in self.plan.runs)


@dataclass(frozen=True)
class _Skipped:
    """An asked point that is not run: it breaks a rule, or it already ran (``duplicate_of``)."""

    reason: str
    duplicate_of: int | None = None


class _LostRace:
    """The study's budget went to another driver between our count and our ask."""


_LOST_RACE = _LostRace()


@dataclass(frozen=True)
class RunningTrial:
    number: int
    params: dict[str, Any]
    seeds: int  # seeds running in parallel
    iteration: int  # the step every seed has reached
    objective_so_far: float | None  # mean over seeds of the objective up to that step
    confirmation_of: int | None = None
    iterations: int = 0  # the iterations it runs (train_iters); 0: unknown
    elapsed_s: float = 0.0  # since its seeds were submitted

    def left_s(self, mean_wall_s: float) -> float:
        """Seconds it still needs: its own pace once it has done an iteration, else a finished trial's mean."""
        if self.iteration > 0 and self.iterations > 0 and self.elapsed_s > 0:
            return max(0.0, self.elapsed_s * (self.iterations - self.iteration) / self.iteration)
        return max(0.0, mean_wall_s - self.elapsed_s)


@dataclass(frozen=True)
class ProgressSnapshot:
    """What the live view shows, read from the driver at one moment (the view never reaches into it)."""

    counted: int  # trials that count toward the budget
    running: list[RunningTrial]
    best: tuple[int, float] | None  # (number, value); None before the first complete trial or multi-objective
    total: int = 0  # the budget (spec.trials)
    done: dict[str, int] = field(default_factory=dict)  # counted trials by state: complete, pruned, fail
    mean_wall_s: float | None = None  # mean wall time of the finished trials; None before the first one
    to_start: int = 0  # trials not started yet: the budget left, those waiting for room, confirmations to come
    concurrency: int = 1

    @property
    def eta_s(self) -> float | None:
        """Seconds until the study ends; None until a trial has finished (nothing to estimate from).

        Running trials need what their pace says; each trial still to start a finished trial's mean wall
        time; the work is shared by ``concurrency`` slots, and the study lasts at least as long as its
        slowest running trial."""
        if self.mean_wall_s is None:
            return None
        left = [t.left_s(self.mean_wall_s) for t in self.running]
        work = sum(left) + self.to_start * self.mean_wall_s
        return max(max(left, default=0.0), work / max(1, self.concurrency))


class Progress(Protocol):
    def due(self) -> bool: ...
    def update(self, snapshot: ProgressSnapshot) -> None: ...
    def log(self, message: str) -> None: ...


@dataclass(frozen=True)
class StudyRun:
    """What ``run_study`` leaves: the study, and whether a Ctrl-C or SIGTERM cut it short."""

    study: optuna.Study
    interrupted: bool


class _Interrupt:
    """First Ctrl-C (or SIGTERM, what schedulers and ``kill`` send): stop sampling, let running trials
    stop cleanly. Second: stop now. Neither costs a trial an attempt: the trials resume on the next run."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self) -> None:
        self.count = 0
        self._old: dict[int, Any] = {}

    def __enter__(self) -> _Interrupt:
        if threading.current_thread() is threading.main_thread():
            self._old = {sig: signal.signal(sig, self._handle) for sig in self.SIGNALS}
        return self

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.count += 1
        if self.count == 1:
            name = signal.Signals(signum).name
            print(
                f"\n{name}: no new trials; running trials stop at their next iteration (again to stop now)",
                flush=True,
            )

    def __exit__(self, *exc: object) -> None:
        for sig, old in self._old.items():
            signal.signal(sig, old)


def forked(spec: SweepSpec, name: str) -> SweepSpec:
    """The spec as a new study called ``name`` (``--fork``): same search, fresh storage and trial dirs."""
    if not STUDY_NAME.fullmatch(name):
        raise UserError(f"--fork: study names use letters, digits, '-' and '_' only (got {name!r})")
    return spec.model_copy(update={"study": name})


TrialFinished = Callable[[optuna.Study], None]


def run_study(
    spec: SweepSpec,
    *,
    no_plan: bool = False,
    quiet: bool = True,
    progress: Progress | None = None,
    on_trial_finished: TrialFinished | None = None,
) -> StudyRun:
    """Run or resume ``spec``'s study until it has ``spec.trials`` counted trials (then its confirmation
    stage, when the spec has one). ``on_trial_finished(study)`` is called after each trial's outcome is
    recorded (e.g. to refresh the report); an exception in it is a warning, never the study's end."""
    space = SearchSpace.from_spec(spec)
    backend = load_backend(spec)
    checks = preflight(spec, space, backend, no_plan=no_plan)  # raises UserError before anything is written
    for line in checks.warnings:  # what this machine lacks to launch trials: they may launch elsewhere
        print(f"warning: {line}", file=sys.stderr, flush=True)
    study, _ = open_study(spec, base_config=checks.base_cfg.to_dict())
    me = lease.new_driver_identity()
    study.sampler = make_sampler(spec, space, seed=sampler_seed(spec, study, me))
    study.pruner = make_pruner(spec)
    builder = TrialBuilder(spec, space, backend, checks.base_cfg, (me["host"], me["pid"]), no_plan=no_plan)
    driver = _Driver(
        spec, space, backend, study, builder, me, quiet=quiet, progress=progress, on_trial_finished=on_trial_finished
    )
    driver.loop()
    return StudyRun(study, driver.interrupted)


def sampler_seed(spec: SweepSpec, study: optuna.Study, me: lease.DriverIdentity) -> int | None:
    """The sampler seed of this run: ``sampler.seed`` for a new study (a seeded study starts the same way
    every time); for a study with trials, one derived from the seed, the trials stored and this driver, so a
    restarted or a second driver does not replay the proposals already made (None: Optuna's random seed)."""
    if spec.sampler.seed is None:
        return None
    stored = len(study.get_trials(deepcopy=False))
    if stored == 0:
        return spec.sampler.seed
    digest = hashlib.sha256(f"{spec.sampler.seed}:{stored}:{me['id']}".encode()).digest()
    return int.from_bytes(digest[:4], "big")


class _Driver:
    def __init__(
        self,
        spec: SweepSpec,
        space: SearchSpace,
        backend: TrialBackend,
        study: optuna.Study,
        builder: TrialBuilder,
        me: lease.DriverIdentity,
        *,
        quiet: bool,
        progress: Progress | None,
        on_trial_finished: TrialFinished | None = None,
    ):
        self.spec, self.space, self.backend, self.study = spec, space, backend, study
        self.store = StudyStore(study)
        self.builder, self.me = builder, me
        self.quiet, self.progress = quiet, progress
        self.on_trial_finished = on_trial_finished
        self.live: dict[int, _Live] = {}
        self.waiting: list[_Live] = []  # asked, waiting for room on the cluster, in the order asked
        self.pruning = not spec.multi_objective  # Optuna's report/should_prune are single-objective
        self.reducers = [o.reducer() for o in spec.objectives]
        self.interrupted = False
        self.exhausted = False  # the sampler only repeats points that already ran
        self.infeasible_in_a_row = self.duplicates_in_a_row = 0
        self.stage_started = False  # this run has enqueued what the confirmation stage lacked
        self.io_error: OSError | None = None  # the driver could not write (storage or trial files)
        stored = builder.storage  # the study's folder in trial storage (None without it)
        # A local trial storage is reached through each trial folder's `runs` link; an object store directly.
        remote = stored if stored is not None and local_folder(stored) is None else None
        self.retention = Retention(spec.keep_final_checkpoints, spec.study_dir, stored=remote)

    # -- budget ---------------------------------------------------------------------------------------
    def _budget_left(self) -> int:
        return self.spec.trials - sum(1 for t in self.study.get_trials(deepcopy=False) if holds_budget(t))

    def _within_budget(self, number: int) -> bool:
        """Two drivers may both see one budget slot left: the trial with the larger number yields."""
        ahead = sum(1 for t in self.study.get_trials(deepcopy=False) if t.number < number and holds_budget(t))
        return ahead < self.spec.trials

    def _search_spent(self) -> bool:
        return self.exhausted or self._budget_left() <= 0

    def _search_finished(self) -> bool:
        """The search is over and none of its trials runs here: the confirmation stage may rank them."""
        if self.waiting or any(lv.confirmation_of is None for lv in self.live.values()):
            return False
        counted = sum(1 for t in self.study.get_trials(deepcopy=False) if counts_toward_budget(t))
        return self.exhausted or counted >= self.spec.trials

    def _confirmations_waiting(self) -> bool:
        waiting = self.study.get_trials(deepcopy=False, states=(TrialState.WAITING,))
        return any(is_confirmation(t) for t in waiting)

    # -- main loop ------------------------------------------------------------------------------------
    def loop(self) -> None:
        lease.reap(self.store, self.me, self.spec.retries)
        self._apply_retention()  # a resumed study: what ended before (the reaped trials now wait for a retry)
        cluster = self.spec.cluster
        self.sched = RayScheduler(address=cluster.address, num_cpus=cluster.num_cpus, resources=dict(cluster.resources))
        last_beat = last_reap = time.monotonic()
        with _Interrupt() as interrupt:
            try:
                while True:
                    try:
                        if interrupt.count == 1:
                            for live in self.live.values():
                                if live.stop_reason is None:
                                    live.stop_reason = StopReason.INTERRUPTED
                                    self._stop(live, StopReason.INTERRUPTED)
                        elif interrupt.count >= 2:
                            for live in self.live.values():
                                for key in live.job_keys():
                                    self.sched.kill(key)
                        if interrupt.count == 0:
                            self._fill_slots()
                            if self.spec.confirm is not None and not self.stage_started and self._search_finished():
                                self._start_confirmation()
                        if not self.live and not self.waiting and (interrupt.count or self._finished()):
                            break
                        finished, events = self.sched.poll(POLL_S if self.live else 0.01)
                        self._on_events(events)
                        ended = [live for live in map(self._on_finished, finished) if live is not None]
                        if ended and interrupt.count == 0:
                            # Their room goes to the waiting trials first (no journal write before the start);
                            # the ended trials are told right after (a crash in between reaps and retries them).
                            while len(self.live) < self.spec.concurrency and self._start_one_waiting():
                                pass
                        for live in ended:
                            self._finish(live)
                        self._check_timeouts()
                        now = time.monotonic()
                        if now - last_beat > lease.HEARTBEAT_EVERY_S:
                            held = [lv.trial for lv in [*self.live.values(), *self.waiting]]
                            self.store.beat(held, time.time())
                            last_beat = now
                        if now - last_reap > lease.STALE_AFTER_S:
                            lease.reap(self.store, self.me, self.spec.retries)
                            last_reap = now
                        if self.progress is not None and self.progress.due():
                            self.progress.update(self.snapshot())
                    except OSError as err:  # a full disk, a lost mount: stop as on Ctrl-C, resumable
                        if self.io_error is not None or not self.live:
                            self.io_error = self.io_error or err
                            break  # it fails again while stopping (or nothing runs): stop now
                        self.io_error = err
                        interrupt.count = max(interrupt.count, 1)
                        self._say(f"I/O error in the driver: {err}; no new trials, the running ones stop")
            finally:
                self.interrupted = interrupt.count > 0
                with contextlib.suppress(OSError):  # storage unwritable: the next run reaps them (no attempt used)
                    self._abandon_waiting()
                self.sched.shutdown()
                if self.progress is not None:
                    self.progress.update(self.snapshot())
        if self.io_error is not None:
            failed = self.io_error
            where = f"{failed.filename}: " if failed.filename else ""
            raise StudyStopped(
                f"{where}{failed.strerror or failed}: the driver stopped the study; the running trials stopped and "
                "resume when you rerun the same command (free space first)"
            )

    def _finished(self) -> bool:
        """Nothing is left to ask: the search is spent and the confirmation stage (if any) has nothing waiting."""
        if not self._search_spent():
            return False
        if self.spec.confirm is not None and not self.stage_started:
            return False
        return not self._confirmations_waiting()

    # -- asking ---------------------------------------------------------------------------------------
    def _may_ask(self) -> bool:
        return not self._search_spent() or self._confirmations_waiting()

    def _fill_slots(self) -> None:
        while len(self.live) < self.spec.concurrency:
            if self._start_one_waiting():
                continue
            if len(self.waiting) >= LOOKAHEAD or not self._may_ask():
                return
            asked = self._ask()
            if isinstance(asked, _LostRace):
                return
            if isinstance(asked, _Skipped):
                self._count_skip(asked)
                continue
            self.infeasible_in_a_row = self.duplicates_in_a_row = 0
            self.waiting.append(asked)

    def _start_one_waiting(self) -> bool:
        """Start the oldest waiting trial that fits now (gang admission: all its seeds at once); True if one did.

        A trial behind the oldest starts only while fewer than ``concurrency`` trials have started ahead of
        the oldest (backfill with a starvation guard); after that, only the oldest may start.
        """
        if not self.waiting:
            return False
        head = self.waiting[0]
        candidates = self.waiting if head.passed_over < self.spec.concurrency else [head]
        for live in candidates:
            if self.sched.fits(live.plan.options, count=len(live.plan.jobs)):
                self.waiting.remove(live)
                if live is not head:
                    head.passed_over += 1
                self._submit(live)
                return True
        return False

    def _count_skip(self, skipped: _Skipped) -> None:
        """Too many infeasible points in a row is the spec's fault; too many repeats means the space is spent."""
        if skipped.duplicate_of is not None:
            self.duplicates_in_a_row += 1
            if self.duplicates_in_a_row >= MAX_DUPLICATES_IN_A_ROW:
                self.exhausted = True
                self._say(
                    f"the sampler proposed {MAX_DUPLICATES_IN_A_ROW} points in a row that already ran: the search "
                    f"space looks exhausted, no new trials"
                )
            return
        self.infeasible_in_a_row += 1
        if self.infeasible_in_a_row >= MAX_INFEASIBLE_IN_A_ROW:
            raise UserError(
                f"{self.spec.path}: search: {MAX_INFEASIBLE_IN_A_ROW} sampled points in a row broke a "
                f"config rule; last: {skipped.reason}"
            )

    def _ran_before(self, params: dict[str, Any], number: int) -> FrozenTrial | None:
        """The trial that ran (or runs) these very parameters, if any."""
        for t in self.study.get_trials(deepcopy=False):
            if t.number != number and t.params == params and holds_budget(t):
                return t
        return None

    def _confirmed_before(self, source: int, number: int) -> int | None:
        """The first confirmation trial of ``source`` enqueued before trial ``number`` (retries aside)."""
        for t in self.study.get_trials(deepcopy=False):
            if t.number < number and t.user_attrs.get(CONFIRMATION_OF) == source and t.user_attrs.get(RETRY_OF) is None:
                return t.number
        return None

    def _ask(self) -> _Live | _Skipped | _LostRace:
        """Ask Optuna for a point and build its trial: the trial to launch, a skipped point, or ``_LOST_RACE``."""
        trial = self.study.ask()
        trial.set_user_attr(DRIVER, self.me)  # heartbeat: datetime_start until the first beat
        params = self.space.suggest(trial)
        number = trial.number
        confirmation_of = trial.user_attrs.get(CONFIRMATION_OF)
        if trial.user_attrs.get(RETRY_OF) is None and confirmation_of is None:
            earlier = self._ran_before(params, number)
            if earlier is not None:  # never rerun a point: the repeat is told the earlier trial's result
                answer_repeat(self.study, trial, earlier)
                return _Skipped(f"same parameters as trial {earlier.number}", duplicate_of=earlier.number)
        if confirmation_of is not None and trial.user_attrs.get(RETRY_OF) is None:
            first = self._confirmed_before(confirmation_of, number)
            if first is not None:  # two drivers reached the stage at once and both enqueued it: run one
                trial.set_user_attr(INFEASIBLE, True)
                trial.set_user_attr(FAILURE_REASON, f"not run: trial {first} already confirms trial {confirmation_of}")
                self.study.tell(trial, state=TrialState.FAIL)
                return _Skipped(f"trial {first} already confirms trial {confirmation_of}")
        if confirmation_of is None and not self._within_budget(number):
            trial.set_user_attr(INFEASIBLE, True)
            trial.set_user_attr(PRUNED_REASON, "not run: the study reached its trial budget (another driver)")
            self.study.tell(trial, state=TrialState.PRUNED)
            if trial.user_attrs.get(RETRY_OF) is not None:  # a retry keeps its place for the next driver
                keep = (RETRY_OF, ATTEMPT, RESUME_FROM)
                frozen = self.store.frozen(trial)
                self.store.enqueue_retry(frozen, {k: frozen.user_attrs[k] for k in keep if k in frozen.user_attrs})
            return _LOST_RACE
        self.store.record_retry_lineage(trial)
        trial_dir = (self.spec.study_dir / "trials" / str(number)).resolve()
        resume_from = trial.user_attrs.get(RESUME_FROM)
        # A confirmation trial carries its seeds (fresh, and the same for every confirmation trial).
        carried = trial.user_attrs.get(SEEDS) if confirmation_of is not None else None
        seeds = [int(s) for s in carried] if carried else self.builder.seeds(list(range(self.spec.seeds)))
        try:
            plan = self.builder.build(number, params, trial_dir, resume_from, seeds)
            if not self.sched.can_ever_fit(plan.options, count=len(seeds)):
                raise UserError(self._never_fits(plan.options, len(seeds), confirmation_of is not None))
        except UserError as err:
            reason = "; ".join(err.problems)
            trial.set_user_attr(INFEASIBLE, True)
            trial.set_user_attr(PRUNED_REASON, f"infeasible: {reason}")
            trial.set_constraint(CONSTRAINT, 1.0)
            self.study.tell(trial, state=TrialState.PRUNED)
            self._say(f"trial {number} pruned before launch: {reason}")
            return _Skipped(reason)
        trial.set_constraint(CONSTRAINT, 0.0)
        plan.write_files(trial_dir)
        # Written together (one journal append); start/end times are Optuna's datetime_start/complete. The
        # config stays in the trial folder: the attr points at it (grpo.report.trial_config reads it back).
        attrs: dict[str, Any] = {
            OVERRIDES: plan.overrides,
            CONFIG_POINTER: config_pointer(trial_dir / "config.yaml", self.spec.study_dir),
            SEEDS: seeds,
            TRIAL_DIR: str(trial_dir),
            RESOURCES: plan.options,
        }
        if ATTEMPT not in trial.user_attrs:  # a retry carries its attempt from its enqueueing
            attrs[ATTEMPT] = 1
        self.store.set_attrs(trial, attrs)
        live = _Live(trial, number, params, trial_dir, plan, started_wall=time.time(), confirmation_of=confirmation_of)
        if resume_from and plan.resumed:
            start_at, history = adopted_history(resume_from, plan.jobs)
            for seed, iteration, metrics in history:
                self._record(live, seed, iteration, metrics)
            self._report_progress(live)
            trial.set_user_attr(RESUMED_AT_ITERATION, {str(k): v for k, v in start_at.items()})
        return live

    def _never_fits(self, options: dict[str, Any], count: int, confirmation: bool) -> str:
        if count == 1:
            return f"trial needs {options} but the cluster has {self.sched.total}"
        key = "confirm.seeds" if confirmation else "seeds"
        return (
            f"the trial's {count} seeds ({key}) run at once, each with {options}, but the cluster has "
            f"{self.sched.total}; lower {key} or give the cluster more"
        )

    def _submit(self, live: _Live) -> None:
        for job in live.plan.jobs:
            self.sched.submit((live.number, job.index), job, live.plan.options)
        live.running = {job.index for job in live.plan.jobs}
        live.started_wall = time.time()
        self.live[live.number] = live
        stage = f" (confirms trial {live.confirmation_of})" if live.confirmation_of is not None else ""
        seeds = f", {len(live.plan.jobs)} seeds" if len(live.plan.jobs) > 1 else ""
        self._say(f"trial {live.number} started{stage}: {format_params(live.params)}{seeds}")

    def _stop(self, live: _Live, reason: StopReason) -> None:
        for key in live.job_keys():
            self.sched.stop(key, reason)

    def _abandon_waiting(self) -> None:
        for live in self.waiting:  # asked but never launched: give it back as a retry, no attempt used
            frozen = self.store.frozen(live.trial)
            reason = "not launched before the driver stopped"
            fail_and_maybe_retry(self.store, frozen, reason, self.spec.retries, count_attempt=False, launched=False)
        self.waiting = []

    # -- metrics --------------------------------------------------------------------------------------
    def _record(self, live: _Live, seed: int, iteration: int, metrics: dict[str, Any]) -> None:
        if iteration <= live.last_iteration.get(seed, -1):  # -1: iteration 0 is the base policy's evaluation
            return  # already have it (a resumed run re-reporting, or a duplicate)
        live.last_iteration[seed] = iteration
        curves = live.curves.setdefault(seed, {})
        for name, value in metrics.items():
            if isinstance(value, (int, float)):
                curves.setdefault(name, []).append((iteration, float(value)))
        with open(live.trial_dir / "metrics.jsonl", "a") as fh:
            fh.write(json.dumps({"iteration": iteration, "seed": seed, **metrics}) + "\n")

    def _report_progress(self, live: _Live) -> bool:
        """Report the mean over seeds at each step every seed has now reached; True when the step moved.

        Seeds run in parallel and drift apart: the pruner sees a step only once the slowest seed is
        there, so each intermediate value averages the same iterations of every seed.
        """
        step = live.common_step()
        if step <= live.stepped:
            return False
        if self.pruning:
            for t in range(live.stepped + 1, step + 1):
                value = self._objective_so_far(live, 0, t)
                if value is not None and math.isfinite(value):
                    live.trial.report(value, step=t)
                    live.last_report = (t, value)
        live.stepped = step
        return True

    def _on_events(self, events: dict[JobKey, list[Event]]) -> None:
        moved: set[int] = set()
        for (number, _), evs in events.items():
            live = self.live.get(number)
            if live is None or not evs:
                continue
            for seed, iteration, metrics in evs:
                self._record(live, seed, iteration, metrics)
            moved.add(number)
        for number in sorted(moved):
            live = self.live[number]
            if self._report_progress(live):
                self._maybe_prune(live)

    def _maybe_prune(self, live: _Live) -> None:
        if not self.pruning or live.stop_reason is not None or live.confirmation_of is not None:
            return  # confirmation trials are never pruned: they exist to measure the winner
        iters = live.plan.train_iters
        if live.common_step() >= iters or live.last_report is None:
            return  # it ran all its iterations: it completes, it is never pruned at its last step
        seeds = len(live.plan.jobs)
        of_seeds = f", mean of {seeds} seeds" if seeds > 1 else ""
        collapsed = self._collapsed(live)
        if collapsed is not None:
            live.pruned_note = collapsed + of_seeds
        elif live.trial.should_prune():
            objective = self.spec.objectives[0]
            step, value = live.last_report
            live.pruned_note = (
                f"pruned by the {self.spec.pruner.name} pruner at iteration {step} of {iters}: "
                f"{objective.metric} ({objective.reduce}) so far {value:.4g}" + of_seeds
            )
        else:
            return
        live.stop_reason = StopReason.PRUNED
        self._stop(live, StopReason.PRUNED)

    def _collapsed(self, live: _Live) -> str | None:
        """Why the collapse rule (``pruner.collapse``) stops the trial now, or None."""
        rule = self.spec.pruner.collapse
        if rule is None:
            return None
        curves = [live.curves.get(run.seed, {}).get(rule.metric) or [] for run in live.plan.runs]
        return collapse_reason(rule, curves, live.common_step(), live.plan.train_iters)

    def _seed_value(self, live: _Live, seed: int, index: int, upto: int | None = None) -> float | None:
        """Objective ``index`` reduced over one seed's curve (up to iteration ``upto`` when given)."""
        points = live.curves.get(seed, {}).get(self.spec.objectives[index].metric)
        if points and points[0][0] == 0:
            points = points[1:]  # iteration 0 is the base policy's evaluation, not what the trial achieved
        if points and upto is not None:
            points = points[: bisect_right(points, upto, key=lambda p: p[0])]  # iterations ascend
        if not points:
            return None
        return self.reducers[index].reduce([v for _, v in points])

    def _objective_so_far(self, live: _Live, index: int, upto: int) -> float | None:
        """The mean over seeds of objective ``index`` reduced over each seed's curve up to ``upto``."""
        values = [self._seed_value(live, run.seed, index, upto) for run in live.plan.runs]
        known = [v for v in values if v is not None]
        return statistics.fmean(known) if known and len(known) == len(values) else None

    # -- finishing ------------------------------------------------------------------------------------
    def _on_finished(self, fin: Finished) -> _Live | None:
        """A seed job ended: the trial, when it was its last (``_finish`` records it), else None."""
        number, index = fin.key
        live = self.live.get(number)
        if live is None:
            return None
        result = fin.result or {}
        live.running.discard(index)
        live.results[index] = (time.time(), result)
        seed = live.plan.jobs[index].run.seed
        live.ends.append(SeedEnd(seed, fin.error, result))
        died = fin.error is not None and live.stop_reason not in (StopReason.TIMEOUT, StopReason.INTERRUPTED)
        if (died or result.get("status") == SeedStatus.FAILED) and live.stop_reason is None and live.running:
            # The trial fails with this seed; its siblings stop (the retry resumes each from its checkpoint).
            live.stop_reason = StopReason.FAILED
            self._stop(live, StopReason.FAILED)
            self._say(f"trial {number}: seed {seed} failed; stopping its other seeds")
        if live.running:
            return None
        del self.live[number]
        return live

    def _finish(self, live: _Live) -> None:
        """Record a trial whose seeds all ended: its usage, its outcome (told to Optuna), the callbacks."""
        number = live.number
        self._record_usage(live)
        outcome = trial_outcome(
            seeds=live.ends,
            stop_reason=live.stop_reason,
            timeout_s=self.spec.timeout_per_trial,
            objectives=[o.metric for o in self.spec.objectives],
            seed_values=[
                [self._seed_value(live, r.seed, i) for r in live.plan.runs] for i in range(len(self.reducers))
            ],
            reported=sorted({m for curves in live.curves.values() for m in curves}),
            log_lines=_tail(live),
        )
        self._record_outcome(live, outcome)
        if live.confirmation_of is not None:
            self._maybe_print_verdict()
        if self.on_trial_finished is not None:
            try:
                self.on_trial_finished(self.study)
            except Exception as err:  # e.g. the report: it must never end the study
                self._say(f"warning: after trial {number}: {type(err).__name__}: {err}")

    def _record_usage(self, live: _Live) -> None:
        """Wall time, CPU- and device-seconds summed over the seeds, and where they ran."""
        ended = max(end for end, _ in live.results.values())  # when its last seed was seen to end
        results = [result for _, result in live.results.values()]
        held = self.backend.devices_held(live.plan.options)
        usage = {
            WALL_S: ended - live.started_wall,
            CPU_S: sum(float(r.get("cpu_s", 0.0)) for r in results),
            NPU_S: sum(end - live.started_wall for end, _ in live.results.values()) * held,
            NODE: ",".join(sorted({str(r["node"]) for r in results if r.get("node")})) or None,
            # Ray's node ids: several Ray nodes may share one host (the name above)
            NODE_ID: ",".join(sorted({str(r["node_id"]) for r in results if r.get("node_id")})) or None,
            DEVICES: [r["devices"] for r in results if r.get("devices")],
        }
        # Unset = zero / none; the rest is written together (one journal append).
        self.store.set_attrs(live.trial, {k: v for k, v in usage.items() if v or k == WALL_S})

    def _record_outcome(self, live: _Live, outcome: Outcome) -> None:
        trial, number = live.trial, live.number
        if isinstance(outcome, Complete):
            per_seed = {VALUES_PER_SEED: outcome.per_seed, VALUE_SPREAD: outcome.spreads}
            self.store.set_attrs(trial, {**per_seed, VALUE_INTERVAL: outcome.intervals})  # one journal append
            self.study.tell(trial, outcome.values if self.spec.multi_objective else outcome.values[0])
            shown = ", ".join(
                f"{o.metric}={interval_text(v, iv, len(seeds))}"
                for o, v, iv, seeds in zip(
                    self.spec.objectives, outcome.values, outcome.intervals, outcome.per_seed, strict=True
                )
            )
            self._say(f"trial {number} complete: {shown}")
            self._objective_to_tensorboard(live, outcome.per_seed)
        elif isinstance(outcome, Pruned):
            trial.set_user_attr(PRUNED_REASON, live.pruned_note or outcome.reason)
            self.study.tell(trial, state=TrialState.PRUNED)
            self._say(f"trial {number} pruned at iteration {live.common_step()}")
            so_far = [[self._seed_value(live, r.seed, i) for r in live.plan.runs] for i in range(len(self.reducers))]
            self._objective_to_tensorboard(live, so_far)
        elif isinstance(outcome, Interrupted):
            fail_and_maybe_retry(
                self.store, self.store.frozen(trial), outcome.reason, self.spec.retries,
                last_log_lines=outcome.log_lines, count_attempt=False,
            )  # fmt: skip
            self._say(f"trial {number} interrupted; it resumes from its checkpoint on the next run")
        elif isinstance(outcome, Failed):
            retried = fail_and_maybe_retry(
                self.store,
                self.store.frozen(trial),
                outcome.reason,
                self.spec.retries,
                last_log_lines=outcome.log_lines,
            )
            self._say(
                f"trial {number} failed: {outcome.reason}" + (" (will retry)" if retried else " (no retries left)")
            )
        self._apply_retention()

    def _objective_to_tensorboard(self, live: _Live, per_seed: Sequence[Sequence[float | None]]) -> None:
        """Each seed run's objective value(s) (``per_seed[i][k]``: objective i, seed k) as the scalar
        ``objective/<metric>`` in its TensorBoard run, where the HParams view shows it as a metric column next to
        the trial's parameters (its seeds grouped: their mean). Only runs that wrote TensorBoard; a failure to
        write is a warning."""
        if not self.spec.tracking.tensorboard:
            return
        for k, run in enumerate(live.plan.runs):
            values = {
                f"objective/{o.metric}": float(v)
                for o, v in zip(self.spec.objectives, (column[k] for column in per_seed), strict=True)
                if v is not None and math.isfinite(v)
            }
            run_dir = Path(run.run_dir)
            if not values or not tensorboard_dir(run.cfg, run_dir).is_dir():
                continue
            try:
                add_final_scalars(run.cfg, run_dir, values, live.last_iteration.get(run.seed, 0))
            except Exception as err:  # TensorBoard is a view: it must never end the study
                self._warn(f"trial {live.number}: objective not written to TensorBoard: {err}")

    def _apply_retention(self) -> None:
        """Remove the checkpoints ``keep_final_checkpoints`` lets go now (never what a resume needs)."""
        try:
            removed, warnings = self.retention.apply(self.study)
        except OSError as err:  # a file system error deciding or removing: keep everything, say so
            removed, warnings = [], [f"checkpoints not cleaned up: {err}"]
        for line in warnings:
            self._warn(line)
        if removed:
            numbers = ", ".join(str(n) for n in removed)
            rule = self.spec.keep_final_checkpoints
            self._say(f"checkpoints of trial(s) {numbers} removed (keep_final_checkpoints: {rule})")

    # -- confirmation stage ---------------------------------------------------------------------------
    def _start_confirmation(self) -> None:
        """Enqueue the confirmation trials that are missing: the ``top_k`` best complete search trials'
        parameters on fresh seeds. Idempotent: a source that already has a confirmation trial (in any
        state: retries carry ``confirmation_of``) gets none, so a rerun adds only what a crash lost."""
        confirm = self.spec.confirm
        assert confirm is not None
        self.stage_started = True
        trials = self.study.get_trials(deepcopy=False)
        covered = {t.user_attrs[CONFIRMATION_OF] for t in trials if is_confirmation(t)}
        top = [t for t in ranked(self.study) if not is_confirmation(t)][: confirm.top_k]
        missing = [t for t in top if t.number not in covered]
        if not missing:
            return
        seeds = self.builder.seeds(self.spec.confirmation_seed_offsets())
        for source in missing:
            attrs = {CONFIRMATION_OF: source.number, ATTEMPT: 1, SEEDS: seeds}
            self.store.enqueue_confirmation(source.params, attrs)
        sources = ", ".join(str(t.number) for t in missing)
        self._say(f"confirmation stage: trial(s) {sources} rerun on fresh seeds {seeds}")

    def _maybe_print_verdict(self) -> None:
        """Once no confirmation trial runs or waits any more: the winner, its interval, and whether it is
        distinguishable from the runner-up."""
        if any(lv.confirmation_of is not None for lv in self.live.values()):
            return
        trials = self.study.get_trials(deepcopy=False)
        if any(is_confirmation(t) and t.state in (TrialState.RUNNING, TrialState.WAITING) for t in trials):
            return
        found = verdict(trials, self.study.directions[0])
        if found is not None:
            self._say(found.text())

    def _check_timeouts(self) -> None:
        limit = self.spec.timeout_per_trial
        if not limit:
            return
        now = time.monotonic()
        for live in self.live.values():
            keys = live.job_keys()
            starts = [t for t in (self.sched.started_at(k) for k in keys) if t is not None]
            if not starts or now - min(starts) <= limit:
                continue
            # A failed seed's siblings are already stopping.
            if live.stop_reason not in (StopReason.TIMEOUT, StopReason.FAILED):
                live.stop_reason = StopReason.TIMEOUT
                self._stop(live, StopReason.TIMEOUT)
                continue
            sent = [t for t in (self.sched.stop_sent_at(k) for k in keys) if t is not None]
            if now - min(sent, default=now) > min(TIMEOUT_KILL_GRACE_S, limit):
                for key in keys:
                    self.sched.kill(key)

    # -- what the user sees ---------------------------------------------------------------------------
    def snapshot(self) -> ProgressSnapshot:
        trials = self.study.get_trials(deepcopy=False)
        now = time.time()
        running = []
        for number, live in sorted(self.live.items()):
            step = live.common_step()
            value = self._objective_so_far(live, 0, step) if step else None
            running.append(
                RunningTrial(
                    number, live.params, len(live.plan.jobs), step, value, live.confirmation_of,
                    iterations=live.plan.train_iters, elapsed_s=max(0.0, now - live.started_wall),
                )
            )  # fmt: skip
        best = best_trial(self.study) if not self.spec.multi_objective else None
        counted = [t for t in trials if counts_toward_budget(t)]
        done: dict[str, int] = {}
        for t in counted:
            done[t.state.name.lower()] = done.get(t.state.name.lower(), 0) + 1
        finished = counted + [t for t in trials if is_confirmation(t) and t.state == TrialState.COMPLETE]
        walls = [float(w) for t in finished if isinstance(w := t.user_attrs.get(WALL_S), (int, float))]
        to_start = 0 if self.exhausted else max(0, self._budget_left())
        to_start += len(self.waiting)  # asked, waiting for room
        if self.spec.confirm is not None:
            waiting = self.study.get_trials(deepcopy=False, states=(TrialState.WAITING,))
            started = self.stage_started or any(is_confirmation(t) for t in trials)
            to_start += sum(1 for t in waiting if is_confirmation(t)) if started else self.spec.confirm.top_k
        return ProgressSnapshot(
            len(counted),
            running,
            (best.number, best.values[0]) if best is not None else None,
            total=self.spec.trials,
            done=done,
            mean_wall_s=statistics.fmean(walls) if walls else None,
            to_start=to_start,
            concurrency=self.spec.concurrency,
        )

    def _say(self, message: str) -> None:
        if self.progress is not None:
            self.progress.log(message)
        elif not self.quiet:
            print(message, flush=True)

    def _warn(self, message: str) -> None:
        """A warning line: in the live view, else on stderr (also with ``--quiet``)."""
        if self.progress is not None:
            self.progress.log(f"warning: {message}")
        else:
            print(f"warning: {message}", file=sys.stderr, flush=True)


def interval_text(value: float, interval: list[float] | None, seeds: int) -> str:
    """A trial's value as ``stats.Interval.text`` shows it: mean, 95 % interval, seeds."""
    low, high = interval if interval else (None, None)
    return Interval(value, low, high, seeds).text()


def _tail(live: _Live, n: int = 20) -> list[str]:
    """The last log lines of the seed that failed first, else of the last seed run that wrote any."""
    failed = [e.seed for e in live.ends if e.worker_error is not None or e.result.get("status") == SeedStatus.FAILED]
    runs = live.plan.runs
    order = [r for r in runs if failed and r.seed == failed[0]] or list(reversed(runs))
    for run in order:
        log = Path(run.run_dir) / "train.log"
        lines = stored_tail(run.storage, "train.log", n) if run.storage else tail_lines(log, n)
        if lines:
            return lines
    return []
