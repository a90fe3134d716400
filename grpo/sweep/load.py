"""Loading a sweep spec file: ``load_spec(path) -> SweepSpec``, every problem found at once.

``load_spec`` reads the YAML with ``yaml.safe_load``, validates every key against ``grpo.sweep.spec``
(unknown keys are errors with a did-you-mean, values are checked against their type and range),
resolves ``base`` to a config, checks ``overrides`` and the ``search`` space against the config schema,
and checks the sampler and pruner. Every problem becomes one line ``<file>: <key path>: <what is wrong>``
and they are raised together as one ``UserError``. Nothing is written while loading: the study folder
is created only when the study runs (``grpo.sweep.study_store``).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from grpo.config import default_config_dir, load_config
from grpo.errors import UserError, did_you_mean, dotted, validation_lines
from grpo.sweep.samplers import check_sampler_and_pruner
from grpo.sweep.space import SearchSpace, check_key, parse_overrides
from grpo.sweep.spec import SearchEntry, SweepSpec


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
    return dotted((*loc[:-1], match)) if match else None


def _problems(error: ValidationError, source: str, objective_was_list: bool) -> list[str]:
    def relocate(loc: tuple[Any, ...], message: str) -> tuple[tuple[Any, ...], str]:
        if loc[:1] == ("objective",) and not objective_was_list and len(loc) > 1 and loc[1] == 0:
            loc = ("objective", *loc[2:])  # the user wrote one mapping, not a list
        if message.startswith("k: "):
            return (*loc, "k"), message[3:]
        for key in ("objective", "confirm"):  # a whole-spec rule about one key: shown at that key
            if message.startswith(f"{key}: "):
                return (key,), message[len(key) + 2 :]
        return loc, message

    return validation_lines(error, source, suggest=_suggest_spec_key, plain_values=True, relocate=relocate)


# ------------------------------------------------------------------------------------------ loading
MAX_YAML_VALUES = 100_000  # a spec is a few hundred values; YAML aliases must not expand past this


class _SpecLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that refuses a key written twice in one mapping (YAML requires unique keys;
    PyYAML would silently keep the last one)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if isinstance(key, (str, int, float, bool)) and key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"key {key!r} is written twice in one mapping", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def _expanded_size(data: Any) -> int:
    """How many values ``data`` holds once YAML aliases are expanded (each shared object counted once per
    use, computed once per object: an alias bomb is counted in linear time, never expanded)."""
    sizes: dict[int, int] = {}

    def size(value: Any) -> int:
        if not isinstance(value, (dict, list)):
            return 1
        known = sizes.get(id(value))
        if known is None:
            sizes[id(value)] = 1  # a self-referencing alias counts once, not forever
            children = [*value.keys(), *value.values()] if isinstance(value, dict) else value
            known = sizes[id(value)] = 1 + sum(size(child) for child in children)
        return known

    return size(data)


def _read_text(path: Path, source: str) -> str:
    try:
        raw = path.read_bytes()
    except OSError as err:
        raise UserError(f"{source}: cannot read the spec file ({err.strerror})") from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        kind = "UTF-16" if raw[:2] in (b"\xff\xfe", b"\xfe\xff") else "not UTF-8"
        raise UserError(f"{source}: the spec file is {kind} text; save it as UTF-8") from None


def _parse_yaml(text: str, source: str) -> Any:
    try:
        data = yaml.load(text, Loader=_SpecLoader)  # a SafeLoader subclass
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"{source}:{mark.line + 1}" if mark is not None else source
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise UserError(f"{where}: YAML syntax error: {problem}") from None
    if _expanded_size(data) > MAX_YAML_VALUES:
        raise UserError(f"{source}: YAML aliases expand to more than {MAX_YAML_VALUES:,} values; write them out")
    return data


def _read_yaml(path: Path, source: str) -> Any:
    return _parse_yaml(_read_text(path, source), source)


def looks_like_spec(target: str) -> bool:
    """True when ``target`` is a YAML file whose top level has ``study`` or ``search``.

    Used by the CLI to tell a sweep spec from a config name; never raises (a config name that is no
    file, an unreadable file or a file with a YAML error that does not look like a spec give False).
    """
    path = Path(str(target)).expanduser()
    try:
        if not (path.is_file() and path.suffix in (".yaml", ".yml")):
            return False
        text = path.read_bytes().decode("utf-8", errors="replace")
    except OSError:
        return False
    try:
        data = yaml.load(text, Loader=_SpecLoader)  # aliases are shared, not expanded: safe on a bomb
    except yaml.YAMLError:
        # Broken YAML: decide on the top-level keys as written, so the spec loader reports the error.
        return bool(re.search(r"^(study|search)\s*:", text, flags=re.MULTILINE))
    return isinstance(data, dict) and ("study" in data or "search" in data)


def _resolve_base(base: str, spec_dir: Path, source: str) -> tuple[str | None, str | None]:
    """(resolved base, problem): a config name in the config dir, or a path (spec folder, then cwd)."""
    if not (base.endswith((".yaml", ".yml")) or "/" in base or os.sep in base):
        cdir = default_config_dir()
        if (cdir / f"{base}.yaml").is_file():
            return base, None
        names = sorted(p.stem for p in cdir.glob("*.yaml"))
        hint = did_you_mean(base, names)
        more = f"; did you mean {hint}?" if hint else f" (available: {', '.join(names) or 'none'})"
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
        cluster = data.get("cluster")
        data["cluster"] = {**(cluster if isinstance(cluster, dict) else {}), "address": address}
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
    problems, base, space = _content_problems(data, spec_path, source, skip=set())
    if base is not None and not problems:
        problems += _override_problems(base, spec.overrides, source)
    if problems or base is None or space is None:
        raise UserError(problems[0], problems=problems)
    located = spec.located(spec_path, base, warnings=[])
    check = check_sampler_and_pruner(located, space)
    if check.problems:
        raise UserError(check.problems[0], problems=check.problems)
    capped = spec.model_copy(update={"trials": check.trials})  # a grid has no more points than it has
    return capped.located(spec_path, base, warnings=check.warnings + _metric_warnings(located))


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
        hint = did_you_mean(obj.metric, KNOWN_METRICS)
        notes.append(
            f"{spec.source}: objective: {obj.metric} is not a metric the embedded engine logs"
            + (f"; did you mean {hint}?" if hint else "")
        )
    return notes


def _content_problems(
    data: dict[str, Any], spec_path: Path, source: str, skip: set[str]
) -> tuple[list[str], str | None, SearchSpace | None]:
    """(problems, resolved base, search space) for the parts the schema alone cannot check.

    Works on the raw YAML so it also runs when the schema found errors elsewhere; keys in ``skip``
    (already reported by the schema) are left alone.
    """
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


def _override_problems(base: str, overrides: list[str], source: str) -> list[str]:
    """What the spec's fixed overrides break in the base config, named as the spec's mistakes.

    A line about a key an override sets reads ``<spec>: overrides[i]: <key>: ...``; a broken rule whose
    key no override names is the spec's too when the base alone is valid (``<spec>: overrides: ...``).
    """
    try:
        load_config(base, overrides)
    except UserError as err:
        broken = err.problems
    else:
        return []
    try:
        load_config(base)
        base_is_fine = True
    except UserError:
        base_is_fine = False
    keys = [o.key_or_group for o in parse_overrides(list(overrides))]  # they parsed in _check_overrides
    lines = []
    for line in broken:
        _, _, what = line.partition(": ")  # drop the config file's name
        index = next((i for i, key in enumerate(keys) if what.startswith(f"{key}:")), None)
        if index is not None:
            lines.append(f"{source}: overrides[{index}]: {what}")
        elif base_is_fine:
            lines.append(f"{source}: overrides: {what}")
        else:
            lines.append(line)
    return lines


def _check_overrides(overrides: list[Any], search: dict[str, Any], source: str) -> list[str]:
    """Each fixed override parses with Hydra's grammar, is no sweep, names a known key, and is not also searched."""

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
