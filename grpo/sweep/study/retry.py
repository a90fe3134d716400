"""Failing a trial and scheduling its retry: same parameters, next attempt, resume from its checkpoint;
and which finished trials count toward a study's trial budget (confirmation trials never do)."""

from __future__ import annotations

from typing import Any

from optuna.trial import FrozenTrial, TrialState

from grpo._optuna_private import planned_params
from grpo.report.best import is_repeat
from grpo.sweep.study.store import StudyStore
from grpo.trial_attrs import (
    ATTEMPT,
    BRANCH_OF,
    BRANCHED_AT,
    CONFIRMATION_OF,
    EXPLOITED,
    FAILURE_REASON,
    GAVE_UP,
    INFEASIBLE,
    LAST_LOG_LINES,
    PBT_GENERATION,
    PBT_MEMBER,
    PROMOTED_BASE,
    RESUME_FROM,
    RETRIED,
    RETRY_OF,
    SCHEDULE,
    SEEDS,
    TRIAL_DIR,
)

SEGMENT_ATTRS = (PBT_MEMBER, PBT_GENERATION, BRANCH_OF, BRANCHED_AT, EXPLOITED, SCHEDULE)


def fail_and_maybe_retry(
    store: StudyStore,
    trial: FrozenTrial,
    reason: str,
    retries: int,
    *,
    last_log_lines: list[str] | None = None,
    resumable: bool = True,
    count_attempt: bool = True,
    launched: bool = True,
) -> bool:
    """Mark ``trial`` FAIL with ``reason``; enqueue a retry unless its attempts are used up.

    ``count_attempt=False`` is for interruptions that are not the trial's fault (Ctrl-C): the retry keeps
    the attempt number. ``launched=False``: the trial never ran (it waited for room), so its own folder holds
    no checkpoint and its retry resumes from where the trial itself would have (its ``resume_from``).
    Returns True when a retry was enqueued.
    """
    attempt = int(trial.user_attrs.get(ATTEMPT, 1))
    next_attempt = attempt + 1 if count_attempt else attempt
    retry = next_attempt <= retries + 1
    attrs: dict[str, Any] = {FAILURE_REASON: reason, RETRIED: retry, GAVE_UP: not retry}
    if last_log_lines is not None:
        attrs[LAST_LOG_LINES] = list(last_log_lines)[-20:]
    store.fail(trial, attrs)
    if retry:
        retry_attrs: dict[str, Any] = {RETRY_OF: trial.number, ATTEMPT: next_attempt}
        if resumable and not launched:
            if trial.user_attrs.get(RESUME_FROM):
                retry_attrs[RESUME_FROM] = trial.user_attrs[RESUME_FROM]
        elif resumable and trial.user_attrs.get(TRIAL_DIR):
            retry_attrs[RESUME_FROM] = trial.user_attrs[TRIAL_DIR]
        # A pbt segment's retry stays that segment (member, generation, parent, schedule); with no checkpoint of
        # its own it starts from its parent's, as the segment did (grpo.sweep.run.pbt).
        retry_attrs.update({k: trial.user_attrs[k] for k in SEGMENT_ATTRS if k in trial.user_attrs})
        if is_confirmation(trial):  # the retry stays a confirmation trial: same seeds, no budget
            retry_attrs[CONFIRMATION_OF] = trial.user_attrs[CONFIRMATION_OF]
            if trial.user_attrs.get(SEEDS):
                retry_attrs[SEEDS] = list(trial.user_attrs[SEEDS])
            for key in (SCHEDULE, PROMOTED_BASE):  # what it replays, where
                if key in trial.user_attrs:
                    retry_attrs[key] = trial.user_attrs[key]
        store.enqueue_retry(trial, retry_attrs)
    return retry


def queued_retry_of(trial: FrozenTrial, params: dict[str, Any]) -> bool:
    """``trial`` is a retry waiting to run ``params`` (enqueued: its parameters are not suggested yet)."""
    waiting = trial.state == TrialState.WAITING and trial.user_attrs.get(RETRY_OF) is not None
    return waiting and planned_params(trial) == params


def is_confirmation(trial: FrozenTrial) -> bool:
    """A trial of the confirmation stage (it reruns a search trial's parameters on fresh seeds)."""
    return trial.user_attrs.get(CONFIRMATION_OF) is not None


def counts_toward_budget(trial: FrozenTrial) -> bool:
    """Finished trials that count toward ``trials``: COMPLETE, PRUNED by the pruner, FAIL given up.

    Points pruned at sampling time for breaking a config rule (``infeasible``) do not count, nor do
    failures that were retried (their retry counts instead), nor confirmation trials (the stage runs
    after the budget is spent), nor repeated proposals told an earlier trial's result (``is_repeat``).
    """
    if trial.user_attrs.get(INFEASIBLE) or is_confirmation(trial) or is_repeat(trial):
        return False
    if trial.state in (TrialState.COMPLETE, TrialState.PRUNED):
        return True
    if trial.state == TrialState.FAIL:
        return bool(trial.user_attrs.get(GAVE_UP))
    return False


def holds_budget(trial: FrozenTrial) -> bool:
    """Counts toward the budget, or is a running search trial (not an infeasible point being told)."""
    if counts_toward_budget(trial):
        return True
    if trial.user_attrs.get(INFEASIBLE) or is_confirmation(trial) or is_repeat(trial):
        return False
    return trial.state == TrialState.RUNNING
