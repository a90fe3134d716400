"""Loading a sweep spec file: ``load_spec(path) -> SweepSpec``, every problem found at once.

``load_spec`` reads the YAML through the guard (``grpo._yaml``), validates every key against ``grpo.sweep.spec.models``
(unknown keys are errors with a did-you-mean, values are checked against their type and range),
resolves ``base`` to a config, checks ``overrides`` and the ``search`` space against the config schema,
and checks the sampler and pruner. Every problem becomes one line ``<file>: <key path>: <what is wrong>``
and they are raised together as one ``UserError``. Nothing is written while loading: the study folder
is created only when the study runs (``grpo.sweep.study.store``).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from grpo._yaml import MAX_FILE_BYTES, parse_yaml_text, peek_yaml, read_text_file
from grpo._yaml import encoding_of as _encoding_of
from grpo._yaml import read_yaml as _read_yaml
from grpo.config import config_names, config_search_path, find_config, load_config, shipped_sweep, shipped_sweep_names
from grpo.errors import UserError, did_you_mean, dotted, validation_lines
from grpo.errors import display_path as _display
from grpo.sweep.spec.models import SearchEntry, SweepSpec
from grpo.sweep.spec.samplers import check_sampler_and_pruner
from grpo.sweep.spec.space import GROUP_KEYS, SearchSpace, check_key, distribution_ends, format_value, parse_overrides
from grpo.sweep.spec.start_points import start_point_problems


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
        for key in ("k", "metric", "reward_floor", "window", "min_delta"):  # a model's rule about one of its keys
            if message.startswith(f"{key}: "):
                return (*loc, key), message[len(key) + 2 :]
        if loc[-2:] == ("cluster", "resources") and ": " in message:  # a rule about one resource
            name, _, rest = message.partition(": ")
            return (*loc, name), rest
        whole = ("objective", "confirm", "scheduler", "trials", "pruner.name", "pruner.curve", "pruner.patience")
        for key in whole:  # a whole-spec rule: at that key
            if message.startswith(f"{key}: "):
                return tuple(key.split(".")), message[len(key) + 2 :]
        return loc, message

    return validation_lines(error, source, suggest=_suggest_spec_key, plain_values=True, relocate=relocate)


# ------------------------------------------------------------------------------------------ loading
def spec_file(target: str | os.PathLike) -> Path:
    """The file a spec argument names: the path itself, or, when no such file exists and ``target`` is a
    bare name (``quickstart``), the example sweep of that name shipped with grpo-sweep (package data)."""
    path = Path(target).expanduser()
    if not path.exists():
        shipped = shipped_sweep(str(target))
        if shipped is not None:
            return shipped
    return path


def looks_like_spec(target: str) -> bool:
    """True when ``target`` is a YAML file whose top level has ``study`` or ``search``, or the name of a
    shipped example sweep that is no config name (config names win).

    Used by the CLI to tell a sweep spec from a config name; never raises (a config name that is no
    file, or a file with a YAML error that does not look like a spec give False). A ``.yaml`` path that
    cannot be told (unreadable, not a regular file, too large, not UTF-8) gives True: the spec loader
    then says what is wrong with it in one line.
    """
    path = Path(str(target)).expanduser()
    if not path.exists():
        if shipped_sweep(str(target)) is not None:
            return find_config(str(target)) is None
        # `sweeps/quickstart.yaml` outside a checkout: the spec loader says the example goes by its name
        return path.suffix in (".yaml", ".yml") and path.stem in shipped_sweep_names()
    if path.suffix not in (".yaml", ".yml"):
        return False
    try:
        if not path.is_file():  # a FIFO, a device...: the spec loader says what it is (reading could block)
            return not path.is_dir()
        if path.stat().st_size > MAX_FILE_BYTES:
            return True  # the spec loader refuses it by its size (parsing it to decide would take seconds)
        raw = path.read_bytes()
    except OSError:
        return True  # unreadable: the spec loader says why
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return True  # a YAML file that is no UTF-8 text: the spec loader says how to save it
    if "\x00" in text and _encoding_of(raw) != "not UTF-8":
        return True  # UTF-16 without a byte-order mark (valid UTF-8, every other byte 0): the same
    try:
        data = peek_yaml(text)  # aliases are shared, not expanded: safe on a bomb
    except (yaml.YAMLError, RecursionError):
        # Broken YAML: decide on the top-level keys as written, so the spec loader reports the error.
        return bool(re.search(r"^(study|search)\s*:", text, flags=re.MULTILINE))
    return isinstance(data, dict) and ("study" in data or "search" in data)


def _resolve_base(base: str, spec_dir: Path, source: str) -> tuple[str | None, str | None]:
    """(resolved base, problem): a config name in the config dir, or a path (spec folder, then cwd)."""
    if not (base.endswith((".yaml", ".yml")) or "/" in base or os.sep in base):
        if find_config(base) is not None:
            return base, None
        names = config_names()
        hint = did_you_mean(base, names)
        more = f"; did you mean {hint}?" if hint else f" (available: {', '.join(names) or 'none'})"
        where = ", ".join(map(str, config_search_path()))
        return None, f"{source}: base: no config named {base} in {where}{more}"
    raw = Path(base).expanduser()
    candidates = [raw] if raw.is_absolute() else [spec_dir / raw, Path.cwd() / raw]
    for candidate in candidates:
        if candidate.is_file():
            return str(candidate.resolve()), None
    if any(c.is_dir() for c in candidates):
        return None, f"{source}: base: {base} is a folder, not a config file"
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
    spec_path = spec_file(path)
    source = str(path) if spec_path == Path(path).expanduser() else str(spec_path)
    if not spec_path.is_file():
        kind = (
            "is a folder, not a spec file"
            if spec_path.is_dir()
            else "not a regular file; the spec must be a YAML file"
            if spec_path.exists()
            else "no such spec file"
        )
        shipped = not spec_path.is_dir() and spec_path.stem in shipped_sweep_names()
        hint = f" (the example sweep shipped with grpo-sweep goes by its name: {spec_path.stem})" if shipped else ""
        raise UserError(f"{source}: {kind}{hint}")
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
        problems += _base_file_problems(base)
    if base is not None and not problems:
        problems += _override_problems(base, spec.overrides, source)
    if base is not None and space is not None and not problems:
        problems += _searched_value_problems(base, spec.overrides, space, source)
    if spec.confirm is not None and spec.confirm.base is not None:  # promotion: resolved as `base` is
        promoted, problem = _resolve_base(spec.confirm.base, spec_path.parent, source)
        if problem:
            problems.append(problem.replace(f"{source}: base: ", f"{source}: confirm.base: ", 1))
        else:
            spec = spec.model_copy(update={"confirm": spec.confirm.model_copy(update={"base": promoted})})
    if space is not None and spec.start_points:
        problems += start_point_problems(spec.start_points, space, source)
        if spec.scheduler is not None:
            problems.append(f"{source}: start_points: not with scheduler: pbt (it samples each generation)")
        elif len(spec.start_points) > spec.trials:
            problems.append(f"{source}: start_points: {len(spec.start_points)} points but trials: {spec.trials}")
    if spec.transfer is not None:
        problems += _transfer_problems(spec, source)
    problems += spec.trl.problems(spec.backend, source, spec_path.parent)
    problems += spec.verl.problems(spec.backend, source)
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
    "actor/pg_clipfrac_low",  # tokens clipped at 1 - clip_ratio_low / at 1 + clip_ratio_high (loss.py)
    "actor/pg_clipfrac_high",
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
    "response_length/truncated",
    "grpo/zero_variance_groups",
    "grpo/acc/mean",
    "actor/ppo_kl",
    "prompt_length/max",
    "prompt_length/min",
    "generated_tokens",
    # only while the variant that logs them is on (docs/engine.md)
    "train/num_gen_batches",
    "dynamic_sampling/kept_groups",
    "dynamic_sampling/kept_fraction",
    "overlong_penalty/mean",
    "actor/reward_kl_penalty",
    "actor/reward_kl_penalty_coeff",
    "rollout_tps",
    "update_tps",
    "timing/ref",
    "timing/reward",
    # held-out evaluation (engine.eval_every), iteration 0 being the base policy's
    "eval/acc_greedy",
    "eval/acc",
    "eval/prompts",
    "eval/strict_format",
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
    if "trial_storage" not in skip and isinstance(data.get("trial_storage"), str):
        from grpo.sweep.spec.locations import location_problem  # pyarrow: imported only when the key is set

        problem = location_problem(data["trial_storage"])
        if problem:
            problems.append(f"{source}: trial_storage: {problem}")
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


def _base_file_problems(base: str) -> list[str]:
    """A base config given as a path is read as a spec is (encoding, size, duplicate keys, alias bombs,
    nesting) before Hydra composes it; each problem names the config file."""
    path = Path(base)
    if not path.is_absolute():
        return []  # a config name in the config dir: shipped with the project
    source = _display(path)
    try:
        parse_yaml_text(read_text_file(path, source, kind="config"), source)
    except UserError as err:
        return err.problems
    return []


def _searched_value_problems(base: str, overrides: list[str], space: SearchSpace, source: str) -> list[str]:
    """A searched value the config schema refuses on its own (a type, a range, an allowed value): a mistake in
    the spec, not a point to prune. Each choice value, and both ends of a range or an interval, are checked
    alone on the base config with the spec's overrides; rules between keys are left to sampling time."""
    problems: list[str] = []
    for param in space.params:
        if param.key in GROUP_KEYS:
            continue  # names, checked against configs/layout/ (configs/algorithm/) already
        for value in distribution_ends(param.distribution):
            try:
                load_config(base, [*overrides, f"{param.key}={format_value(value)}"])
            except UserError as err:
                said = [line.partition(": ")[2] for line in err.problems]
                mine = [what for what in said if what.startswith(f"{param.key}: must be ")]
                if mine:
                    what = mine[0][len(param.key) + 2 :]
                    problems.append(f"{source}: search.{param.key}: {format_value(value)}: {what}")
                    break
    return problems


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
        problem = check_key(key, override.value() if key in GROUP_KEYS else None)
        if problem:
            problems.append(f"{where}: {problem}")
        if key in search:
            problems.append(f"{source}: search.{key}: also fixed by overrides[{i}]; a key is either fixed or searched")
    return problems


def _transfer_problems(spec: SweepSpec, source: str) -> list[str]:
    """What keeps ``transfer`` from working, found without opening the source study (preflight opens it)."""
    assert spec.transfer is not None
    if spec.scheduler is not None:
        return [f"{source}: transfer: not with scheduler: pbt (it samples each generation)"]
    if spec.transfer.study == spec.study and spec.transfer.storage in (None, spec.storage):
        return [f"{source}: transfer.study: {spec.study} is this study; name another study to transfer from"]
    if spec.multi_objective:
        return [f"{source}: transfer: a multi-objective study cannot rank the transferred configurations"]
    tried_first = len(spec.start_points) + spec.transfer.top_k
    if tried_first > spec.trials:
        return [
            f"{source}: transfer.top_k: {len(spec.start_points)} start points + top_k {spec.transfer.top_k} "
            f"is more than trials: {spec.trials}"
        ]
    return []
