"""grpo._optuna_private, the one module that uses Optuna's internals: this Optuna still has each of them (the
test fails on an Optuna that renamed or reshaped one), the batched journal append reads back like one write
per attr, and the public path taken when the version guard says no writes the same attrs."""

from __future__ import annotations

import optuna
from optuna.storages import JournalStorage
from optuna.storages.journal import JournalFileBackend

from grpo import _optuna_private as private
from grpo.sweep.study.store import StudyStore


def _journal_study(tmp_path, name="s"):
    storage = JournalStorage(JournalFileBackend(str(tmp_path / "journal.log")))
    return optuna.create_study(study_name=name, storage=storage), storage


def test_this_optuna_has_every_internal_the_adapter_uses(tmp_path):
    """Optuna 5.1's names: Study._storage, Trial._cached_frozen_trial, JournalOperation.SET_TRIAL_USER_ATTR,
    JournalStorage._thread_lock / _replay_result.worker_id / _backend.append_logs / _sync_with_backend."""
    from optuna.storages.journal._storage import JournalOperation

    assert int(optuna.__version__.split(".")[0]) == private.TESTED_MAJOR
    study, storage = _journal_study(tmp_path)
    assert private.storage_of(study) is storage
    assert isinstance(JournalOperation.SET_TRIAL_USER_ATTR, int)
    assert hasattr(storage._thread_lock, "__enter__") and isinstance(storage._replay_result.worker_id, str)
    assert callable(storage._backend.append_logs) and callable(storage._sync_with_backend)
    trial = study.ask()
    assert trial._cached_frozen_trial.user_attrs == {}
    assert private.batch_supported(storage)


def test_a_batched_append_reads_back_like_one_write_per_attr(tmp_path):
    study, _ = _journal_study(tmp_path)
    trial = study.ask()
    StudyStore(study).set_attrs(trial, {"a": 1, "b": [2, 3], "c": {"d": "e"}})
    assert trial.user_attrs == {"a": 1, "b": [2, 3], "c": {"d": "e"}}  # the asked trial sees them at once
    fresh = JournalStorage(JournalFileBackend(str(tmp_path / "journal.log")))  # another process's replay
    (stored,) = optuna.load_study(study_name="s", storage=fresh).get_trials()
    assert stored.user_attrs == {"a": 1, "b": [2, 3], "c": {"d": "e"}}


def test_without_the_internals_the_public_path_writes_the_same(tmp_path, monkeypatch):
    monkeypatch.setattr(private, "batch_supported", lambda storage: False)
    monkeypatch.setattr("grpo.sweep.study.store.batch_supported", lambda storage: False)
    study, _ = _journal_study(tmp_path)
    asked, other = study.ask(), study.ask()
    store = StudyStore(study)
    store.set_attrs(asked, {"a": 1, "b": 2})
    store.set_attrs(store.frozen(other), {"c": 3, "d": 4})  # a frozen trial: by its storage id
    assert asked.user_attrs == {"a": 1, "b": 2}
    assert [t.user_attrs for t in study.get_trials()] == [{"a": 1, "b": 2}, {"c": 3, "d": 4}]
