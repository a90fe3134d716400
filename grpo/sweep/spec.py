"""The sweep spec (``sweeps/*.yaml``): one validated pydantic model, and the loader that builds it.

``load_spec(path)`` reads the YAML with ``yaml.safe_load``, validates every key (unknown keys are
errors with a did-you-mean, values are checked against their type and range), resolves ``base`` to a
config, checks ``overrides`` and the ``search`` space against the config schema, and checks the
sampler and pruner. Every problem found becomes one line ``<file>: <key path>: <what is wrong>`` and
they are raised together as one ``UserError``. Nothing is written while loading: the study folder
is created only when the study runs (``make_storage``). The full key reference is docs/sweep_spec.md.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import os
import re
import sys
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, field_validator, model_validator

from grpo.errors import UserError, did_you_mean, dotted, validation_lines

REPO_ROOT = Path(__file__).resolve().parents[2]
STUDY_NAME = re.compile(r"^[A-Za-z0-9_-]+$")
ADDRESS = re.compile(r"^(local|auto|ray://[^\s:/]+(:\d+)?)$")
BACKEND = re.compile(r"^(embedded|mindspeed|[A-Za-z_][\w.]*:[A-Za-z_]\w*)$")
STORAGE_SCHEMES = ("journal:", "sqlite:///", "postgresql://", "postgresql+", "mysql://", "mysql+")
SAMPLER_NAMES = ("tpe", "random", "grid", "cmaes", "nsga2", "gp")
PRUNER_NAMES = ("median", "successive_halving", "hyperband", "none")
REDUCER_NAMES = ("last", "max", "min", "mean_last_k", "auc")
DEFAULT_MEAN_LAST_K = 5


def config_dir() -> Path:
    """The config dir: ``$GRPO_CONFIG_DIR`` when set, else the repository's ``configs/`` (as grpo.config)."""
    env = os.environ.get("GRPO_CONFIG_DIR")
    return Path(env).expanduser().resolve() if env else REPO_ROOT / "configs"


# ------------------------------------------------------------------------------------------ models
class _Strict(BaseModel):
    """Unknown keys are errors everywhere in the spec."""

    model_config = ConfigDict(extra="forbid")


class SearchEntry(_Strict):
    """One searched key: a Hydra sweep expression, active only when ``when`` holds.

    ``when`` maps other searched keys to the value (or list of values) they must take for this one
    to be sampled, e.g. ``{rl_config.kl_ctrl_type: adaptive}``.
    """

    values: str
    when: dict[str, Any] | None = None

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, data: Any) -> Any:
        if isinstance(data, str):
            return {"values": data}
        if isinstance(data, dict):
            return data
        raise ValueError(
            f"must be a Hydra sweep expression such as choice(...) or interval(...) (got {data!r}); "
            "fixed values go under overrides"
        )


class ObjectiveSpec(_Strict):
    """One objective: a metric, its direction, and the rule that turns its curve into a value."""

    metric: str = Field(min_length=1)
    direction: Literal["maximize", "minimize"] = "maximize"
    reduce: Literal["last", "max", "min", "mean_last_k", "auc"] = "last"
    k: int | None = Field(None, ge=1)

    @model_validator(mode="after")
    def _k_only_for_mean_last_k(self) -> ObjectiveSpec:
        if self.reduce == "mean_last_k":
            if self.k is None:
                self.k = DEFAULT_MEAN_LAST_K
        elif self.k is not None:
            raise ValueError(f"k: only used with reduce: mean_last_k (reduce is {self.reduce})")
        return self

    def reducer(self):
        """The ``CurveReducer`` for this objective."""
        from grpo.sweep.objectives import get_reducer

        return get_reducer(self.reduce, self.k)


class SamplerSpec(_Strict):
    name: Literal["tpe", "random", "grid", "cmaes", "nsga2", "gp"] = "tpe"
    seed: int | None = None
    options: dict[str, Any] = Field(default_factory=dict)


class PrunerSpec(_Strict):
    name: Literal["median", "successive_halving", "hyperband", "none"] = "median"
    warmup_steps: int = Field(0, ge=0)
    options: dict[str, Any] = Field(default_factory=dict)


