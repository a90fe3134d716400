"""The study driver: Optuna ask/tell in one loop, trials dispatched asynchronously to Ray.

    spec -> (config + search space) -> study -> scheduler -> backend runs trial -> metrics -> storage

One loop turn is named phases, the way Ray Tune's controller step is: ``_interrupts`` (Ctrl-C stops or
kills the running trials), ``_admit`` (ask Optuna and build trials: ``admit.Asker``; start the ones that fit:
``_launch``), ``_collect`` (poll Ray: metric events and finished seeds), ``_decide`` (the stoppers of
``stoppers``: the collapse rule, the pruner, the time limit, each returning a decision), ``_record`` (a
trial whose last seed ended: its outcome told to Optuna, its retry, the report callback, checkpoint
retention: ``record.Recorder``) and ``_heartbeat`` (beat, reap dead drivers' trials, the live view). A
finished trial frees its slot at once (waiting trials start before it is recorded); there are no batch
barriers. The study's trials are read once per turn (``record.TrialsView``), again only after a write
that changes them.

The search stops at ``spec.trials`` trials that count (see ``retry.counts_toward_budget``), counted in
storage, so several drivers on one study share the budget; then the optional confirmation stage
(``confirm:``) reruns the best trials on fresh seeds.
"""

from __future__ import annotations

import contextlib
import hashlib
import statistics
import sys
import time

import optuna

from grpo.config.inert import STUDY_ATTR as INERT_ATTR
from grpo.errors import StudyStopped, UserError
from grpo.report.best import best_trial
from grpo.sweep.backends import TrialBackend, load_backend
from grpo.sweep.execution.scheduler import Finished, JobKey, RayScheduler
from grpo.sweep.execution.seed_result import Event, SeedStatus, StopReason
from grpo.sweep.run import pbt
from grpo.sweep.run.admit import Asker, LostRace, Skipped
from grpo.sweep.run.budget import SearchBudget
from grpo.sweep.run.interrupt import Interrupt
from grpo.sweep.run.live import LiveTrial, Objectives
from grpo.sweep.run.outcome import SeedEnd
from grpo.sweep.run.preflight import check_point, preflight
from grpo.sweep.run.record import Recorder, TrialsView
from grpo.sweep.run.snapshot import Messages, Progress, ProgressSnapshot, RunningTrial, StudyRun, TrialFinished
from grpo.sweep.run.stoppers import Kill, Stop, curve_stop, timeout_stop
from grpo.sweep.run.trial_builder import TrialBuilder
from grpo.sweep.spec.models import STUDY_NAME, SweepSpec
from grpo.sweep.spec.samplers import make_pruner, make_sampler
from grpo.sweep.spec.space import SearchSpace, format_params
from grpo.sweep.spec.start_points import stored_points
from grpo.sweep.study import lease
from grpo.sweep.study.outage import RetryingStorage, StorageUnreachable, retrying
from grpo.sweep.study.retry import counts_toward_budget, fail_and_maybe_retry, is_confirmation
from grpo.sweep.study.store import StudyStore, open_study
from grpo.trial_attrs import PBT_SETTINGS, WALL_S

POLL_S = 0.05
# Backfill: while the oldest asked trial waits for room, up to LOOKAHEAD asked trials wait behind it and any
# that fits starts. Once `concurrency` trials have started ahead of it, nothing more does until it has:
# running trials drain until it fits, so a large trial is delayed, never starved.
LOOKAHEAD = 4


