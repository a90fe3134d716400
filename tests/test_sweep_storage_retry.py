"""The storage proxy's retry rule (grpo/sweep/study/outage.py) on a real Optuna storage with injected failures:
what counts as a lost connection, the bound, the lines, a write that committed before its connection died.
The outage of a real PostgreSQL server is tests/test_sweep_storage_outage.py."""

from __future__ import annotations

import errno

import optuna
import pytest
import sqlalchemy.exc
from optuna.exceptions import StorageInternalError
from optuna.trial import TrialState

from grpo.errors import StudyStopped
from grpo.sweep.study.outage import RetryingStorage, StorageUnreachable, is_connection_error, retrying

LABEL = "postgresql://grpo:***@db/sweeps"


def _lost_connection() -> Exception:
    """What RDBStorage raises on a lost connection: StorageInternalError from SQLAlchemy's OperationalError."""
    try:
        try:
            raise sqlalchemy.exc.OperationalError("SELECT 1", {}, Exception("server closed the connection"))
        except sqlalchemy.exc.OperationalError as cause:
            raise StorageInternalError("An exception is raised during the commit.") from cause
    except StorageInternalError as err:
        return err


class Flaky(optuna.storages.InMemoryStorage):
    """An in-memory storage whose next ``fail`` calls raise ``error`` (before or after doing their work)."""

    def __init__(self) -> None:
        super().__init__()
        self.fail, self.after, self.error = 0, False, _lost_connection()
        self.clock, self.calls = None, []  # the times of the calls, by the test's clock

    def _maybe_fail(self, work):
        self.calls.append(self.clock() if self.clock else 0.0)
        if self.fail and not self.after:
            self.fail -= 1
            raise self.error
        out = work()
        if self.fail and self.after:
            self.fail -= 1
            raise self.error
        return out

    def get_all_trials(self, *args, **kwargs):
        return self._maybe_fail(lambda: super(Flaky, self).get_all_trials(*args, **kwargs))

    def set_trial_state_values(self, *args, **kwargs):
        return self._maybe_fail(lambda: super(Flaky, self).set_trial_state_values(*args, **kwargs))


class Clock:
    """A fake clock: sleeping advances it, so a bound of minutes takes no time."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def _proxy(inner, limit_s=300.0, give_up=lambda: False):
    clock, lines = Clock(), []
    storage = RetryingStorage(inner, label=LABEL, limit_s=limit_s, resume="grpo-sweep run s.yaml", warn=lines.append,
                              give_up=give_up, clock=clock, sleep=clock.sleep)  # fmt: skip
    return storage, clock, lines


@pytest.mark.parametrize(
    ("err", "lost"),
    [
        (_lost_connection(), True),
        (sqlalchemy.exc.InterfaceError("SELECT 1", {}, Exception("connection already closed")), True),
        (OSError(errno.EIO, "Input/output error"), True),
        (OSError(errno.ESTALE, "Stale file handle"), True),
        (OSError(errno.ENOSPC, "No space left on device"), False),  # a full disk stops the study at once
        (StorageInternalError("exceeding max length"), False),
        (sqlalchemy.exc.IntegrityError("INSERT", {}, Exception("duplicate key")), False),
        (ValueError("bad value"), False),
    ],
    ids=["rdb-lost", "interface", "eio", "estale", "enospc", "internal-no-cause", "integrity", "value"],
)
def test_what_counts_as_a_lost_connection(err, lost):
    assert is_connection_error(err) is lost


def test_an_outage_is_waited_out_with_backoff_and_told_on_one_line():
    inner = Flaky()
    storage, clock, lines = _proxy(inner)
    inner.clock = clock
    study = optuna.create_study(storage=storage)
    study.enqueue_trial({"x": 1.0})
    inner.fail, inner.calls = 6, []
    assert len(study.get_trials(deepcopy=False)) == 1
    waits = [b - a for a, b in zip(inner.calls, inner.calls[1:])]
    assert waits == pytest.approx([0.5, 1.0, 2.0, 4.0, 8.0, 16.0])  # doubling from 0.5 s
    assert len(lines) == 2
    assert lines[0].startswith(f"storage {LABEL} unreachable since ") and ", retrying for up to 300 s" in lines[0]
    assert lines[1].startswith(f"storage {LABEL} reachable again after ")
    inner.fail, inner.calls = 9, []
    study.get_trials(deepcopy=False)
    waits = [b - a for a, b in zip(inner.calls, inner.calls[1:])]
    assert max(waits) == pytest.approx(30.0) and waits[-1] == pytest.approx(30.0)  # it stops growing at 30 s


def test_past_the_bound_every_call_fails_at_once_with_the_resume_line():
    inner = Flaky()
    storage, clock, lines = _proxy(inner, limit_s=60)
    study = optuna.create_study(storage=storage)
    inner.fail = 10**6
    with pytest.raises(StorageUnreachable) as raised:
        study.get_trials()
    assert isinstance(raised.value, StudyStopped)  # the CLI prints it as one line, exit code 1
    assert clock.now == pytest.approx(60)
    text = str(raised.value)
    assert "\n" not in text and text.startswith(f"storage {LABEL} unreachable since ")
    assert text.endswith("resume when you run: grpo-sweep run s.yaml")
    inner.fail = 0
    with pytest.raises(StorageUnreachable):  # the driver is stopping: no second wait
        study.get_trials()


def test_a_ctrl_c_ends_the_wait():
    inner = Flaky()
    stop = []
    storage, clock, _ = _proxy(inner, give_up=lambda: bool(stop))
    study = optuna.create_study(storage=storage)
    inner.fail = 10**6
    clock.sleep = lambda s: (stop.append(1), setattr(clock, "now", clock.now + s))  # interrupted while waiting
    storage._sleep = clock.sleep
    with pytest.raises(StorageUnreachable):
        study.get_trials()
    assert clock.now < 1


def test_other_errors_are_not_retried():
    inner = Flaky()
    storage, clock, lines = _proxy(inner)
    study = optuna.create_study(storage=storage)
    inner.fail, inner.error = 1, ValueError("bad")
    with pytest.raises(ValueError):
        study.get_trials()
    assert clock.now == 0 and lines == []


def test_a_tell_whose_commit_landed_before_the_connection_died_is_not_refused():
    inner = Flaky()
    storage, _, _ = _proxy(inner)
    study = optuna.create_study(storage=storage)
    trial = study.ask()
    inner.fail, inner.after = 1, True  # the state is written, then the connection is lost
    study.tell(trial, 0.5)
    (stored,) = study.get_trials()
    assert stored.state == TrialState.COMPLETE and stored.value == 0.5
    other = study.ask()
    study.tell(other, 0.1)
    with pytest.raises(RuntimeError):  # a finished trial told again without an outage is still refused
        storage.set_trial_state_values(other._trial_id, TrialState.FAIL)


def test_retrying_opens_the_same_study_over_the_proxy():
    study = optuna.create_study(study_name="s", storage=optuna.storages.InMemoryStorage())
    study.enqueue_trial({"x": 2.0})
    again = retrying(study, label="journal:x", limit_s=1, resume="r", warn=print)
    assert isinstance(again._storage, RetryingStorage)
    assert [t.params for t in again.get_trials()] == [{}] and again.study_name == "s"
