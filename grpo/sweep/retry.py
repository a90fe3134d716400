"""Failing a trial and scheduling its retry: same parameters, next attempt, resume from its checkpoint."""

from __future__ import annotations

import optuna
from optuna.trial import TrialState


def fail_and_maybe_retry(
    study: optuna.Study,
    trial: optuna.trial.FrozenTrial,
    reason: str,
    retries: int,
    *,
    last_log_lines: list[str] | None = None,
    resumable: bool = True,
    count_attempt: bool = True,
    extra_attrs: dict | None = None,
) -> bool:
    """Mark ``trial`` FAIL with ``reason``; enqueue a retry unless its attempts are used up.

    ``count_attempt=False`` is for interruptions that are not the trial's fault (Ctrl-C): the retry keeps
    the attempt number. Returns True when a retry was enqueued.
    """
    storage = study._storage
    attempt = int(trial.user_attrs.get("attempt", 1))
    next_attempt = attempt + 1 if count_attempt else attempt
    retry = next_attempt <= retries + 1
    attrs = {"failure_reason": reason, "retried": retry, "gave_up": not retry}
    if last_log_lines is not None:
        attrs["last_log_lines"] = list(last_log_lines)[-20:]
    attrs.update(extra_attrs or {})
    for key, value in attrs.items():
        storage.set_trial_user_attr(trial._trial_id, key, value)
    storage.set_trial_state_values(trial._trial_id, TrialState.FAIL)
    if retry:
        retry_attrs = {"retry_of": trial.number, "attempt": next_attempt}
        if resumable and trial.user_attrs.get("trial_dir"):
            retry_attrs["resume_from"] = trial.user_attrs["trial_dir"]
        study.enqueue_trial(dict(trial.params), user_attrs=retry_attrs)
    return retry


def counts_toward_budget(trial: optuna.trial.FrozenTrial) -> bool:
    """Finished trials that count toward ``trials``: COMPLETE, PRUNED by the pruner, FAIL given up.

    Points pruned at sampling time for breaking a config rule (``infeasible``) do not count, and nor do
    failures that were retried (their retry counts instead).
    """
    if trial.user_attrs.get("infeasible"):
        return False
    if trial.state in (TrialState.COMPLETE, TrialState.PRUNED):
        return True
    if trial.state == TrialState.FAIL:
        return bool(trial.user_attrs.get("gave_up"))
    return False
