"""The study driver: Optuna ask/tell in one loop, trials dispatched asynchronously to Ray.

    spec -> (config + search space) -> study -> scheduler -> backend runs trial -> metrics -> storage

One loop iteration: reap trials of dead drivers (periodically), fill free slots (ask, build the trial,
prune infeasible points at once, submit), poll Ray for metrics (persist them, report intermediate values,
stop pruned trials) and finished trials (decide their outcome, record it), beat the heartbeat. A finished
trial frees its slot at once; there are no batch barriers. The study stops at ``spec.trials`` trials
that count (see ``retry.counts_toward_budget``), counted in storage, so several drivers on one study
share the budget. The parts: ``trial_builder`` (configs and jobs), ``outcome`` (what a finished trial
means), ``study_store`` (writes Optuna's ``Trial`` does not cover), ``scheduler`` (Ray), ``lease``.
"""

from __future__ import annotations

import hashlib
import json
import math
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any, Protocol

import optuna
from optuna.trial import TrialState

from grpo._fs import tail_lines
from grpo.errors import UserError
from grpo.report.best import best_trial
from grpo.sweep import lease
from grpo.sweep.backends import TrialBackend, load_backend
from grpo.sweep.outcome import Complete, Failed, Interrupted, Outcome, Pruned, decide
from grpo.sweep.preflight import preflight
from grpo.sweep.retry import counts_toward_budget, fail_and_maybe_retry, holds_budget
from grpo.sweep.samplers import make_pruner, make_sampler
from grpo.sweep.scheduler import Finished, RayScheduler
from grpo.sweep.space import SearchSpace, format_params
from grpo.sweep.spec import STUDY_NAME, SweepSpec
from grpo.sweep.study_store import StudyStore, open_study
from grpo.sweep.trial_builder import TrialBuilder, TrialPlan, adopted_history
from grpo.sweep.worker import Event

POLL_S = 0.05
TIMEOUT_KILL_GRACE_S = 30.0
MAX_INFEASIBLE_IN_A_ROW = 200
MAX_DUPLICATES_IN_A_ROW = 50
CONSTRAINT = "feasible"  # Optuna constraint key: > 0 means the point broke a config rule


@dataclass
class _Live:
    """A trial this driver runs: its Optuna handle and the curves streamed back so far."""

    trial: optuna.Trial
    number: int
    params: dict[str, Any]
    trial_dir: Path
    plan: TrialPlan
    started_wall: float
    curves: dict[int, dict[str, list[tuple[int, float]]]] = field(default_factory=dict)  # seed -> metric -> points
    last_iteration: dict[int, int] = field(default_factory=dict)  # seed -> iteration
    stop_reason: str | None = None
    pruned_note: str | None = None  # where and at what value the pruner stopped it


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
    seed: int | None  # the seed that got furthest
    iteration: int
    objective_so_far: float | None


@dataclass(frozen=True)
class ProgressSnapshot:
    """What the live view shows, read from the driver at one moment (the view never reaches into it)."""

    counted: int  # trials that count toward the budget
    running: list[RunningTrial]
    best: tuple[int, float] | None  # (number, value); None before the first complete trial or multi-objective


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