class ClusterSpec(_Strict):
    address: str = "local"
    # Only for a local cluster (address: local): CPUs to offer (default: all cores) and custom resources
    # to declare, e.g. {NPU: 16} to schedule NPU trials on one Ascend host without `ray start`.
    num_cpus: int | None = Field(None, ge=1)
    resources: dict[str, float] = Field(default_factory=dict)

    @field_validator("address")
    @classmethod
    def _address(cls, value: str) -> str:
        if not ADDRESS.match(value):
            raise ValueError(f"must be local, auto or ray://host:port (got {value!r})")
        return value


class TrackingSpec(_Strict):
    wandb: Literal["off", "offline", "online"] = "off"
    tensorboard: bool = False

    @field_validator("wandb", mode="before")
    @classmethod
    def _yaml_off(cls, value: Any) -> Any:
        # YAML 1.1 reads a bare `off` as False.
        return "off" if value is False else value


class MindSpeedSpec(_Strict):
    """How the mindspeed backend launches MindSpeed-RL (ignored by the embedded backend)."""

    path: str | None = None
    python: str = Field(default_factory=lambda: sys.executable)
    entry: str = "cli/train_grpo.py"
    env: dict[str, str] = Field(default_factory=dict)
    stall_timeout: float = Field(1800, gt=0)
    kill_grace: float = Field(30, ge=0)
    checkpoints: dict[str, str] = Field(default_factory=dict)
    ref_model_load_path: str | None = None

    @field_validator("env", mode="before")
    @classmethod
    def _env_as_text(cls, value: Any) -> Any:
        if isinstance(value, dict):
            return {k: v if isinstance(v, str) or v is None else str(v) for k, v in value.items()}
        return value


class PlanSpec(_Strict):
    device_memory_gb: float = Field(64, gt=0)
    enabled: bool = True


