"""The study in storage: opening (creating or resuming) it, refusing incompatible resumes, and the one
adapter through which the sweep writes trial state that Optuna's ``Trial`` handle does not cover.

Optuna's public API covers the trials a driver asked itself (``Trial.set_user_attr``, ``study.tell``).
A sweep also writes to trials it holds only as ``FrozenTrial`` (a dead driver's trial it reaps, its own
trial after the worker finished, a heartbeat): that goes through the study's storage (``BaseStorage``'s
public methods, the trial id found with its public lookups). Getting that storage, and writing a trial's
attrs to a journal as one append (``set_attrs``), use Optuna internals: they are all in
grpo._optuna_private, behind a version guard. Everything else uses public API (``study.tell`` by number,
``study.enqueue_trial`` for retries). Retries
carry Optuna's own lineage attrs (``failed_trial``, ``retry_history``, as its
``RetryHeartbeatStaleTrialCallback`` writes them), so ``retried_trial_number`` and optuna-dashboard
see which trial a retry repeats.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import optuna
from optuna.distributions import distribution_to_json
from optuna.storages import BaseStorage
from optuna.storages.journal import JournalFileBackend, JournalFileSymlinkLock
from optuna.trial import FrozenTrial, TrialState

from grpo._imports import source_file
from grpo._optuna_private import append_user_attrs, batch_supported, planned_params, refresh_cached_attrs, storage_of
from grpo.errors import UserError, first_line
from grpo.sweep.spec.models import SweepSpec
from grpo.sweep.spec.space import parse_expression
from grpo.sweep.study.environment import collect_environment
from grpo.sweep.study.outage import RetryingStorage
from grpo.trial_attrs import (
    HEARTBEAT,
    OPTUNA_FAILED_TRIAL,
    OPTUNA_RETRY_HISTORY,
    RETRY_OF,
    START_POINT,
    TRANSFERRED_FROM,
)

# A journal lock held this long without the journal changing belongs to a dead driver (a write holds it
# for milliseconds): it is released. Optuna's default is 30 s.
JOURNAL_LOCK_GRACE_S = 15


def make_storage(spec: SweepSpec, **rdb_kwargs: Any) -> BaseStorage:
    """The Optuna storage of the study, creating the journal's (or SQLite file's) folder.

    Call this only when the study actually runs: validating a spec must write nothing.
    ``journal:PATH`` gives ``JournalStorage(JournalFileBackend(PATH))``; any other URL
    (sqlite, postgresql, mysql) gives ``RDBStorage(url, **rdb_kwargs)``.
    """
    url = spec.storage_url()
    where = f"{spec.source}: storage: {spec.storage_label()}"
    try:
        if url.startswith("journal:"):
            # Absolute: Optuna's symlink lock points at the journal by the path it is given, and a relative
            # one dangles from the lock's folder, so a lock left by a killed driver was never released
            # (its grace period needs the target's mtime): the next driver spun forever.
            journal = Path(url[len("journal:") :]).expanduser().resolve()
            journal.parent.mkdir(parents=True, exist_ok=True)
            lock = JournalFileSymlinkLock(str(journal), grace_period=JOURNAL_LOCK_GRACE_S)
            return optuna.storages.JournalStorage(JournalFileBackend(str(journal), lock_obj=lock))
        if url.startswith("sqlite:///"):
            Path(url[len("sqlite:///") :]).expanduser().parent.mkdir(parents=True, exist_ok=True)
        return _rdb_storage(url, **rdb_kwargs)
    except OSError as err:
        raise UserError(f"{where}: cannot write there ({err.strerror})") from None
    except ImportError as err:  # the database driver (e.g. psycopg for postgresql://) is not installed
        raise UserError(f"{where}: its database driver is not installed ({err}); {_driver_hint(url)}") from None
    except Exception as err:  # unreachable server, bad credentials, a bad URL (sqlalchemy / Optuna errors)
        if not _is_storage_error(err):
            raise
        raise UserError(f"{where}: cannot open it ({_reason(err, spec)})") from None


def _driver_hint(url: str) -> str:
    if url.startswith("postgresql"):
        return "pip install grpo-sweep[postgres] (psycopg2), or write postgresql+psycopg:// to use psycopg 3"
    if url.startswith("mysql"):
        return "pip install pymysql and write mysql+pymysql://"
    return "install the driver the URL names"


def _reason(err: BaseException, spec: SweepSpec) -> str:
    """The first line of what went wrong, with the URL's password masked wherever it appears."""
    reason = first_line(err.__cause__ or err.__context__ or err, 200).replace(spec.storage_url(), spec.storage_label())
    secret = _password(spec.storage_url())
    return reason.replace(secret, "***") if secret else reason