def run_study(
    spec: SweepSpec, *, no_plan: bool = False, quiet: bool = True, progress: Progress | None = None
) -> StudyRun:
    """Run or resume ``spec``'s study until it has ``spec.trials`` counted trials."""
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
    driver = _Driver(spec, space, backend, study, builder, me, quiet=quiet, progress=progress)
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
    ):
        self.spec, self.space, self.backend, self.study = spec, space, backend, study
        self.store = StudyStore(study)
        self.builder, self.me = builder, me
        self.quiet, self.progress = quiet, progress
        self.live: dict[int, _Live] = {}
        self.pending: _Live | None = None  # asked, but waiting for room on the cluster
        self.pruning = not spec.multi_objective  # Optuna's report/should_prune are single-objective
        self.reducers = [o.reducer() for o in spec.objectives]
        self.interrupted = False
        self.exhausted = False  # the sampler only repeats points that already ran
        self.infeasible_in_a_row = self.duplicates_in_a_row = 0

    # -- budget ---------------------------------------------------------------------------------------
    def _budget_left(self) -> int:
        return self.spec.trials - sum(1 for t in self.study.get_trials(deepcopy=False) if holds_budget(t))

    def _within_budget(self, number: int) -> bool:
        """Two drivers may both see one budget slot left: the trial with the larger number yields."""
        ahead = sum(1 for t in self.study.get_trials(deepcopy=False) if t.number < number and holds_budget(t))
        return ahead < self.spec.trials

    # -- main loop ------------------------------------------------------------------------------------
    def loop(self) -> None:
        lease.reap(self.store, self.me, self.spec.retries)
        cluster = self.spec.cluster
        self.sched = RayScheduler(address=cluster.address, num_cpus=cluster.num_cpus, resources=dict(cluster.resources))
        last_beat = last_reap = time.monotonic()
        with _Interrupt() as interrupt:
            try:
                while True:
                    if interrupt.count == 1:
                        for live in self.live.values():
                            if live.stop_reason is None:
                                live.stop_reason = "interrupted"
                                self.sched.stop(live.number, "interrupted")
                    elif interrupt.count >= 2:
                        for number in list(self.live):
                            self.sched.kill(number)
                    if interrupt.count == 0 and not self.exhausted:
                        self._fill_slots()
                    done = interrupt.count or self.exhausted or self._budget_left() <= 0
                    if not self.live and self.pending is None and done:
                        break
                    finished, events = self.sched.poll(POLL_S if self.live else 0.01)
                    for number, evs in events.items():
                        self._on_events(number, evs)
                    for fin in finished:
                        self._on_finished(fin)
                    self._check_timeouts()
                    now = time.monotonic()
                    if now - last_beat > lease.HEARTBEAT_EVERY_S:
                        self.store.beat([lv.trial for lv in self.live.values()], time.time())
                        last_beat = now
                    if now - last_reap > lease.STALE_AFTER_S:
                        lease.reap(self.store, self.me, self.spec.retries)
                        last_reap = now
                    if self.progress is not None and self.progress.due():
                        self.progress.update(self.snapshot())
            finally:
                self.interrupted = interrupt.count > 0
                self._abandon_pending()
                self.sched.shutdown()
                if self.progress is not None:
                    self.progress.update(self.snapshot())

    # -- asking ---------------------------------------------------------------------------------------
    def _fill_slots(self) -> None:
        while len(self.live) < self.spec.concurrency:
            if self.pending is None:
                if self._budget_left() <= 0 or self.exhausted:
                    return
                asked = self._ask()
                if isinstance(asked, _LostRace):
                    return
                if isinstance(asked, _Skipped):
                    self._count_skip(asked)
                    continue
                self.infeasible_in_a_row = self.duplicates_in_a_row = 0
                self.pending = asked
            live = self.pending
            if not self.sched.fits(live.plan.options):  # wait for room: ours frees as trials end
                return
            self.pending = None
            self._submit(live)

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

    def _ran_before(self, params: dict[str, Any], number: int) -> int | None:
        """The number of a trial that ran (or runs) these very parameters, if any."""
        for t in self.study.get_trials(deepcopy=False):
            if t.number != number and t.params == params and holds_budget(t):
                return t.number
        return None

    def _ask(self) -> _Live | _Skipped | _LostRace:
        """Ask Optuna for a point and build its trial: the trial to launch, a skipped point, or ``_LOST_RACE``."""
        trial = self.study.ask()
        trial.set_user_attr("driver", self.me)  # heartbeat: datetime_start until the first beat
        params = self.space.suggest(trial)
        number = trial.number
        if trial.user_attrs.get("retry_of") is None:
            earlier = self._ran_before(params, number)
            if earlier is not None:  # a restart's or another driver's sampler repeating a point: never rerun
                # FAIL, not PRUNED: samplers learn from PRUNED trials (TPE ranks one without values worst),
                # and the point is not bad, it already ran; FAIL trials are ignored by them.
                trial.set_user_attr("infeasible", True)  # uses none of the budget
                trial.set_user_attr("failure_reason", f"not run: the same parameters as trial {earlier}")
                self.study.tell(trial, state=TrialState.FAIL)
                return _Skipped(f"same parameters as trial {earlier}", duplicate_of=earlier)
        if not self._within_budget(number):
            trial.set_user_attr("infeasible", True)
            trial.set_user_attr("pruned_reason", "not run: the study reached its trial budget (another driver)")
            self.study.tell(trial, state=TrialState.PRUNED)
            if trial.user_attrs.get("retry_of") is not None:  # a retry keeps its place for the next driver
                keep = ("retry_of", "attempt", "resume_from")
                frozen = self.store.frozen(trial)
                self.store.enqueue_retry(frozen, {k: frozen.user_attrs[k] for k in keep if k in frozen.user_attrs})
            return _LOST_RACE
        self.store.record_retry_lineage(trial)
        trial_dir = (self.spec.study_dir / "trials" / str(number)).resolve()
        resume_from = trial.user_attrs.get("resume_from")
        try:
            plan = self.builder.build(number, params, trial_dir, resume_from)
            if not self.sched.can_ever_fit(plan.options):
                raise UserError(f"trial needs {plan.options} but the cluster has {self.sched.total}")
        except UserError as err:
            reason = "; ".join(err.problems)
            trial.set_user_attr("infeasible", True)
            trial.set_user_attr("pruned_reason", f"infeasible: {reason}")
            trial.set_constraint(CONSTRAINT, 1.0)
            self.study.tell(trial, state=TrialState.PRUNED)
            self._say(f"trial {number} pruned before launch: {reason}")
            return _Skipped(reason)
        trial.set_constraint(CONSTRAINT, 0.0)
        plan.write_files(trial_dir)
        # Each attr is one journal write (and fsync): start/end times are Optuna's datetime_start/complete.
        attrs: dict[str, Any] = {
            "overrides": plan.overrides,
            "config": plan.config,
            "seeds": [r.seed for r in plan.job.runs],
            "trial_dir": str(trial_dir),
            "resources": plan.options,
        }
        if "attempt" not in trial.user_attrs:  # a retry carries its attempt from its enqueueing
            attrs["attempt"] = 1
        for key, value in attrs.items():
            trial.set_user_attr(key, value)
        live = _Live(trial, number, params, trial_dir, plan, started_wall=time.time())
        if resume_from and plan.job.resume:
            start_at, history = adopted_history(resume_from, plan.job.runs)
            for seed, iteration, metrics in history:
                self._record(live, seed, iteration, metrics)
            trial.set_user_attr("resumed_at_iteration", {str(k): v for k, v in start_at.items()})
        return live

    def _submit(self, live: _Live) -> None:
        self.sched.submit(live.number, live.plan.job, live.plan.options)
        live.started_wall = time.time()
        self.live[live.number] = live
        self._say(f"trial {live.number} started: {format_params(live.params)}")

    def _abandon_pending(self) -> None:
        if self.pending is not None:  # asked but never launched: give it back as a retry, no attempt used
            frozen = self.store.frozen(self.pending.trial)
            reason = "not launched before the driver stopped"
            fail_and_maybe_retry(self.store, frozen, reason, self.spec.retries, count_attempt=False)
            self.pending = None

    # -- metrics --------------------------------------------------------------------------------------
    def _record(self, live: _Live, seed: int, iteration: int, metrics: dict[str, Any]) -> None:
        if iteration <= live.last_iteration.get(seed, 0):
            return  # already have it (a resumed run re-reporting, or a duplicate)
        live.last_iteration[seed] = iteration
        curves = live.curves.setdefault(seed, {})
        for name, value in metrics.items():
            if isinstance(value, (int, float)):
                curves.setdefault(name, []).append((iteration, float(value)))
        with open(live.trial_dir / "metrics.jsonl", "a") as fh:
            fh.write(json.dumps({"iteration": iteration, "seed": seed, **metrics}) + "\n")
        if self.pruning and seed == live.plan.job.runs[0].seed:
            value = self._objective_so_far(live, seed, 0)
            if value is not None and math.isfinite(value):
                live.trial.report(value, step=iteration)

    def _on_events(self, number: int, events: list[Event]) -> None:
        live = self.live.get(number)
        if live is None or not events:
            return
        for seed, iteration, metrics in events:
            self._record(live, seed, iteration, metrics)
        first = live.plan.job.runs[0]
        reached = live.last_iteration.get(first.seed, 0)
        if reached >= first.cfg.megatron_training.train_iters:
            return  # it ran all its iterations: it completes, it is never pruned at its last step
        if self.pruning and live.stop_reason is None and live.trial.should_prune():
            live.stop_reason = "pruned"
            objective = self.spec.objectives[0]
            value = self._objective_so_far(live, first.seed, 0)
            shown = "none" if value is None else f"{value:.4g}"
            live.pruned_note = (
                f"pruned by the {self.spec.pruner.name} pruner at iteration {reached} of "
                f"{first.cfg.megatron_training.train_iters}: {objective.metric} ({objective.reduce}) so far {shown}"
            )
            self.sched.stop(number, "pruned")

    def _objective_so_far(self, live: _Live, seed: int, index: int) -> float | None:
        points = live.curves.get(seed, {}).get(self.spec.objectives[index].metric)
        if not points:
            return None
        return self.reducers[index].reduce([v for _, v in points])

    # -- finishing ------------------------------------------------------------------------------------
    def _on_finished(self, fin: Finished) -> None:
        live = self.live.pop(fin.key)
        result = fin.result or {}
        wall = time.time() - live.started_wall
        usage = {
            "wall_s": wall,
            "cpu_s": float(result.get("cpu_s", 0.0)),
            "npu_s": wall * self.backend.devices_held(live.plan.options),
            "node": result.get("node"),
            "devices": result.get("devices") or [],
        }
        for key, value in usage.items():
            if value or key == "wall_s":  # unset = zero / none: one journal write less
                live.trial.set_user_attr(key, value)
        runs = live.plan.job.runs
        outcome = decide(
            worker_error=fin.error,
            result=result,
            stop_reason=live.stop_reason,
            timeout_s=self.spec.timeout_per_trial,
            objectives=[o.metric for o in self.spec.objectives],
            seed_values=[[self._objective_so_far(live, r.seed, i) for r in runs] for i in range(len(self.reducers))],
            reported=sorted({m for curves in live.curves.values() for m in curves}),
            log_lines=_tail(live),
        )
        self._record_outcome(live, outcome)

    def _record_outcome(self, live: _Live, outcome: Outcome) -> None:
        trial, number = live.trial, live.number
        if isinstance(outcome, Complete):
            trial.set_user_attr("values_per_seed", outcome.per_seed)
            trial.set_user_attr("value_spread", outcome.spreads)
            self.study.tell(trial, outcome.values if self.spec.multi_objective else outcome.values[0])
            shown = ", ".join(f"{o.metric}={v:.4g}" for o, v in zip(self.spec.objectives, outcome.values, strict=True))
            self._say(f"trial {number} complete: {shown}")
        elif isinstance(outcome, Pruned):
            trial.set_user_attr("pruned_reason", live.pruned_note or outcome.reason)
            self.study.tell(trial, state=TrialState.PRUNED)
            self._say(f"trial {number} pruned at iteration {max(live.last_iteration.values(), default=0)}")
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

    def _check_timeouts(self) -> None:
        limit = self.spec.timeout_per_trial
        if not limit:
            return
        now = time.monotonic()
        for number, live in self.live.items():
            started = self.sched.started_at(number)
            if started is None or now - started <= limit:
                continue
            if live.stop_reason != "timeout":
                live.stop_reason = "timeout"
                self.sched.stop(number, "timeout")
            elif now - (self.sched.stop_sent_at(number) or now) > min(TIMEOUT_KILL_GRACE_S, limit):
                self.sched.kill(number)

    # -- what the user sees ---------------------------------------------------------------------------
    def snapshot(self) -> ProgressSnapshot:
        trials = self.study.get_trials(deepcopy=False)
        running = []
        for number, live in sorted(self.live.items()):
            seed = max(live.last_iteration, key=lambda s: live.last_iteration[s], default=None)
            value = self._objective_so_far(live, seed, 0) if seed is not None else None
            iteration = live.last_iteration.get(seed, 0) if seed is not None else 0
            running.append(RunningTrial(number, live.params, seed, iteration, value))
        best = best_trial(self.study) if not self.spec.multi_objective else None
        counted = sum(1 for t in trials if counts_toward_budget(t))
        return ProgressSnapshot(counted, running, (best.number, best.values[0]) if best is not None else None)

    def _say(self, message: str) -> None:
        if self.progress is not None:
            self.progress.log(message)
        elif not self.quiet:
            print(message, flush=True)


def _tail(live: _Live, n: int = 20) -> list[str]:
    """The last log lines of the trial's furthest seed run that wrote any."""
    lines: list[str] = []
    for run in live.plan.job.runs:
        lines = tail_lines(Path(run.run_dir) / "train.log", n) or lines
    return lines
