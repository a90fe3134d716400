"""Storage outages survived: the driver's Optuna storage behind a proxy that retries lost connections.

Optuna's RDB storage does not retry: a database restart, a failover or a network blip makes the next call
raise ``StorageInternalError`` (wrapping SQLAlchemy's ``OperationalError``), and a driver that lets it escape
dies with its Ray trials. ``RetryingStorage`` wraps the study's storage (every ``BaseStorage`` method, and
``run(fn)`` for the study store's batched journal write): a call that fails with a connection-level error
(``is_connection_error``) is tried again after 0.5 s, 1 s, 2 s, ... up to 30 s apart, until the outage has
lasted ``limit_s`` (the spec's ``storage_retry_timeout``); then ``StorageUnreachable``, and every later call
raises it at once (the driver is stopping). While it waits, the driver's loop waits in the call: the trials'
Ray workers keep training and hold their metrics until the driver drains them. One warning line says when
the outage began, one when storage answers again.

Writes are retried only where a retry cannot repeat what the failed attempt may have committed:
``set_trial_state_values`` checks whether the trial already holds the state it was asked to take.
"""

from __future__ import annotations

import errno
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import optuna
from optuna.exceptions import UpdateFinishedTrialError
from optuna.storages import BaseStorage

from grpo._optuna_private import storage_of
from grpo.errors import StudyStopped, first_line

T = TypeVar("T")

FIRST_WAIT_S = 0.5
MAX_WAIT_S = 30.0
# A journal file's errors worth waiting out (a network file system that went away for a while); a full disk,
# a read-only or unwritable place are not: they stop the study at once, as before (driver.py).
TRANSIENT_ERRNOS = frozenset(
    {
        errno.EIO,
        errno.ESTALE,
        errno.ETIMEDOUT,
        errno.EAGAIN,
        errno.EINTR,
        errno.ENOTCONN,
        errno.ECONNRESET,
        errno.ECONNREFUSED,
        errno.ECONNABORTED,
        errno.EHOSTDOWN,
        errno.EHOSTUNREACH,
        errno.ENETDOWN,
        errno.ENETUNREACH,
    }
)
# DB-API's OperationalError is the "not under the programmer's control" kind (a lost or refused connection, a
# server shutting down); InterfaceError: the connection object itself is closed. SQLAlchemy, psycopg, psycopg2,
# pymysql and MySQLdb all name them so.
_CONNECTION_KINDS = ("OperationalError", "InterfaceError", "DisconnectionError")
_DRIVER_MODULES = ("sqlalchemy", "psycopg", "psycopg2", "pymysql", "MySQLdb")


