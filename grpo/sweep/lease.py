"""Owning the trial lifecycle in an ask/tell driver: driver leases, heartbeats and the reaper.

Optuna's own heartbeat exists only for RDB storage inside ``study.optimize()``. An ask/tell driver has to
own it: every RUNNING trial carries ``driver`` ({id, host, pid}) and ``heartbeat`` (unix time) user attrs,
refreshed by the driver that runs it. A RUNNING trial is dead when its driver's process is gone (same
host: checked at once) or its heartbeat is older than ``stale_after`` seconds (any host). The reaper marks
dead trials FAIL and enqueues a retry with the same parameters, like Optuna's
``RetryHeartbeatStaleTrialCallback``; the retry resumes from the dead trial's last checkpoint.
"""

from __future__ import annotations

import os
import socket
import time
import uuid

import optuna
from optuna.trial import TrialState

HEARTBEAT_EVERY_S = 10.0
STALE_AFTER_S = 60.0


def new_driver_identity() -> dict:
    return {"id": uuid.uuid4().hex[:12], "host": socket.gethostname(), "pid": os.getpid()}


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def is_dead(trial: optuna.trial.FrozenTrial, now: float, me: dict, stale_after: float = STALE_AFTER_S) -> str | None:
    """Why a RUNNING trial has no live driver, or None when it still has one."""
    owner = trial.user_attrs.get("driver")
    if owner and owner.get("id") == me["id"]:
        return None
    if owner and owner.get("host") == me["host"] and not _pid_alive(int(owner.get("pid", -1))):
        return f"driver process {owner.get('pid')} on {owner.get('host')} is gone"
    beat = trial.user_attrs.get("heartbeat")
    if beat is None and trial.datetime_start is not None:
        beat = trial.datetime_start.timestamp()
    if beat is not None and now - float(beat) > stale_after:
        return f"no driver heartbeat for {now - float(beat):.0f} s"
    return None


def reap(study: optuna.Study, me: dict, retries: int, stale_after: float = STALE_AFTER_S) -> list[int]:
    """Fail the RUNNING trials of dead drivers and enqueue their retries; return the reaped numbers."""
    from grpo.sweep.retry import fail_and_maybe_retry

    reaped = []
    now = time.time()
    for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        why = is_dead(trial, now, me, stale_after)
        if why is None:
            continue
        fail_and_maybe_retry(study, trial, f"driver died: {why}", retries, resumable=True)
        reaped.append(trial.number)
    return reaped


def beat(study: optuna.Study, trial_ids: list[int]) -> None:
    now = time.time()
    for trial_id in trial_ids:
        try:
            study._storage.set_trial_user_attr(trial_id, "heartbeat", now)
        except Exception:  # the trial finished meanwhile (another driver's reaper, a race): nothing to beat
            pass
