"""Admitting a trial: ask Optuna for a point, and either build it into a trial to launch or say why not.

The steps of one ask, in order: suggest the point; a point that already ran is told the earlier trial's
result (``study.repeats``); a confirmation trial another driver already runs is not run twice; a trial
past the study's budget yields to the driver that asked first (a retry keeps its place); then the trial is
built (configs, checks, Ray options) and must fit the cluster at all, else it is pruned as infeasible; its
files and attrs are written, and a retry adopts the history it resumes from.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from grpo.errors import UserError
from grpo.report.trial_config import config_pointer
from grpo.sweep.execution.scheduler import RayScheduler
from grpo.sweep.run.live import LiveTrial, Objectives
from grpo.sweep.run.pbt import initial_schedule, schedule_for_config
from grpo.sweep.run.record import TrialsView
from grpo.sweep.run.snapshot import Messages
from grpo.sweep.run.trial_builder import Segment, TrialBuilder, adopted_history
from grpo.sweep.spec.models import SweepSpec
from grpo.sweep.spec.space import SearchSpace
from grpo.sweep.study import lease
from grpo.sweep.study.repeats import answer_repeat
from grpo.sweep.study.retry import holds_budget, queued_retry_of
from grpo.sweep.study.store import StudyStore
from grpo.trial_attrs import (
    ATTEMPT,
    BRANCH_OF,
    CONFIG_POINTER,
    CONFIRMATION_OF,
    DRIVER,
    FAILURE_REASON,
    INFEASIBLE,
    OVERRIDES,
    PBT_GENERATION,
    PBT_MEMBER,
    PROMOTED_BASE,
    PRUNED_REASON,
    RESOURCES,
    RESUME_FROM,
    RESUMED_AT_ITERATION,
    RETRY_OF,
    SCHEDULE,
    SEEDS,
    TRIAL_DIR,
)

MAX_INFEASIBLE_IN_A_ROW = 200
MAX_DUPLICATES_IN_A_ROW = 50
CONSTRAINT = "feasible"  # Optuna constraint key: > 0 means the point broke a config rule


@dataclass(frozen=True)
class Skipped:
    """An asked point that is not run: it breaks a rule, or it already ran (``duplicate_of``)."""

    reason: str
    duplicate_of: int | None = None


class LostRace:
    """The study's budget went to another driver between our count and our ask."""


LOST_RACE = LostRace()