def forked(spec: SweepSpec, name: str) -> SweepSpec:
    """The spec as a new study called ``name`` (``--fork``): same search, fresh storage and trial dirs."""
    if not STUDY_NAME.fullmatch(name):
        raise UserError(f"--fork: study names use letters, digits, '-' and '_' only (got {name!r})")
    return spec.model_copy(update={"study": name})


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
    settings = (
        pbt.Settings.of(spec.scheduler, checks.base_cfg.megatron_training.train_iters) if spec.scheduler else None
    )
    if settings is not None:  # the budget: one trial per segment
        spec = spec.model_copy(update={"trials": settings.trials})
    study, _ = open_study(spec, base_config=checks.base_cfg.to_dict())
    messages = Messages(progress, quiet)
    # Every storage call from here on survives a lost connection up to the spec's bound (study/outage.py).
    study = retrying(
        study,
        label=spec.storage_label(),
        limit_s=spec.storage_retry_timeout,
        resume=f"grpo-sweep run {spec.source}",
        warn=messages.warn,
    )
    if checks.inert or INERT_ATTR in study.user_attrs:  # the report's "why" section shows them
        study.set_user_attr(INERT_ATTR, checks.inert)
    if settings is not None and study.user_attrs.get(PBT_SETTINGS) != settings.as_attr():
        study.set_user_attr(PBT_SETTINGS, settings.as_attr())
    me = lease.new_driver_identity()
    study.sampler = make_sampler(spec, space, seed=sampler_seed(spec, study, me))
    study.pruner = make_pruner(spec)
    builder = TrialBuilder(spec, space, backend, checks.base_cfg, (me["host"], me["pid"]), no_plan=no_plan)
    driver = _Driver(spec, space, backend, study, builder, me, messages, progress, on_trial_finished)
    # After the sampler's seed (it counts the stored trials): a seeded new study proposes the same way with them.
    room = spec.start_points and len(study.get_trials(deepcopy=False)) < spec.trials
    if room and (added := driver.store.enqueue_start_points(stored_points(spec.start_points, space))):
        driver.messages.say(f"start points: {added} of {len(spec.start_points)} enqueued, tried first")
    if checks.transfer and spec.transfer is not None and len(study.get_trials(deepcopy=False)) < spec.trials:
        sources = [f"{spec.transfer.study}#{p.source_trial}" for p in checks.transfer]
        if added := driver.store.enqueue_transferred([p.params for p in checks.transfer], sources):
            driver.messages.say(
                f"transfer: {added} of study {spec.transfer.study}'s best {len(checks.transfer)} configurations "
                "enqueued, tried first"
            )
    if settings is not None:
        driver.budget.population = population_of(spec, space, backend, settings, no_plan=no_plan)
        driver.asker.schedulable = driver.budget.population.explored_keys
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


def population_of(
    spec: SweepSpec, space: SearchSpace, backend: TrialBackend, settings: pbt.Settings, *, no_plan: bool
) -> pbt.Population:
    """The pbt planner of ``spec``: explores the schedulable searched keys, only to points that can run."""
    seed = str(spec.sampler.seed) if spec.sampler.seed is not None else spec.study
    return pbt.Population(
        settings,
        space,
        pbt.SCHEDULABLE,
        spec.directions[0],
        seed,
        feasible=lambda params: not check_point(spec, space, backend, params, no_plan=no_plan),
    )