def _password(url: str) -> str | None:
    from urllib.parse import urlsplit

    try:
        return urlsplit(url).password or None
    except ValueError:
        return None


def _file_problem(path: Path, where: str) -> str | None:
    """Why a journal or SQLite file cannot be created or opened at ``path`` (None when it can), found without
    writing anything: a folder in its place, a file where a folder is needed, a folder that cannot be written."""
    if path.is_dir():
        return f"{where}: is a folder; name a file in it"
    if path.exists():
        if not os.access(path, os.R_OK | os.W_OK):
            return f"{where}: cannot write there (no permission to read and write {path})"
        return None
    ancestor = path.parent
    while not ancestor.exists():
        if ancestor.is_symlink():
            return f"{where}: cannot write there ({ancestor} is a broken link)"
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        return f"{where}: cannot write there ({ancestor} is a file, not a folder)"
    try:  # an unnamed file (O_TMPFILE where Linux has it): proves the folder writable, leaves nothing behind
        with tempfile.TemporaryFile(dir=ancestor):
            pass
    except OSError as err:
        return f"{where}: cannot write there ({err.strerror or err})"
    return None


def check_storage(spec: SweepSpec) -> None:
    """Raise a one-line UserError when the study's storage cannot be opened, creating nothing: a journal
    or SQLite file whose place is a folder or cannot be written, a database driver not installed, a database
    server that does not answer or refuses the credentials (tried once with a short timeout). What ``run``
    would find when it opens the study, found by ``validate`` too. The password is never shown."""
    url = spec.storage_url()
    where = f"{spec.source}: storage: {spec.storage_label()}"
    for scheme in ("journal:", "sqlite:///"):
        if url.startswith(scheme):
            rest = url[len(scheme) :].split("?", 1)[0] if scheme == "sqlite:///" else url[len(scheme) :]
            problem = _file_problem(Path(rest).expanduser(), where)
            if problem:
                raise UserError(problem)
            return
    _has_optuna_tables(spec)


def _has_optuna_tables(spec: SweepSpec) -> bool:
    """Whether the study's database holds Optuna's tables (tried once, with a short timeout); a one-line
    UserError when it cannot be reached. Creates nothing."""
    url = spec.storage_url()
    where = f"{spec.source}: storage: {spec.storage_label()}"
    try:
        import sqlalchemy

        engine = sqlalchemy.create_engine(url, **_connect_args(url))
        try:
            with engine.connect() as connection:
                return sqlalchemy.inspect(connection).has_table("version_info")
        finally:
            engine.dispose()
    except ImportError as err:
        raise UserError(f"{where}: its database driver is not installed ({err}); {_driver_hint(url)}") from None
    except Exception as err:
        if not _is_storage_error(err):
            raise
        raise UserError(f"{where}: cannot open it ({_reason(err, spec)})") from None


CONNECT_TIMEOUT_S = 10  # a database that does not answer is refused after this, not after the driver's minutes


def _connect_args(url: str) -> dict[str, Any]:
    if url.startswith("postgresql"):
        return {"connect_args": {"connect_timeout": CONNECT_TIMEOUT_S}}
    if url.startswith("mysql"):
        return {"connect_args": {"connect_timeout": CONNECT_TIMEOUT_S}}
    return {}


def _rdb_storage(url: str, **rdb_kwargs: Any) -> BaseStorage:
    """``RDBStorage(url)``. Two drivers starting at once on a fresh database race to create Optuna's tables
    (a unique-key error from PostgreSQL for one of them, or a table the other is still creating that does not
    exist yet): the loser retries after a short pause."""
    races = ("unique constraint", "already exists", "UndefinedTable")  # UndefinedTable: psycopg's "relation ..."
    for attempt in range(5):
        try:
            return optuna.storages.RDBStorage(url, **rdb_kwargs)
        except Exception as err:
            text = f"{err} {err.__cause__ or ''}"
            if attempt == 4 or not any(race in text for race in races):
                raise
            time.sleep(0.5 * (attempt + 1))
    raise AssertionError("unreachable")


def _is_storage_error(err: Exception) -> bool:
    kinds = [type(err), *(type(e) for e in (err.__cause__, err.__context__) if e is not None)]
    return any(k.__module__.startswith(("sqlalchemy", "optuna.exceptions", "psycopg")) for k in kinds) or isinstance(
        err, (optuna.exceptions.StorageInternalError, ValueError)
    )


