"""Every use of Optuna's private internals, in one place, behind a version guard.

Optuna's public API covers what a driver does with the trials it asked itself. Two things need more:

- ``storage_of(study)``: the study's storage (``Study._storage``). Optuna offers no public getter; the
  storage object is what the study store writes through (its ``BaseStorage`` methods are public) and what
  the report's frozen study view (grpo.report._snapshot) is built on.
- ``enqueued_params(trial)``: the parameters an enqueued trial was given (the ``fixed_params`` system attr), which
  it holds before they are suggested: a retry of a trial killed in that window keeps them.
- ``append_user_attrs``: a trial's user attrs written to a journal as one append (one lock, one fsync)
  instead of one each: the records ``JournalStorage.set_trial_user_attr`` appends
  (optuna/storages/journal/_storage.py, 5.1: one ``SET_TRIAL_USER_ATTR`` record per key, then a sync that
  applies them), in one ``append_logs`` call, which takes a list of records (journal/_file.py); the replay
  is unchanged. ``refresh_cached_attrs`` then updates an ``optuna.Trial``'s cached frozen trial, as
  ``Trial.set_user_attr`` does after its write.

``batch_supported()`` is the guard: on an Optuna other than the major version these were read from
(``TESTED_MAJOR``), or one that lacks a name used here, the callers use the public one-write-per-attr path
instead. tests/test_optuna_private.py fails on an Optuna that changed any of it.
"""

from __future__ import annotations

import functools
from typing import Any

import optuna
from optuna.exceptions import UpdateFinishedTrialError
from optuna.storages import BaseStorage, JournalStorage
from optuna.trial import FrozenTrial

TESTED_MAJOR = 5  # pyproject: optuna>=5,<6; the internals below as in Optuna 5.1


def storage_of(study: optuna.Study) -> BaseStorage:
    """The storage ``study`` reads and writes (Optuna keeps it private, with no public getter)."""
    storage = getattr(study, "_storage", None)
    if not isinstance(storage, BaseStorage):
        raise RuntimeError(f"optuna {optuna.__version__}: Study._storage is gone; grpo-sweep needs optuna>=5,<6")
    return storage


@functools.cache
def _journal_internals() -> bool:
    if int(optuna.__version__.split(".")[0]) != TESTED_MAJOR:
        return False
    try:
        from optuna.storages.journal._storage import JournalOperation
    except ImportError:
        return False
    return hasattr(JournalOperation, "SET_TRIAL_USER_ATTR") and hasattr(JournalStorage, "_sync_with_backend")


def batch_supported(storage: BaseStorage) -> bool:
    """Whether ``append_user_attrs`` may write to ``storage``: a journal of the Optuna these internals were
    read from (``TESTED_MAJOR``), with every name it uses."""
    if not isinstance(storage, JournalStorage) or not _journal_internals():
        return False
    replay = getattr(storage, "_replay_result", None)
    backend = getattr(storage, "_backend", None)
    return hasattr(storage, "_thread_lock") and hasattr(replay, "worker_id") and hasattr(backend, "append_logs")


def append_user_attrs(storage: JournalStorage, trial_id: int, attrs: dict[str, Any]) -> None:
    """``attrs`` on trial ``trial_id`` as one journal append (see the module docstring)."""
    from optuna.storages.journal._storage import JournalOperation

    with storage._thread_lock:
        worker = storage._replay_result.worker_id
        records = [
            {"op_code": JournalOperation.SET_TRIAL_USER_ATTR, "worker_id": worker, "trial_id": trial_id,
             "user_attr": {key: value}}
            for key, value in attrs.items()
        ]  # fmt: skip
        storage._backend.append_logs(records)
        _sync_own_records(storage, len(records))


def _sync_own_records(storage: JournalStorage, count: int) -> None:
    """Apply the ``count`` records just appended. On a finished trial each of them raises when the replay
    reaches it (this driver issued it), one per sync; the rest of the batch would then raise in later,
    unrelated reads. So: sync until all are applied, then raise the first refusal, as a single write would."""
    refused: UpdateFinishedTrialError | None = None
    for _ in range(count):
        try:
            storage._sync_with_backend()
            break
        except UpdateFinishedTrialError as err:
            refused = refused or err
    else:
        storage._sync_with_backend()
    if refused is not None:
        raise refused


def enqueued_params(trial: FrozenTrial) -> dict[str, Any]:
    """The parameters ``trial`` was enqueued with, {} for a sampled one. ``Study.enqueue_trial`` keeps them in the
    ``fixed_params`` system attr (optuna/study/study.py) and each lands in ``trial.params`` only when suggested, so a
    trial whose driver died between the ask and the suggest has them there alone (Optuna's own duplicate check in
    ``enqueue_trial`` reads ``system_attrs.get("fixed_params", trial.params)`` the same way)."""
    return dict(trial.system_attrs.get("fixed_params") or {})


def planned_params(trial: FrozenTrial) -> dict[str, Any]:
    """What ``trial`` runs: its enqueued parameters, with whatever was already suggested."""
    return {**enqueued_params(trial), **trial.params}


def refresh_cached_attrs(trial: optuna.Trial, attrs: dict[str, Any]) -> None:
    """What ``Trial.set_user_attr`` does after its write: the trial's cached frozen trial sees ``attrs``."""
    trial._cached_frozen_trial.user_attrs.update(attrs)