class Asker:
    """Asks Optuna for trials and builds them, for one driver; counts the points it skipped in a row."""

    def __init__(
        self,
        spec: SweepSpec,
        space: SearchSpace,
        study: optuna.Study,
        store: StudyStore,
        view: TrialsView,
        builder: TrialBuilder,
        sched: RayScheduler,
        me: lease.DriverIdentity,
        messages: Messages,
    ) -> None:
        self.spec, self.space, self.study, self.store, self.view = spec, space, study, store, view
        self.builder, self.sched, self.me, self.messages = builder, sched, me, messages
        self.objectives = Objectives.of(spec)
        self.pruning = not spec.multi_objective
        self.exhausted = False  # the sampler only repeats points that already ran
        self.schedulable: list[str] = []  # pbt: the searched keys a schedule may change (set by the driver)
        self.infeasible_in_a_row = self.duplicates_in_a_row = 0

    def ask(self) -> LiveTrial | Skipped | LostRace:
        """Ask Optuna for a point and build its trial: the trial to launch, a skipped point, or ``LOST_RACE``."""
        trial = self.study.ask()
        self.view.changed()
        trial.set_user_attr(DRIVER, self.me)  # heartbeat: datetime_start until the first beat
        params = self.space.suggest(trial)
        skipped = self._repeat(trial, params) or self._confirmed_already(trial) or self._segment_taken(trial)
        if skipped is not None:
            return skipped
        segment = trial.user_attrs.get(PBT_GENERATION) is not None
        if trial.user_attrs.get(CONFIRMATION_OF) is None and not segment and not self._within_budget(trial.number):
            return self._yield_budget(trial)
        if segment and trial.user_attrs.get(SCHEDULE) is None:  # generation 0: its sampled values from iteration 0
            trial.set_user_attr(SCHEDULE, initial_schedule(params, self.schedulable))
        self.store.record_retry_lineage(trial)
        return self._build(trial, params)

    def count(self, asked: LiveTrial | Skipped) -> None:
        """Too many infeasible points in a row is the spec's fault; too many repeats means the space is spent."""
        if isinstance(asked, LiveTrial):
            self.infeasible_in_a_row = self.duplicates_in_a_row = 0
        elif asked.duplicate_of is not None:
            self.duplicates_in_a_row += 1
            if self.duplicates_in_a_row >= MAX_DUPLICATES_IN_A_ROW:
                self.exhausted = True
                self.messages.say(
                    f"the sampler proposed {MAX_DUPLICATES_IN_A_ROW} points in a row that already ran: the search "
                    f"space looks exhausted, no new trials"
                )
        else:
            self.infeasible_in_a_row += 1
            if self.infeasible_in_a_row >= MAX_INFEASIBLE_IN_A_ROW:
                raise UserError(
                    f"{self.spec.path}: search: {MAX_INFEASIBLE_IN_A_ROW} sampled points in a row broke a "
                    f"config rule; last: {asked.reason}"
                )

    # -- the steps of an ask --------------------------------------------------------------------------
    def _repeat(self, trial: optuna.Trial, params: dict[str, Any]) -> Skipped | None:
        """Never rerun a point: a repeat is told the earlier trial's result (confirmations rerun on purpose). A
        retry is checked too: its own earlier attempts hold no budget, but another lineage may hold its point
        (a proposal admitted while the retry waited: the point would run twice)."""
        attrs = trial.user_attrs
        if attrs.get(CONFIRMATION_OF) is not None or PBT_GENERATION in attrs:
            return None  # a pbt segment continues a lineage: its parent's parameters are its own on purpose
        earlier = self._ran_before(params, trial.number)
        if earlier is None:
            return None
        answer_repeat(self.study, trial, earlier)
        self.view.changed()
        return Skipped(f"same parameters as trial {earlier.number}", duplicate_of=earlier.number)

    def _confirmed_already(self, trial: optuna.Trial) -> Skipped | None:
        """Two drivers reached the confirmation stage at once and both enqueued it: run one."""
        source = trial.user_attrs.get(CONFIRMATION_OF)
        if source is None or trial.user_attrs.get(RETRY_OF) is not None:
            return None
        first = self._confirmed_before(source, trial.number)
        if first is None:
            return None
        trial.set_user_attr(INFEASIBLE, True)
        trial.set_user_attr(FAILURE_REASON, f"not run: trial {first} already confirms trial {source}")
        self.study.tell(trial, state=TrialState.FAIL)
        self.view.changed()
        return Skipped(f"trial {first} already confirms trial {source}")

    def _segment_taken(self, trial: optuna.Trial) -> Skipped | None:
        """Two drivers planned the same pbt segment at once and both enqueued it: run the first."""
        attrs = trial.user_attrs
        if attrs.get(PBT_GENERATION) is None or attrs.get(RETRY_OF) is not None:
            return None
        key = (attrs[PBT_GENERATION], attrs[PBT_MEMBER])
        for t in self.view.all():
            if (
                t.number < trial.number
                and t.user_attrs.get(RETRY_OF) is None
                and (t.user_attrs.get(PBT_GENERATION), t.user_attrs.get(PBT_MEMBER)) == key
            ):
                trial.set_user_attr(INFEASIBLE, True)
                trial.set_user_attr(
                    FAILURE_REASON, f"not run: trial {t.number} runs member {key[1]} of generation {key[0]}"
                )
                self.study.tell(trial, state=TrialState.FAIL)
                self.view.changed()
                return Skipped(f"trial {t.number} already runs that pbt segment")
        return None

    def _yield_budget(self, trial: optuna.Trial) -> LostRace:
        trial.set_user_attr(INFEASIBLE, True)
        trial.set_user_attr(PRUNED_REASON, "not run: the study reached its trial budget (another driver)")
        self.study.tell(trial, state=TrialState.PRUNED)
        if trial.user_attrs.get(RETRY_OF) is not None:  # a retry keeps its place for the next driver
            keep = (RETRY_OF, ATTEMPT, RESUME_FROM)
            frozen = self.store.frozen(trial)
            self.store.enqueue_retry(frozen, {k: frozen.user_attrs[k] for k in keep if k in frozen.user_attrs})
        self.view.changed()
        return LOST_RACE

    def _build(self, trial: optuna.Trial, params: dict[str, Any]) -> LiveTrial | Skipped:
        number = trial.number
        confirmation_of = trial.user_attrs.get(CONFIRMATION_OF)
        trial_dir = (self.spec.study_dir / "trials" / str(number)).resolve()
        resume_from = trial.user_attrs.get(RESUME_FROM)
        # A confirmation trial carries its seeds (fresh, and the same for every confirmation trial).
        carried = trial.user_attrs.get(SEEDS) if confirmation_of is not None else None
        seeds = [int(s) for s in carried] if carried else self.builder.seeds(list(range(self.spec.seeds)))
        schedule = trial.user_attrs.get(SCHEDULE)
        segment = self._segment(trial)
        try:
            plan = self.builder.build(
                number,
                params,
                trial_dir,
                resume_from,
                seeds,
                segment=segment,
                schedule=schedule_for_config(schedule) if schedule else None,
                promoted=trial.user_attrs.get(PROMOTED_BASE),
            )
            if not self.sched.can_ever_fit(plan.options, count=len(seeds)):
                raise UserError(self._never_fits(plan.options, len(seeds), confirmation_of is not None))
        except UserError as err:
            reason = "; ".join(err.problems)
            trial.set_user_attr(INFEASIBLE, True)
            trial.set_user_attr(PRUNED_REASON, f"infeasible: {reason}")
            trial.set_constraint(CONSTRAINT, 1.0)
            self.study.tell(trial, state=TrialState.PRUNED)
            self.view.changed()
            self.messages.say(f"trial {number} pruned before launch: {reason}")
            return Skipped(reason)
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
        live = LiveTrial(
            trial, number, params, trial_dir, plan, started_wall=time.time(), confirmation_of=confirmation_of
        )
        if resume_from and plan.resumed:
            start_at, history = adopted_history(resume_from, plan.jobs)
            for seed, iteration, metrics in history:
                live.record(seed, iteration, metrics)
            live.report_progress(self.objectives, self.pruning)
            trial.set_user_attr(RESUMED_AT_ITERATION, {str(k): v for k, v in start_at.items()})
        return live

    def _segment(self, trial: optuna.Trial) -> Segment | None:
        """A pbt segment's stop and, for a branch, the folder of the trial it continues."""
        if self.spec.scheduler is None or trial.user_attrs.get(PBT_GENERATION) is None:
            return None
        parent = trial.user_attrs.get(BRANCH_OF)
        parent_dir = None
        if parent is not None:
            found = next((t for t in self.view.all() if t.number == parent), None)
            parent_dir = str(found.user_attrs.get(TRIAL_DIR)) if found is not None else None
        return Segment(self.spec.scheduler.interval, parent_dir)

    # -- what the study holds -------------------------------------------------------------------------
    def _within_budget(self, number: int) -> bool:
        """Two drivers may both see one budget slot left: the trial with the larger number yields. Read
        after the ask (``view.changed``): another driver's trial asked just before ours counts."""
        ahead = sum(1 for t in self.view.all() if t.number < number and holds_budget(t))
        return ahead < self.spec.trials

    def _ran_before(self, params: dict[str, Any], number: int) -> FrozenTrial | None:
        """The trial that ran, runs or waits to run again (a queued retry) these very parameters, if any."""
        for t in self.view.all():
            if t.number == number:
                continue
            if (t.params == params and holds_budget(t)) or queued_retry_of(t, params):
                return t
        return None

    def _confirmed_before(self, source: int, number: int) -> int | None:
        """The first confirmation trial of ``source`` enqueued before trial ``number`` (retries aside)."""
        for t in self.view.all():
            if t.number < number and t.user_attrs.get(CONFIRMATION_OF) == source and t.user_attrs.get(RETRY_OF) is None:
                return t.number
        return None

    def _never_fits(self, options: dict[str, Any], count: int, confirmation: bool) -> str:
        if count == 1:
            return f"trial needs {options} but the cluster has {self.sched.total}"
        key = "confirm.seeds" if confirmation else "seeds"
        return (
            f"the trial's {count} seeds ({key}) run at once, each with {options}, but the cluster has "
            f"{self.sched.total}; lower {key} or give the cluster more"
        )