# A user reward function in an override, a searched value or the base's verifier_function (issue 41).
_REWARD_REF = re.compile(r"[\w./~-]+\.py:[A-Za-z_]\w*|[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+:[A-Za-z_]\w*")


def reward_files(spec: SweepSpec, base_config: dict[str, Any] | None = None) -> dict[str, str]:
    """A hash of each user reward function's source file the study names (``file.py:fn`` relative to the spec's
    folder, or ``package.module:fn``): a resumed study whose reward changed is another study."""
    named = (base_config or {}).get("rl_config", {}).get("verifier_function") or []
    texts = [*map(str, named), *spec.overrides, *(json.dumps(e.values, default=str) for e in spec.search.values())]
    out: dict[str, str] = {}
    for ref in sorted({m.split("@")[0] for text in texts for m in _REWARD_REF.findall(text)}):
        path = source_file(ref, spec.path.parent if spec.path else None)
        if path is not None:
            out[ref] = hashlib.sha256(path.read_bytes()).hexdigest()[:16]
    return out


def fingerprint(spec: SweepSpec, base_config: dict[str, Any] | None = None) -> str:
    """A hash of what makes trial values comparable: base, overrides, search space, objectives, and the contents of
    the user reward functions' files (``base_config``: the composed base, whose verifier_function may name some).

    The search space is hashed as parsed Optuna distributions, so reformatting an expression
    (spaces, ``1e-1`` vs ``0.1``) does not change it; trials, concurrency, seeds, sampler,
    pruner and the cluster can change between runs of the same study.
    """
    search: dict[str, Any] = {}
    for key, entry in sorted(spec.search.items()):
        try:
            values: Any = json.loads(distribution_to_json(parse_expression(key, entry.values)))
        except ValueError:
            values = entry.values
        search[key] = {"values": values, "when": entry.when}
    payload = {
        "base": spec.base_as_written,
        "overrides": list(spec.overrides),
        "search": search,
        "objectives": [o.model_dump() for o in spec.objectives],
    }
    if spec.scheduler is not None:  # a pbt study's trials are segments of its population: not comparable otherwise
        payload["scheduler"] = spec.scheduler.model_dump()
    rewards = reward_files(spec, base_config)
    if rewards:  # absent without user functions: the fingerprints of earlier studies stay what they were
        payload["reward_files"] = rewards
    text = json.dumps(payload, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def metric_names(spec: SweepSpec) -> list[str]:
    """Optuna's names of the study's values (``study.set_metric_names``): each objective's metric and the rule
    that reduced its curve, e.g. ``eval/acc_greedy (auc)``, as optuna-dashboard and ``optuna trials`` show
    them (instead of "Objective 0"). Pandas' trials dataframe names its columns ``value_<name>`` from them."""
    return [f"{o.metric} ({o.reduce}{f', k={o.k}' if o.k is not None else ''})" for o in spec.objectives]


def _set_metric_names(study: optuna.Study, spec: SweepSpec) -> None:
    with warnings.catch_warnings():  # experimental since Optuna 3.2, unchanged since; the dashboard reads it
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        study.set_metric_names(metric_names(spec))


def find_study(spec: SweepSpec) -> optuna.Study | None:
    """The spec's existing study, or None when it was never run. Writes nothing: no folder, no journal
    or SQLite file, no tables (``status``, ``best``, ``report`` and ``export`` are read-only)."""
    url = spec.storage_url()
    for scheme in ("journal:", "sqlite:///"):
        if url.startswith(scheme):
            path = Path(url[len(scheme) :]).expanduser()
            if path.is_dir():
                raise UserError(f"{spec.source}: storage: {spec.storage_label()}: is a folder; name a file in it")
            if not path.is_file():
                return None
    if not url.startswith(("journal:", "sqlite:///")) and not _has_optuna_tables(spec):
        return None  # a database no study was run in yet (RDBStorage would fail on the missing version table)
    try:
        storage = make_storage(spec, **({} if url.startswith("journal:") else {"skip_table_creation": True}))
        names = {s.study_name for s in optuna.get_all_study_summaries(storage, include_best_trial=False)}
    except OSError:
        return None
    except UserError:
        raise  # an unreachable database is an error, not a study that was never run
    except Exception as err:  # an RDB without Optuna's tables yet (sqlalchemy errors): no study there
        if "sqlalchemy" not in type(err).__module__:
            raise
        return None
    if spec.study not in names:
        return None
    return optuna.load_study(study_name=spec.study, storage=storage)


def open_study(spec: SweepSpec, base_config: dict[str, Any]) -> tuple[optuna.Study, bool]:
    """Create the study or resume it. Returns (study, resumed). Refuses a changed spec (see ``--fork``).

    The study's values are named after the objectives (``metric_names``), on a resumed study too. A new
    study records the spec, its fingerprint, ``base_config`` (the composed base config with the
    spec's overrides, what the report diffs trial configs against) and ``environment`` (Python, package
    versions, git commit, platform: ``grpo.sweep.study.environment``) as study user attrs.

    Two drivers starting at once on a fresh RDB race to create Optuna's tables (a unique-key error from
    PostgreSQL for one of them): the loser retries after a short pause, when the tables exist.
    """
    for attempt in range(5):
        try:
            return _open_study(spec, base_config)
        except UserError:
            raise
        except Exception as err:  # sqlalchemy IntegrityError/ProgrammingError from the table-creation race
            if attempt == 4 or "sqlalchemy" not in type(err).__module__ + str(type(err).__mro__):
                raise
            time.sleep(0.5 * (attempt + 1))
    raise AssertionError("unreachable")


def _open_study(spec: SweepSpec, base_config: dict[str, Any]) -> tuple[optuna.Study, bool]:
    existing = find_study(spec)
    leftovers = spec.study_dir / "trials"
    if existing is None and leftovers.is_dir() and any(leftovers.iterdir()):
        # Trial folders belong to one study: a new study must not resume from, or append to, another's.
        # Refused before the storage is opened: opening a journal creates its file.
        raise UserError(
            f"{spec.path}: study '{spec.study}' is new in its storage ({spec.storage_label()}) but {leftovers} "
            f"holds the trial folders of an earlier study of that name; move them away, or run with --fork NEW_NAME"
        )
    storage = make_storage(spec)
    directions = [o.direction for o in spec.objectives]
    if existing is not None:
        old = existing.user_attrs.get("fingerprint")
        if old is not None and old != fingerprint(spec, base_config):
            raise UserError(
                f"{spec.path}: study '{spec.study}' was created from a different spec (base, overrides, search, "
                f"objective or a reward function's file changed); rerun with --fork NEW_NAME to start a new study "
                f"from this spec"
            )
        if [d.name.lower() for d in existing.directions] != directions:
            raise UserError(f"{spec.path}: objective: directions {directions} differ from the stored study's")
        if existing.metric_names != metric_names(spec):  # a study made before names were set gets them now
            _set_metric_names(existing, spec)
        return existing, True
    spec.study_dir.mkdir(parents=True, exist_ok=True)
    study = optuna.create_study(study_name=spec.study, storage=storage, directions=directions, load_if_exists=True)
    _set_metric_names(study, spec)
    attrs = {
        "spec": spec.to_dict(),
        "spec_path": str(spec.path),
        "base": spec.base,
        "base_config": base_config,
        "objectives": [o.model_dump() for o in spec.objectives],
        "sampler": spec.sampler.name,
        "pruner": spec.pruner.name,
        "study_dir": str(spec.study_dir),
        "fingerprint": fingerprint(spec, base_config),
        "backend": spec.backend,
        "environment": collect_environment(),
    }
    for key, value in attrs.items():
        study.set_user_attr(key, value)
    return study, False


class StudyStore:
    """Writes to trials by their frozen record (see the module docstring); one per driver."""

    def __init__(self, study: optuna.Study):
        self.study = study
        self._storage = storage_of(study)
        self._study_id: int | None = None
        self._ids: dict[int, int] = {}  # trial number -> storage id (ids never change)

    @property
    def storage(self) -> BaseStorage:
        """The study's storage (a ``RetryingStorage`` in a driver: grpo.sweep.study.outage)."""
        return self._storage

    def _id(self, trial: FrozenTrial | optuna.Trial) -> int:
        """The trial's storage id, by Optuna's public lookups (once per trial)."""
        found = self._ids.get(trial.number)
        if found is None:
            if self._study_id is None:
                self._study_id = self._storage.get_study_id_from_name(self.study.study_name)
            found = self._storage.get_trial_id_from_study_id_trial_number(self._study_id, trial.number)
            self._ids[trial.number] = found
        return found

    def set_attrs(self, trial: FrozenTrial | optuna.Trial, attrs: dict[str, Any]) -> None:
        """User attrs on a trial, written together: on a journal, one append (one lock, one fsync) for all of
        them instead of one each; on other storages, one write each. An ``optuna.Trial`` sees them at once."""
        storage = self._storage
        inner = storage.inner if isinstance(storage, RetryingStorage) else storage
        if len(attrs) > 1 and batch_supported(inner):
            trial_id = self._id(trial)

            def write() -> None:
                append_user_attrs(inner, trial_id, attrs)  # type: ignore[arg-type]  # a JournalStorage

            if isinstance(storage, RetryingStorage):
                storage.run(write)
            else:
                write()
            if isinstance(trial, optuna.Trial):
                refresh_cached_attrs(trial, attrs)
        elif isinstance(trial, optuna.Trial):
            for key, value in attrs.items():
                trial.set_user_attr(key, value)
        else:
            for key, value in attrs.items():
                storage.set_trial_user_attr(self._id(trial), key, value)

    def beat(self, trials: list[optuna.Trial], now: float) -> None:
        """Refresh the ``heartbeat`` attr of running trials; one that just ended (a race) is skipped."""
        for trial in trials:
            try:
                self._storage.set_trial_user_attr(self._id(trial), HEARTBEAT, now)
            except RuntimeError:  # Optuna refuses writes to a finished trial (another driver's reaper)
                pass

    def frozen(self, trial: optuna.Trial | FrozenTrial) -> FrozenTrial:
        """The trial as stored now (its latest attrs)."""
        return self._storage.get_trial(self._id(trial))

    def fail(self, trial: FrozenTrial, attrs: dict[str, Any]) -> None:
        """Set ``attrs`` and mark the trial FAIL (unless it finished meanwhile)."""
        self.set_attrs(trial, attrs)
        self.study.tell(trial.number, state=TrialState.FAIL, skip_if_finished=True)

    def enqueue_retry(self, trial: FrozenTrial, user_attrs: dict[str, Any]) -> None:
        """Enqueue ``trial``'s parameters again (asked before new points), with ``user_attrs`` (``retry_of`` ...).

        ``study.enqueue_trial`` keeps samplers right (GridSampler skips enqueued points); Optuna's retry
        lineage attrs are added when the retry is asked (``record_retry_lineage``).
        """
        # planned_params: a trial killed between its ask and its suggest holds its point in fixed_params alone
        self.study.enqueue_trial(planned_params(trial), user_attrs=user_attrs, skip_if_exists=False)

    def enqueue_segment(self, params: dict[str, Any] | None, user_attrs: dict[str, Any]) -> None:
        """Enqueue a pbt segment: a branch's parameters (fixed), or none for generation 0 (the sampler's)."""
        self.study.enqueue_trial(dict(params or {}), user_attrs=user_attrs, skip_if_exists=False)

    def enqueue_start_points(self, points: list[dict[str, Any]]) -> int:
        """Enqueue the spec's start points (tried before any proposal) that no trial has run or waits for:
        ``skip_if_exists`` compares with every trial's params, so a rerun adds none twice. Returns how many."""
        before = len(self.study.get_trials(deepcopy=False))
        for i, point in enumerate(points):
            self.study.enqueue_trial(dict(point), user_attrs={START_POINT: i}, skip_if_exists=True)
        return len(self.study.get_trials(deepcopy=False)) - before

    def enqueue_transferred(self, points: list[dict[str, Any]], sources: list[str]) -> int:
        """Enqueue another study's best configurations (``transfer``) that no trial has run or waits for, each
        with ``transferred_from: "<study>#<trial>"``; ``skip_if_exists``: a rerun adds none twice."""
        before = len(self.study.get_trials(deepcopy=False))
        for point, source in zip(points, sources, strict=True):
            self.study.enqueue_trial(dict(point), user_attrs={TRANSFERRED_FROM: source}, skip_if_exists=True)
        return len(self.study.get_trials(deepcopy=False)) - before

    def enqueue_confirmation(self, params: dict[str, Any], user_attrs: dict[str, Any]) -> None:
        """Enqueue ``params`` as a new trial of the confirmation stage (``user_attrs`` name its source)."""
        self.study.enqueue_trial(dict(params), user_attrs=user_attrs, skip_if_exists=False)

    def record_retry_lineage(self, trial: optuna.Trial) -> None:
        """On an asked retry: Optuna's ``failed_trial`` / ``retry_history`` system attrs, as its own
        ``RetryHeartbeatStaleTrialCallback`` writes them (what ``retried_trial_number`` and
        optuna-dashboard read)."""
        failed_number = trial.user_attrs.get(RETRY_OF)
        if failed_number is None:
            return
        failed = next(t for t in self.study.get_trials(deepcopy=False) if t.number == failed_number)
        history = [*failed.system_attrs.get(OPTUNA_RETRY_HISTORY, []), failed.number]
        self._storage.set_trial_system_attr(self._id(trial), OPTUNA_FAILED_TRIAL, history[0])
        self._storage.set_trial_system_attr(self._id(trial), OPTUNA_RETRY_HISTORY, history)