def _chain(err: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    stack: list[BaseException | None] = [err]
    while stack:
        e = stack.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        yield e
        stack += [e.__cause__, e.__context__]


def retrying(study: optuna.Study, **settings: Any) -> optuna.Study:
    """``study`` opened again over a ``RetryingStorage`` of its storage (``settings``: the proxy's)."""
    return optuna.load_study(study_name=study.study_name, storage=RetryingStorage(storage_of(study), **settings))


def _root(err: BaseException) -> BaseException:
    """What ``err`` wraps at the bottom (Optuna's StorageInternalError blames "invalid data" whatever the cause)."""
    while err.__cause__ is not None:
        err = err.__cause__
    return err


def is_connection_error(err: BaseException) -> bool:
    """Whether ``err`` (or what it wraps) says storage could not be reached, rather than that a call was wrong."""
    for e in _chain(err):
        if isinstance(e, OSError) and e.errno in TRANSIENT_ERRNOS:
            return True
        kind = type(e)
        if kind.__module__.split(".")[0] in _DRIVER_MODULES and (
            any(k.__name__ in _CONNECTION_KINDS for k in kind.__mro__) or getattr(e, "connection_invalidated", False)
        ):
            return True
    return False


class StorageUnreachable(StudyStopped):
    """Storage stayed unreachable past the bound (or the user interrupted the wait): the study stops, resumable."""


class RetryingStorage(BaseStorage):
    """``inner`` with its connection-level failures retried (see the module docstring).

    ``label`` names the storage in messages (password masked), ``resume`` the command that resumes the study;
    ``warn`` prints a line; ``give_up()`` True ends a
    wait early (a Ctrl-C). ``clock``/``sleep`` are for tests that need no real waiting.
    """

    def __init__(
        self,
        inner: BaseStorage,
        *,
        label: str,
        limit_s: float,
        resume: str,
        warn: Callable[[str], None],
        give_up: Callable[[], bool] = lambda: False,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.inner, self.label, self.limit_s, self.resume = inner, label, limit_s, resume
        self.warn, self.give_up, self._clock, self._sleep = warn, give_up, clock, sleep
        self.down_since: float | None = None  # wall-clock start of the outage under way
        self.failed: StorageUnreachable | None = None  # set once the bound has passed: every call fails at once

    def run(self, fn: Callable[[], T]) -> T:
        """``fn()``, retried while it fails with a connection-level error, up to the bound."""
        if self.failed is not None:
            raise self.failed
        started: float | None = None
        wait = FIRST_WAIT_S
        while True:
            try:
                result = fn()
            except Exception as err:
                if not is_connection_error(err):
                    raise
                now = self._clock()
                if started is None:
                    started = now
                    if self.down_since is None:
                        self.down_since = time.time()
                        self.warn(
                            f"storage {self.label} unreachable since {time.strftime('%H:%M:%S')}, retrying for up "
                            f"to {self.limit_s:g} s (storage_retry_timeout): {first_line(_root(err), 160)}"
                        )
                if now - started >= self.limit_s or self.give_up():
                    self.failed = StorageUnreachable(self._stopped_line(now - started))
                    raise self.failed from err
                self._wait(min(wait, started + self.limit_s - now))
                wait = min(2 * wait, MAX_WAIT_S)
                continue
            if self.down_since is not None:
                self.warn(f"storage {self.label} reachable again after {time.time() - self.down_since:.0f} s")
                self.down_since = None
            return result

    def _wait(self, seconds: float) -> None:
        """Sleep in short steps, so that a Ctrl-C (``give_up``) ends the wait at once."""
        end = self._clock() + seconds
        while (left := end - self._clock()) > 0 and not self.give_up():
            self._sleep(min(left, 0.2))

    def _stopped_line(self, waited: float) -> str:
        since = time.strftime("%H:%M:%S", time.localtime(self.down_since or time.time()))
        return (
            f"storage {self.label} unreachable since {since} ({waited:.0f} s): the driver stopped the study; the "
            f"running trials stopped and resume when you run: {self.resume}"
        )

    def _call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        return self.run(lambda: getattr(self.inner, name)(*args, **kwargs))

    # -- BaseStorage, each method through run() -----------------------------------------------------------
    def set_trial_state_values(self, trial_id: int, state: Any, values: Any = None) -> bool:
        tries = 0

        def once() -> bool:
            nonlocal tries
            tries += 1
            try:
                return self.inner.set_trial_state_values(trial_id, state, values)
            except UpdateFinishedTrialError:
                # An attempt that lost its connection after its commit: the trial holds the state already.
                if tries > 1 and self.inner.get_trial(trial_id).state == state:
                    return True
                raise

        return self.run(once)

    def create_new_study(self, *args: Any, **kwargs: Any) -> Any:
        return self._call("create_new_study", *args, **kwargs)

    def delete_study(self, *args: Any, **kwargs: Any) -> Any:
        return self._call("delete_study", *args, **kwargs)

    def set_study_user_attr(self, *args: Any, **kwargs: Any) -> Any:
        return self._call("set_study_user_attr", *args, **kwargs)

    def set_study_system_attr(self, *args: Any, **kwargs: Any) -> Any:
        return self._call("set_study_system_attr", *args, **kwargs)

    def get_study_id_from_name(self, *args: Any, **kwargs: Any) -> Any:
        return self._call("get_study_id_from_name", *args, **kwargs)

    def get_study_name_from_id(self, *args: Any, **kwargs: Any) -> Any:
        return self._call("get_study_name_from_id", *args, **kwargs)

    def get_study_directions(self, *args: Any, **kwargs: Any) -> Any:
        return self._call("get_study_directions", *args, **kwargs)

    def get_study_user_attrs(self, *args: Any, **kwargs: Any) -> Any:
        return self._call("get_study_user_attrs", *args, **kwargs)

    def get_study_system_attrs(self, *args: Any, **kwargs: Any) -> Any:
        return self._call("get_study_system_attrs", *args, **kwargs)

    def get_all_studies(self, *args: Any, **kwargs: Any) -> Any:
        return self._call("get_all_studies", *args, **kwargs)

    def create_new_trial(self, *args: Any, **kwargs: Any) -> Any:
        return self._call("create_new_trial", *args, **kwargs)

    def set_trial_param(self, *args: Any, **kwargs: Any) -> Any:
        return self._call("set_trial_param", *args, **kwargs)

    def get_trial_id_from_study_id_trial_number(self, *args: Any, **kwargs: Any) -> Any:
        return self._call("get_trial_id_from_study_id_trial_number", *args, **kwargs)

    def get_trial_number_from_id(self, *args: Any, **kwargs: Any) -> Any:
        return self._call("get_trial_number_from_id", *args, **kwargs)

    def get_trial_param(self, *args: Any, **kwargs: Any) -> Any:
        return self._call("get_trial_param", *args, **kwargs)

    def set_trial_intermediate_value(self, *args: Any, **kwargs: Any) -> Any:
        return self._call("set_trial_intermediate_value", *args, **kwargs)

    def set_trial_user_attr(self, *args: Any, **kwargs: Any) -> Any:
        return self._call("set_trial_user_attr", *args, **kwargs)

    def set_trial_system_attr(self, *args: Any, **kwargs: Any) -> Any:
        return self._call("set_trial_system_attr", *args, **kwargs)

    def get_trial(self, *args: Any, **kwargs: Any) -> Any:
        return self._call("get_trial", *args, **kwargs)

    def get_all_trials(self, *args: Any, **kwargs: Any) -> Any:
        return self._call("get_all_trials", *args, **kwargs)

    def get_n_trials(self, *args: Any, **kwargs: Any) -> Any:
        return self._call("get_n_trials", *args, **kwargs)

    def get_best_trial(self, *args: Any, **kwargs: Any) -> Any:
        return self._call("get_best_trial", *args, **kwargs)

    def get_trial_params(self, *args: Any, **kwargs: Any) -> Any:
        return self._call("get_trial_params", *args, **kwargs)

    def get_trial_user_attrs(self, *args: Any, **kwargs: Any) -> Any:
        return self._call("get_trial_user_attrs", *args, **kwargs)

    def get_trial_system_attrs(self, *args: Any, **kwargs: Any) -> Any:
        return self._call("get_trial_system_attrs", *args, **kwargs)

    def remove_session(self) -> None:
        self.inner.remove_session()

    def check_trial_is_updatable(self, trial_id: int, trial_state: Any) -> None:
        self.inner.check_trial_is_updatable(trial_id, trial_state)
