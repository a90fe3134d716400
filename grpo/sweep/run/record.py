"""Recording a finished trial (its usage, its outcome told to Optuna, its retry, the report callback),
checkpoint retention, and the confirmation stage that reruns the best trials on fresh seeds."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import optuna
from optuna.trial import FrozenTrial, TrialState

from grpo.engine.metrics import add_final_scalars, tensorboard_dir
from grpo.errors import is_config_failure, is_user_code_failure
from grpo.report.best import comparable, distinct_configurations, ranked
from grpo.report.stats import Interval, verdict
from grpo.sweep.backends import TrialBackend
from grpo.sweep.execution.trial_storage import local_folder
from grpo.sweep.run.live import LiveTrial, Objectives
from grpo.sweep.run.outcome import Complete, Failed, Interrupted, Outcome, Pruned, trial_outcome
from grpo.sweep.run.retention import Retention
from grpo.sweep.run.snapshot import Messages, TrialFinished
from grpo.sweep.run.trial_builder import TrialBuilder
from grpo.sweep.spec.models import SweepSpec
from grpo.sweep.study.retry import fail_and_maybe_retry, is_confirmation
from grpo.sweep.study.store import StudyStore
from grpo.trial_attrs import (
    ATTEMPT,
    CONFIRMATION_OF,
    CPU_S,
    DEVICES,
    NODE,
    NODE_ID,
    NPU_S,
    PROMOTED_BASE,
    PRUNED_REASON,
    SCHEDULE,
    SEEDS,
    VALUE_INTERVAL,
    VALUE_SPREAD,
    VALUES_PER_SEED,
    WALL_S,
)


class TrialsView:
    """The study's trials, read once per loop turn and again only after a write that changes them (an ask,
    a tell, an enqueued trial): on a journal or RDB storage each read replays or queries the whole study."""

    def __init__(self, study: optuna.Study) -> None:
        self.study = study
        self._trials: list[FrozenTrial] | None = None

    def all(self) -> list[FrozenTrial]:
        if self._trials is None:
            self._trials = self.study.get_trials(deepcopy=False)
        return self._trials

    def waiting(self) -> list[FrozenTrial]:
        return [t for t in self.all() if t.state == TrialState.WAITING]

    def changed(self) -> None:
        """The study changed (or a new turn began): the next question reads it again."""
        self._trials = None


class Recorder:
    """Records finished trials and runs the confirmation stage for one driver."""

    def __init__(
        self,
        spec: SweepSpec,
        study: optuna.Study,
        store: StudyStore,
        view: TrialsView,
        backend: TrialBackend,
        builder: TrialBuilder,
        messages: Messages,
        on_trial_finished: TrialFinished | None,
    ) -> None:
        self.spec, self.study, self.store, self.view = spec, study, store, view
        self.backend, self.builder, self.messages = backend, builder, messages
        self.on_trial_finished = on_trial_finished
        self.objectives = Objectives.of(spec)
        self.stage_started = False  # this run has enqueued what the confirmation stage lacked
        stored = builder.storage  # the study's folder in trial storage (None without it)
        # A local trial storage is reached through each trial folder's `runs` link; an object store directly.
        remote = stored if stored is not None and local_folder(stored) is None else None
        self.retention = Retention(spec.keep_final_checkpoints, spec.study_dir, stored=remote)

    # -- record ---------------------------------------------------------------------------------------
    def finish(self, live: LiveTrial, confirming: bool) -> None:
        """Record a trial whose seeds all ended: its usage, its outcome (told to Optuna), the callbacks.
        ``confirming``: a confirmation trial still runs here (no verdict yet)."""
        number = live.number
        self._record_usage(live)
        outcome = trial_outcome(
            seeds=live.ends,
            stop_reason=live.stop_reason,
            timeout_s=self.spec.timeout_per_trial,
            objectives=self.objectives.metrics,
            seed_values=live.seed_values(self.objectives),
            reported=sorted({m for curves in live.curves.values() for m in curves}),
            log_lines=live.log_tail(),
        )
        self._record_outcome(live, outcome)
        self.view.changed()
        self.apply_retention()
        if live.confirmation_of is not None and not confirming:
            self._print_verdict()
        if self.on_trial_finished is not None:
            try:
                self.on_trial_finished(self.study)
            except Exception as err:  # e.g. the report: it must never end the study
                self.messages.say(f"warning: after trial {number}: {type(err).__name__}: {err}")

    def _record_usage(self, live: LiveTrial) -> None:
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

    def _record_outcome(self, live: LiveTrial, outcome: Outcome) -> None:
        trial, number, say = live.trial, live.number, self.messages.say
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
            say(f"trial {number} complete: {shown}")
            self._objective_to_tensorboard(live, outcome.per_seed)
        elif isinstance(outcome, Pruned):
            trial.set_user_attr(PRUNED_REASON, live.pruned_note or outcome.reason)
            self.study.tell(trial, state=TrialState.PRUNED)
            say(f"trial {number} pruned at iteration {live.common_step()}")
            self._objective_to_tensorboard(live, live.seed_values(self.objectives))
        elif isinstance(outcome, Interrupted):
            fail_and_maybe_retry(
                self.store, self.store.frozen(trial), outcome.reason, self.spec.retries,
                last_log_lines=outcome.log_lines, count_attempt=False,
            )  # fmt: skip
            say(f"trial {number} interrupted; it resumes from its checkpoint on the next run")
        elif isinstance(outcome, Failed):
            # A config error or the user's own code fails the same way again: no retry (not a transient fault).
            fatal = any(f(outcome.reason, outcome.log_lines) for f in (is_config_failure, is_user_code_failure))
            retried = fail_and_maybe_retry(
                self.store,
                self.store.frozen(trial),
                outcome.reason,
                0 if fatal else self.spec.retries,
                last_log_lines=outcome.log_lines,
            )
            say(f"trial {number} failed: {outcome.reason}" + (" (will retry)" if retried else " (no retries left)"))

    def _objective_to_tensorboard(self, live: LiveTrial, per_seed: Sequence[Sequence[float | None]]) -> None:
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
                self.messages.warn(f"trial {live.number}: objective not written to TensorBoard: {err}")

    # -- checkpoint retention -------------------------------------------------------------------------
    def apply_retention(self) -> None:
        """Remove the checkpoints ``keep_final_checkpoints`` lets go now (never what a resume needs)."""
        try:
            removed, warnings = self.retention.apply(self.study, self.view.all())
        except OSError as err:  # a file system error deciding or removing: keep everything, say so
            removed, warnings = [], [f"checkpoints not cleaned up: {err}"]
        for line in warnings:
            self.messages.warn(line)
        if removed:
            numbers = ", ".join(str(n) for n in removed)
            rule = self.spec.keep_final_checkpoints
            self.messages.say(f"checkpoints of trial(s) {numbers} removed (keep_final_checkpoints: {rule})")

    # -- confirmation stage ---------------------------------------------------------------------------
    def start_confirmation(self) -> None:
        """Enqueue the confirmation trials that are missing: the ``top_k`` best complete search trials'
        parameters on fresh seeds, one per configuration (a point the search ran twice is confirmed once).
        Idempotent: a source that already has a confirmation trial (in any state: retries carry
        ``confirmation_of``) gets none, so a rerun adds only what a crash lost."""
        confirm = self.spec.confirm
        assert confirm is not None
        self.stage_started = True
        covered = {t.user_attrs[CONFIRMATION_OF] for t in self.view.all() if is_confirmation(t)}
        top = distinct_configurations([t for t in ranked(self.study) if not is_confirmation(t)])[: confirm.top_k]
        missing = [t for t in top if t.number not in covered]
        if not missing:
            return
        seeds = self.builder.seeds(self.spec.confirmation_seed_offsets())
        for source in missing:
            attrs = {CONFIRMATION_OF: source.number, ATTEMPT: 1, SEEDS: seeds}
            if source.user_attrs.get(SCHEDULE):  # a pbt lineage: replayed from scratch with its whole schedule
                attrs[SCHEDULE] = source.user_attrs[SCHEDULE]
            if confirm.base is not None:  # promotion: the same points on the target base
                attrs[PROMOTED_BASE] = confirm.base
            self.store.enqueue_confirmation(source.params, attrs)
        self.view.changed()
        sources = ", ".join(str(t.number) for t in missing)
        where = f" on {confirm.base}" if confirm.base is not None else ""
        self.messages.say(f"confirmation stage: trial(s) {sources} rerun{where} on fresh seeds {seeds}")

    def _print_verdict(self) -> None:
        """Once no confirmation trial runs or waits any more: the winner, its interval, and whether it is
        distinguishable from the runner-up."""
        trials = self.view.all()
        if any(is_confirmation(t) and t.state in (TrialState.RUNNING, TrialState.WAITING) for t in trials):
            return
        found = verdict(comparable(self.study, trials), self.study.directions[0])
        if found is not None:
            self.messages.say(found.text())


def interval_text(value: float, interval: list[float] | None, seeds: int) -> str:
    """A trial's value as ``stats.Interval.text`` shows it: mean, 95 % interval, seeds."""
    low, high = interval if interval else (None, None)
    return Interval(value, low, high, seeds).text()