class SweepSpec(_Strict):
    """A validated sweep spec. Build it with ``load_spec``; ``model_validate`` alone skips the file checks."""

    study: str
    base: str
    overrides: list[str] = Field(default_factory=list)
    search: dict[str, SearchEntry] = Field(default_factory=dict)
    objectives: list[ObjectiveSpec] = Field(alias="objective", min_length=1)
    sampler: SamplerSpec = Field(default_factory=SamplerSpec)
    pruner: PrunerSpec = Field(default_factory=PrunerSpec)
    trials: int = Field(20, ge=1)
    concurrency: int = Field(1, ge=1)
    seeds: int = Field(1, ge=1)
    retries: int = Field(1, ge=0)
    timeout_per_trial: float | None = Field(None, gt=0)
    # embedded | mindspeed | "package.module:ClassName" (a user's own TrialBackend subclass)
    backend: str = "embedded"
    cluster: ClusterSpec = Field(default_factory=ClusterSpec)
    storage: str | None = None
    tracking: TrackingSpec = Field(default_factory=TrackingSpec)
    mindspeed: MindSpeedSpec = Field(default_factory=MindSpeedSpec)
    plan: PlanSpec = Field(default_factory=PlanSpec)

    _path: Path | None = PrivateAttr(default=None)
    _base_as_written: str | None = PrivateAttr(default=None)
    _warnings: list[str] = PrivateAttr(default_factory=list)

    @field_validator("study")
    @classmethod
    def _study_name(cls, value: str) -> str:
        if not STUDY_NAME.match(value):
            raise ValueError(f"must use letters, digits, - and _ only (got {value!r})")
        return value

    @field_validator("backend")
    @classmethod
    def _backend(cls, value: str) -> str:
        if not BACKEND.match(value):
            raise ValueError(f"must be embedded, mindspeed or package.module:ClassName (got {value})")
        return value

    @field_validator("sampler", "pruner", mode="before")
    @classmethod
    def _name_shorthand(cls, value: Any) -> Any:
        return {"name": value} if isinstance(value, str) else value

    @field_validator("objectives", mode="before")
    @classmethod
    def _objective_forms(cls, value: Any) -> Any:
        # `objective: grpo/score/mean`, one mapping, or a list of strings/mappings.
        items = value if isinstance(value, list) else [value]
        return [{"metric": v} if isinstance(v, str) else v for v in items]

    @field_validator("overrides", mode="before")
    @classmethod
    def _overrides_list(cls, value: Any) -> Any:
        if value is None:
            return []
        if not isinstance(value, list):
            raise ValueError("must be a list of Hydra overrides such as rl_config.clip_ratio=0.2")
        return value

    @field_validator("storage")
    @classmethod
    def _storage_url(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(STORAGE_SCHEMES):
            raise ValueError(
                f"must be an Optuna storage URL (journal:PATH, sqlite:///PATH, postgresql://...) (got {value!r})"
            )
        return value

    @model_validator(mode="after")
    def _unique_metrics(self) -> SweepSpec:
        metrics = [o.metric for o in self.objectives]
        doubles = sorted({m for m in metrics if metrics.count(m) > 1})
        if doubles:
            raise ValueError(f"objective: metric {doubles[0]} is listed twice")
        return self

    # ---------------------------------------------------------------- derived values
    @property
    def path(self) -> Path | None:
        """The spec file this was loaded from (None when built in code)."""
        return self._path

    @property
    def source(self) -> str:
        """How messages name the spec: the path as the user gave it."""
        return str(self._path) if self._path is not None else "sweep spec"

    @property
    def warnings(self) -> list[str]:
        """Things worth telling the user that are not errors (e.g. pruning off for multi-objective)."""
        return self._warnings

    @property
    def study_dir(self) -> Path:
        return Path("studies") / self.study

    @property
    def multi_objective(self) -> bool:
        return len(self.objectives) > 1

    @property
    def directions(self) -> list[str]:
        return [o.direction for o in self.objectives]

    def storage_url(self) -> str:
        """``storage`` when set, else ``journal:studies/<study>/journal.log`` (an Optuna journal file)."""
        return self.storage or f"journal:{(self.study_dir / 'journal.log').as_posix()}"

    def fingerprint(self) -> str:
        """A hash of what makes trial values comparable: base, overrides, search space, objectives.

        The search space is hashed as parsed Optuna distributions, so reformatting an expression
        (spaces, ``1e-1`` vs ``0.1``) does not change it; trials, concurrency, seeds, sampler,
        pruner and the cluster can change between runs of the same study.
        """
        from optuna.distributions import distribution_to_json

        from grpo.sweep.space import parse_expression

        search: dict[str, Any] = {}
        for key, entry in sorted(self.search.items()):
            try:
                values: Any = json.loads(distribution_to_json(parse_expression(key, entry.values)))
            except ValueError:
                values = entry.values
            search[key] = {"values": values, "when": entry.when}
        payload = {
            "base": self._base_as_written or self.base,
            "overrides": list(self.overrides),
            "search": search,
            "objectives": [o.model_dump() for o in self.objectives],
        }
        text = json.dumps(payload, sort_keys=True, default=str)
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able dict in the spec's own spelling (``objective:``); round-trips through model_validate."""
        return self.model_dump(mode="json", by_alias=True)


# -------------------------------------------------------------------------------- error messages
def _model_at(loc: tuple[Any, ...]) -> type[BaseModel] | None:
    """The spec model whose fields hold the last key of ``loc`` (for did-you-mean on unknown keys)."""
    model: Any = SweepSpec
    parts = [p for p in loc[:-1] if not isinstance(p, int)]
    while parts:
        part = parts.pop(0)
        if model is SweepSpec and part == "search":
            model = SearchEntry  # search.<config key>.<entry key>: skip the config key
            parts = parts[1:]
            continue
        field = next((f for n, f in model.model_fields.items() if (f.alias or n) == part), None)
        if field is None:
            return None
        candidates = (field.annotation, *getattr(field.annotation, "__args__", ()))
        model = next((a for a in candidates if isinstance(a, type) and issubclass(a, BaseModel)), None)
        if model is None:
            return None
    return model


def _suggest_spec_key(loc: tuple[Any, ...]) -> str | None:
    model = _model_at(loc)
    if model is None:
        return None
    match = did_you_mean(str(loc[-1]), [f.alias or n for n, f in model.model_fields.items()])
    return dotted(loc[:-1] + (match,)) if match else None


def _problems(error: ValidationError, source: str, objective_was_list: bool) -> list[str]:
    def relocate(loc: tuple[Any, ...], message: str) -> tuple[tuple[Any, ...], str]:
        if loc[:1] == ("objective",) and not objective_was_list and len(loc) > 1 and loc[1] == 0:
            loc = ("objective",) + loc[2:]  # the user wrote one mapping, not a list
        if message.startswith("k: "):
            return loc + ("k",), message[3:]
        if message.startswith("objective: "):
            return ("objective",), message[len("objective: ") :]
        return loc, message

    return validation_lines(error, source, suggest=_suggest_spec_key, plain_values=True, relocate=relocate)


# ------------------------------------------------------------------------------------------ loading
def _read_yaml(path: Path, source: str) -> Any:
    try:
        text = path.read_text()
    except OSError as err:
        raise UserError(f"{source}: cannot read the spec file ({err.strerror})") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"{source}:{mark.line + 1}" if mark is not None else source
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise UserError(f"{where}: YAML syntax error: {problem}") from None


def looks_like_spec(target: str) -> bool:
    """True when ``target`` is a YAML file whose top level has ``study`` or ``search``.

    Used by the CLI to tell a sweep spec from a config name; never raises (a config name that is no
    file, an unreadable file or a file with a YAML error that does not look like a spec give False).
    """
    path = Path(str(target)).expanduser()
    try:
        if not (path.is_file() and path.suffix in (".yaml", ".yml")):
            return False
        text = path.read_text()
    except OSError:
        return False
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError:
        # Broken YAML: decide on the top-level keys as written, so the spec loader reports the error.
        return bool(re.search(r"^(study|search)\s*:", text, flags=re.MULTILINE))
    return isinstance(data, dict) and ("study" in data or "search" in data)


def _resolve_base(base: str, spec_dir: Path, source: str) -> tuple[str | None, str | None]:
    """(resolved base, problem): a config name in the config dir, or a path (spec folder, then cwd)."""
    if not (base.endswith((".yaml", ".yml")) or "/" in base or os.sep in base):
        cdir = config_dir()
        if (cdir / f"{base}.yaml").is_file():
            return base, None
        names = sorted(p.stem for p in cdir.glob("*.yaml"))
        hint = difflib.get_close_matches(base, names, n=1, cutoff=0.6)
        more = f"; did you mean {hint[0]}?" if hint else f" (available: {', '.join(names) or 'none'})"
        return None, f"{source}: base: no config named {base} in {cdir}{more}"
    raw = Path(base).expanduser()
    for candidate in [raw] if raw.is_absolute() else [spec_dir / raw, Path.cwd() / raw]:
        if candidate.is_file():
            return str(candidate.resolve()), None
    where = "" if raw.is_absolute() else f" (looked beside the spec in {spec_dir} and in the current directory)"
    return None, f"{source}: base: no such config file {base}{where}"


def load_spec(
    path: str | os.PathLike,
    *,
    address: str | None = None,
    concurrency: int | None = None,
    trials: int | None = None,
) -> SweepSpec:
    """Read, validate and resolve a sweep spec; ``address``/``concurrency``/``trials`` override it (CLI flags).

    Raises one ``UserError`` whose ``problems`` lists every problem found, each naming the file and
    the key path. Warnings that are not errors are in ``spec.warnings``.
    """
    spec_path = Path(path)
    source = str(path)
    if not spec_path.is_file():
        kind = "is a folder, not a spec file" if spec_path.is_dir() else "no such spec file"
        raise UserError(f"{source}: {kind}")
    data = _read_yaml(spec_path, source)
    if not isinstance(data, dict):
        raise UserError(f"{source}: (top level): must be a mapping of spec keys (study, base, search, ...)")
    data = dict(data)
    data.setdefault("study", spec_path.stem)
    if address is not None:
        cluster = data.get("cluster") if isinstance(data.get("cluster"), dict) else {}
        data["cluster"] = {**cluster, "address": address}
    if concurrency is not None:
        data["concurrency"] = concurrency
    if trials is not None:
        data["trials"] = trials

    try:
        spec = SweepSpec.model_validate(data)
    except ValidationError as err:
        # Report the schema errors together with what the rest of the spec gets wrong.
        lines = _problems(err, source, isinstance(data.get("objective"), list))
        reported = {str(e["loc"][0]) for e in err.errors() if e["loc"]}
        lines += _content_problems(data, spec_path, source, skip=reported)[0]
        raise UserError(lines[0], problems=lines) from None
    spec._path = spec_path

    problems, base, space = _content_problems(data, spec_path, source, skip=set())
    if base is not None:
        spec._base_as_written = spec.base
        spec.base = base
    if space is not None and not problems:
        from grpo.sweep.samplers import check_sampler_and_pruner

        found, warnings = check_sampler_and_pruner(spec, space)
        problems += found
        spec._warnings = warnings + _metric_warnings(spec)
    if problems:
        raise UserError(problems[0], problems=problems)
    return spec


# The embedded engine's metric names (MindSpeed-RL's); another backend may log more, so an unknown
# name is a warning with a did-you-mean, not an error.
KNOWN_METRICS = (
    "grpo/score/mean",
    "grpo/score/max",
    "grpo/score/min",
    "actor/pg_loss",
    "actor/pg_clipfrac",
    "actor/kl_loss",
    "actor/entropy",
    "actor/grad_norm",
    "actor/lr",
    "actor/kl_coef",
    "response_length/mean",
    "response_length/max",
    "response_length/min",
    "prompt_length/mean",
    "timing/all",
    "timing/rollout",
    "timing/update",
    "e2e_tps",
)


def _metric_warnings(spec: SweepSpec) -> list[str]:
    notes = []
    for obj in spec.objectives:
        if obj.metric in KNOWN_METRICS or re.fullmatch(r"\w+_rewards/mean", obj.metric):
            continue
        hint = difflib.get_close_matches(obj.metric, KNOWN_METRICS, n=1, cutoff=0.6)
        notes.append(
            f"{spec.source}: objective: {obj.metric} is not a metric the embedded engine logs"
            + (f"; did you mean {hint[0]}?" if hint else "")
        )
    return notes


def _content_problems(data: dict[str, Any], spec_path: Path, source: str, skip: set[str]):
    """(problems, resolved base, search space) for the parts the schema alone cannot check.

    Works on the raw YAML so it also runs when the schema found errors elsewhere; keys in ``skip``
    (already reported by the schema) are left alone.
    """
    from grpo.sweep.space import SearchSpace

    problems: list[str] = []
    base = None
    if "base" not in skip and isinstance(data.get("base"), str):
        base, problem = _resolve_base(data["base"], spec_path.parent, source)
        if problem:
            problems.append(problem)
    search = data.get("search") or {}
    search_ok = "search" not in skip and isinstance(search, dict)
    if "overrides" not in skip and isinstance(data.get("overrides"), list):
        problems += _check_overrides(data["overrides"], search if search_ok else {}, source)
    space = None
    if search_ok:
        try:
            space = SearchSpace.from_entries(search, source=source)
        except UserError as err:
            problems += err.problems
    return problems, base, space


def _check_overrides(overrides: list[Any], search: dict[str, Any], source: str) -> list[str]:
    """Each fixed override parses with Hydra's grammar, is no sweep, names a known key, and is not also searched."""
    from grpo.sweep.space import check_key, parse_overrides

    problems: list[str] = []
    for i, text in enumerate(overrides):
        where = f"{source}: overrides[{i}]"
        try:
            override = parse_overrides([str(text)])[0]
        except ValueError as err:
            problems.append(f"{where}: {err}")
            continue
        key = override.key_or_group
        if override.is_sweep_override():
            problems.append(f"{where}: {text} is a sweep; searched keys go under search")
            continue
        problem = check_key(key, override.value() if key == "layout" else None)
        if problem:
            problems.append(f"{where}: {problem}")
        if key in search:
            problems.append(f"{source}: search.{key}: also fixed by overrides[{i}]; a key is either fixed or searched")
    return problems


def make_storage(spec: SweepSpec, **rdb_kwargs: Any):
    """The Optuna storage of the study, creating the journal's (or SQLite file's) folder.

    Call this only when the study actually runs: validating a spec must write nothing.
    ``journal:PATH`` gives ``JournalStorage(JournalFileBackend(PATH))``; any other URL
    (sqlite, postgresql, mysql) gives ``RDBStorage(url, **rdb_kwargs)``.
    """
    import optuna

    url = spec.storage_url()
    if url.startswith("journal:"):
        journal = Path(url[len("journal:") :]).expanduser()
        journal.parent.mkdir(parents=True, exist_ok=True)
        return optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(str(journal)))
    if url.startswith("sqlite:///"):
        db = url[len("sqlite:///") :]
        if db and db != ":memory:":
            Path(db).expanduser().parent.mkdir(parents=True, exist_ok=True)
    return optuna.storages.RDBStorage(url, **rdb_kwargs)


__all__ = [
    "ClusterSpec",
    "MindSpeedSpec",
    "ObjectiveSpec",
    "PlanSpec",
    "PrunerSpec",
    "SamplerSpec",
    "SearchEntry",
    "SweepSpec",
    "TrackingSpec",
    "config_dir",
    "load_spec",
    "looks_like_spec",
    "make_storage",
]
