"""Owning the trial lifecycle in an ask/tell driver: driver leases, heartbeats and the reaper.

Optuna has heartbeats for RDB storage only (``RDBStorage(heartbeat_interval=...)``, ``record_heartbeat``,
``optuna.storages.fail_stale_trials``); ``JournalStorage``, our default, has none. So the driver owns
one for every storage: each RUNNING trial carries ``driver`` ({id, host, pid}) and ``heartbeat`` (unix
time) user attrs, refreshed by the driver that runs it. A RUNNING trial is dead when its driver's process
is gone (same host: checked at once) or its heartbeat is older than ``stale_after`` seconds (any host).
The reaper marks dead trials FAIL and enqueues a retry with the same parameters, like Optuna's
``RetryHeartbeatStaleTrialCallback``; the retry resumes from the dead trial's last checkpoint. A driver's
death is not the trial's fault: the retry keeps the trial's attempt number (only a trial's own failures
use up its ``retries``).
"""

from __future__ import annotations

import os
import socket
import time
import uuid
from typing import TypedDict

from optuna.trial import FrozenTrial, TrialState

from grpo._fs import pid_alive
from grpo._optuna_private import enqueued_params
from grpo.sweep.study.retry import fail_and_maybe_retry
from grpo.sweep.study.store import StudyStore
from grpo.trial_attrs import DRIVER, FAILURE_REASON, GAVE_UP, HEARTBEAT, RETRIED, TRIAL_DIR

HEARTBEAT_EVERY_S = 10.0
STALE_AFTER_S = 60.0


class DriverIdentity(TypedDict):
    id: str
    host: str
    pid: int


def new_driver_identity() -> DriverIdentity:
    return {"id": uuid.uuid4().hex[:12], "host": socket.gethostname(), "pid": os.getpid()}


def is_dead(trial: FrozenTrial, now: float, me: DriverIdentity, stale_after: float = STALE_AFTER_S) -> str | None:
    """Why a RUNNING trial has no live driver, or None when it still has one."""
    owner = trial.user_attrs.get(DRIVER)
    if owner and owner.get("id") == me["id"]:
        return None
    if owner and owner.get("host") == me["host"] and not pid_alive(int(owner.get("pid", -1))):
        return f"driver process {owner.get('pid')} on {owner.get('host')} is gone"
    beat = trial.user_attrs.get(HEARTBEAT)
    if beat is None and trial.datetime_start is not None:
        beat = trial.datetime_start.timestamp()
    if beat is not None and now - float(beat) > stale_after:
        return f"no driver heartbeat for {now - float(beat):.0f} s"
    return None


def reap(store: StudyStore, me: DriverIdentity, retries: int, stale_after: float = STALE_AFTER_S) -> list[int]:
    """Fail the RUNNING trials of dead drivers and enqueue their retries; return the reaped numbers."""
    reaped = []
    now = time.time()
    for trial in store.study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        why = is_dead(trial, now, me, stale_after)
        if why is None:
            continue
        admitted = trial.user_attrs.get(TRIAL_DIR) is not None  # the driver got past the ask (admit._build)
        if not admitted and not enqueued_params(trial):
            # A sampled point its driver died with before admitting it: nothing ran, so no retry and no budget
            # (a retry of it would run its point beside a later proposal of the same point: run twice).
            store.fail(trial, {FAILURE_REASON: f"driver died before the trial was admitted ({why}): nothing ran",
                               RETRIED: False, GAVE_UP: False})  # fmt: skip
        else:
            fail_and_maybe_retry(store, trial, f"driver died: {why}", retries, resumable=True, count_attempt=False,
                                 launched=admitted)  # fmt: skip
        reaped.append(trial.number)
    return reaped