class _Driver:
    def __init__(
        self,
        spec: SweepSpec,
        space: SearchSpace,
        backend: TrialBackend,
        study: optuna.Study,
        builder: TrialBuilder,
        me: lease.DriverIdentity,
        messages: Messages,
        progress: Progress | None,
        on_trial_finished: TrialFinished | None = None,
    ):
        self.spec, self.study, self.me, self.messages, self.progress = spec, study, me, messages, progress
        self.store = StudyStore(study)
        self.view = TrialsView(study)
        self.live: dict[int, LiveTrial] = {}
        self.waiting: list[LiveTrial] = []  # asked, waiting for room on the cluster, in the order asked
        self.pruning = not spec.multi_objective  # Optuna's report/should_prune are single-objective
        self.objectives = Objectives.of(spec)
        self.interrupted = False
        self.io_error: OSError | None = None  # the driver could not write (storage or trial files)
        self.outage: StorageUnreachable | None = None  # storage stayed unreachable past spec.storage_retry_timeout
        self.recorder = Recorder(spec, study, self.store, self.view, backend, builder, messages, on_trial_finished)
        self.last_beat = self.last_reap = time.monotonic()
        cluster = spec.cluster
        self.sched = RayScheduler(address=cluster.address, num_cpus=cluster.num_cpus, resources=dict(cluster.resources))
        self.asker = Asker(spec, space, study, self.store, self.view, builder, self.sched, me, messages)
        self.budget = SearchBudget(spec, self.view, self.asker, self.recorder)

    # -- the loop -------------------------------------------------------------------------------------
    def loop(self) -> None:
        self._reap()
        self.recorder.apply_retention()  # a resumed study: what ended before (the reaped trials now wait for a retry)
        with Interrupt() as interrupt:
            storage = self.store.storage
            if isinstance(storage, RetryingStorage):  # a Ctrl-C ends a wait for storage at once
                storage.give_up = lambda: interrupt.count > 0
            try:
                while True:
                    try:
                        if not self._turn(interrupt.count):
                            break
                    except StorageUnreachable as err:
                        self.outage = err
                        break
                    except OSError as err:  # a full disk, a lost mount: stop as on Ctrl-C, resumable
                        if self.io_error is not None or not self.live:
                            self.io_error = self.io_error or err
                            break  # it fails again while stopping (or nothing runs): stop now
                        self.io_error = err
                        interrupt.count = max(interrupt.count, 1)
                        self.messages.say(f"I/O error in the driver: {err}; no new trials, the running ones stop")
            finally:
                self.interrupted = interrupt.count > 0
                if self.outage is not None:
                    self._wind_down(interrupt)
                # storage unwritable: the next run reaps them (no attempt used)
                with contextlib.suppress(OSError, StorageUnreachable):
                    self._abandon_waiting()
                self.sched.shutdown()
                if self.progress is not None and self.outage is None:
                    self.progress.update(_snapshot(self))
        if self.outage is not None:
            raise self.outage
        if self.io_error is not None:
            failed = self.io_error
            where = f"{failed.filename}: " if failed.filename else ""
            raise StudyStopped(
                f"{where}{failed.strerror or failed}: the driver stopped the study; the running trials stopped and "
                "resume when you rerun the same command (free space first)"
            )

    def _wind_down(self, interrupt: Interrupt) -> None:
        """Storage is gone: every running trial stops at its next iteration (a second Ctrl-C kills them) and the
        driver waits for them, recording nothing; the next run reaps them and resumes them from their checkpoints."""
        self.messages.warn("storage unreachable past storage_retry_timeout: stopping the running trials")
        for live in self.live.values():
            if live.stop_reason is None:
                self._stop(live, Stop(StopReason.INTERRUPTED))
        running = {key for live in self.live.values() for key in live.job_keys()}
        while running:
            if interrupt.count >= 2:
                for key in running:
                    self.sched.kill(key)
            finished, _ = self.sched.poll(POLL_S)
            running -= {fin.key for fin in finished}

    def _turn(self, interrupts: int) -> bool:
        """One turn of the loop, phase by phase; False when the study is done here."""
        self.view.changed()  # a new turn: the study is read again, once
        self._interrupts(interrupts)
        if interrupts == 0:
            self._admit()
        if not self.live and not self.waiting and (interrupts or self.budget.finished()):
            return False
        finished, events = self.sched.poll(POLL_S if self.live else 0.01)
        ended = self._collect(events, finished)
        if ended and interrupts == 0:
            # Their room goes to the waiting trials first (no journal write before the start); the ended
            # trials are recorded right after (a crash in between reaps and retries them).
            while len(self.live) < self.spec.concurrency and self._launch():
                pass
        for live in ended:
            self._record(live)
        self._decide_timeouts()
        self._heartbeat()
        return True

    # -- interrupts -----------------------------------------------------------------------------------
    def _interrupts(self, count: int) -> None:
        """First Ctrl-C: the running trials stop at their next iteration; second: their workers are killed."""
        if count == 1:
            for live in self.live.values():
                if live.stop_reason is None:
                    self._stop(live, Stop(StopReason.INTERRUPTED))
        elif count >= 2:
            for live in self.live.values():
                for key in live.job_keys():
                    self.sched.kill(key)

    # -- admit and launch -----------------------------------------------------------------------------
    def _admit(self) -> None:
        """Fill the free slots: start waiting trials that fit, ask for new ones while the budget allows;
        then, once the search is over, the confirmation stage."""
        if self.budget.population is not None:
            self._plan_population()
        while len(self.live) < self.spec.concurrency:
            if self._launch():
                continue
            if len(self.waiting) >= LOOKAHEAD or not self.budget.may_ask():
                break
            asked = self.asker.ask()
            if isinstance(asked, LostRace):
                break
            self.asker.count(asked)
            if not isinstance(asked, Skipped):
                self.waiting.append(asked)
        if (
            self.spec.confirm is not None
            and not self.recorder.stage_started
            and self.budget.search_finished(self._search_running)
        ):
            self.recorder.start_confirmation()

    def _search_running(self) -> bool:
        return bool(self.waiting) or any(lv.confirmation_of is None for lv in self.live.values())

    def _plan_population(self) -> None:
        """Enqueue the pbt segments that are missing (a generation's start, or what a crash lost)."""
        assert self.budget.population is not None
        segments = self.budget.population.missing(self.view.all())
        if not segments:
            return
        interval = self.budget.population.settings.interval
        for segment in segments:
            self.store.enqueue_segment(segment.params, segment.user_attrs(interval))
        self.view.changed()
        generation = segments[0].generation
        lines = "; ".join(s.describe() for s in segments)
        self.messages.say(f"pbt generation {generation} (from iteration {generation * interval}): {lines}")

    def _launch(self) -> bool:
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
                for job in live.plan.jobs:
                    self.sched.submit((live.number, job.index), job, live.plan.options)
                live.running = {job.index for job in live.plan.jobs}
                live.started_wall = time.time()
                self.live[live.number] = live
                stage = f" (confirms trial {live.confirmation_of})" if live.confirmation_of is not None else ""
                seeds = f", {len(live.plan.jobs)} seeds" if len(live.plan.jobs) > 1 else ""
                self.messages.say(f"trial {live.number} started{stage}: {format_params(live.params)}{seeds}")
                return True
        return False

    def _abandon_waiting(self) -> None:
        for live in self.waiting:  # asked but never launched: give it back as a retry, no attempt used
            frozen = self.store.frozen(live.trial)
            reason = "not launched before the driver stopped"
            fail_and_maybe_retry(self.store, frozen, reason, self.spec.retries, count_attempt=False, launched=False)
        self.waiting = []

    # -- collect --------------------------------------------------------------------------------------
    def _collect(self, events: dict[JobKey, list[Event]], finished: list[Finished]) -> list[LiveTrial]:
        """Metric events into the curves (and the curve stoppers' decisions), then the seeds that ended:
        the trials whose last seed ended."""
        moved: set[int] = set()
        for (number, _), evs in events.items():
            live = self.live.get(number)
            if live is None or not evs:
                continue
            for seed, iteration, metrics in evs:
                live.record(seed, iteration, metrics)
            moved.add(number)
        for number in sorted(moved):
            live = self.live[number]
            if live.report_progress(self.objectives, self.pruning):
                self._decide(curve_stop(self.spec, live, self.pruning), live)
        return [live for live in map(self._seed_ended, finished) if live is not None]

    def _seed_ended(self, fin: Finished) -> LiveTrial | None:
        """A seed job ended: the trial, when it was its last (``_record`` records it), else None."""
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
            self._stop(live, Stop(StopReason.FAILED))
            self.messages.say(f"trial {number}: seed {seed} failed; stopping its other seeds")
        if live.running:
            return None
        del self.live[number]
        return live

    # -- decide ---------------------------------------------------------------------------------------
    def _decide(self, decision: Stop | Kill | None, live: LiveTrial) -> None:
        """Act on a stopper's decision."""
        if isinstance(decision, Stop):
            self._stop(live, decision)
        elif isinstance(decision, Kill):
            for key in live.job_keys():
                self.sched.kill(key)

    def _stop(self, live: LiveTrial, stop: Stop) -> None:
        live.stop_reason = stop.reason
        if stop.note is not None:
            live.pruned_note = stop.note
        for key in live.job_keys():
            self.sched.stop(key, stop.reason)

    def _decide_timeouts(self) -> None:
        limit = self.spec.timeout_per_trial
        if not limit:
            return
        now = time.monotonic()
        for live in self.live.values():
            keys = live.job_keys()
            started = [t for t in (self.sched.started_at(k) for k in keys) if t is not None]
            sent = [t for t in (self.sched.stop_sent_at(k) for k in keys) if t is not None]
            self._decide(timeout_stop(live, limit, started, sent, now), live)

    # -- record ---------------------------------------------------------------------------------------
    def _record(self, live: LiveTrial) -> None:
        confirming = any(lv.confirmation_of is not None for lv in self.live.values())
        self.recorder.finish(live, confirming)

    # -- heartbeat, reaping, the live view ------------------------------------------------------------
    def _heartbeat(self) -> None:
        now = time.monotonic()
        if now - self.last_beat > lease.HEARTBEAT_EVERY_S:
            held = [lv.trial for lv in [*self.live.values(), *self.waiting]]
            self.store.beat(held, time.time())
            self.last_beat = now
        if now - self.last_reap > lease.STALE_AFTER_S:
            self._reap()
            self.last_reap = now
        if self.progress is not None and self.progress.due():
            self.progress.update(_snapshot(self))

    def _reap(self) -> None:
        lease.reap(self.store, self.me, self.spec.retries)
        self.view.changed()


def _snapshot(self: _Driver) -> ProgressSnapshot:
    """The live view's rows: running trials, counts by state, the best so far, what is left to start."""
    trials = self.view.all()
    now = time.time()
    running = []
    for number, live in sorted(self.live.items()):
        step = live.common_step()
        value = live.objective_so_far(self.objectives, 0, step) if step else None
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
    finished = counted + [t for t in trials if is_confirmation(t) and t.state == optuna.trial.TrialState.COMPLETE]
    walls = [float(w) for t in finished if isinstance(w := t.user_attrs.get(WALL_S), (int, float))]
    to_start = 0 if self.asker.exhausted else max(0, self.budget.left())
    to_start += len(self.waiting)  # asked, waiting for room
    if self.spec.confirm is not None:
        started = self.recorder.stage_started or any(is_confirmation(t) for t in trials)
        waiting = sum(1 for t in self.view.waiting() if is_confirmation(t))
        to_start += waiting if started else self.spec.confirm.top_k
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
