"""Compose a grpo_trainer config with Hydra's compose API and validate it against the schema.

A config is named (``grpo_trainer_tiny_cpu``, looked up in the config search path) or given as a path to
a YAML file. The search path, first match first: the ``config_dir`` argument (one folder or several, in
order; ``grpo-train --config-dir/--config-path``) or else ``$GRPO_CONFIG_DIR``, then the configs shipped
with the package (``grpo.config.shipped``: ``configs/`` in a checkout, package data in an installed wheel).
So a user's folder wins over the shipped one and still sees the shipped ``model/`` and ``layout/`` groups.
A file given by path searches its own folder first, then the search path (Hydra's search path, in order).

Overrides use Hydra's grammar. A plain ``a.b=v`` sets the key whether or not the YAML spells it (it
is sent to Hydra as ``++a.b=v``; the schema then rejects unknown keys with a did-you-mean), and
``layout=NAME`` and ``algorithm=NAME`` (``configs/algorithm/``: grpo, dapo, dr_grpo, gspo) work whether or
not the defaults list names the group (``+layout=NAME`` when absent).
As in Hydra, config-group overrides are applied first and key overrides after them, so
``layout=tp2_pp2 actor_config.micro_batch_size=4`` keeps the explicit micro batch size.
Every failure a user can cause ends as one ``UserError`` whose ``problems`` lists every line.

Speed: a sweep composes one config per trial seed and its preflight up to 64, so repeated calls are
cheap. Hydra composes the defaults list (primary file + group and Hydra overrides) once; the result is
kept, unresolved, together with the contents of every file it was composed from, and reused while those
contents are unchanged. The key overrides (``++a.b=v``) are then applied to a copy with
``OmegaConf.update(..., merge=True, force_add=True)``, which is what Hydra itself does for them, and
interpolations are resolved per call. Overrides only Hydra's composition can apply (``+a=v``, ``~a``,
``a@pkg=v``, sweeps, a key naming a config group) send the whole call through Hydra, uncached. The YAML
syntax check of the group files is cached by file content.
"""

from __future__ import annotations

import os
import re
import threading
import warnings
from collections import OrderedDict
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml
from omegaconf import OmegaConf, open_dict
from pydantic import ValidationError

from grpo._yaml import parse_yaml_text, read_text_file
from grpo.config.canonical import canonicalize
from grpo.config.hf_model import apply_model_folder
from grpo.config.messages import validation_problems
from grpo.config.rules import check_rules
from grpo.config.schedule import problems as schedule_problems
from grpo.config.schema import KEY_HOMES, MEGATRON_DEFAULTS, GRPOConfig
from grpo.config.shipped import shipped_configs
from grpo.errors import UserError, first_line
from grpo.errors import display_path as _display

if TYPE_CHECKING:
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.core.override_parser.types import Override

LAYOUT_GROUP = "layout"
ALGORITHM_GROUP = "algorithm"  # configs/algorithm/: grpo, dapo, dr_grpo, gspo
PRESET_GROUPS = (LAYOUT_GROUP, ALGORITHM_GROUP)  # picked whether or not the defaults list names them
MODEL_GROUP = "model"
# Second spellings the schema accepts; an override of one must set the key the YAML spells.
KEY_ALIASES = {"rl_config.shuffle_minibatch": "rl_config.shuffle_mini_batch"}

# Hydra's global state allows one composition at a time; the caches below are shared under it too.
_HYDRA_LOCK = threading.Lock()


class _LRU:
    """A small least-recently-used map (thread-safe)."""

    def __init__(self, size: int):
        self.size, self.items, self.lock = size, OrderedDict[Any, Any](), threading.Lock()

    def get(self, key: Any) -> Any:
        with self.lock:
            if key not in self.items:
                return None
            self.items.move_to_end(key)
            return self.items[key]

    def put(self, key: Any, value: Any) -> None:
        with self.lock:
            self.items[key] = value
            self.items.move_to_end(key)
            while len(self.items) > self.size:
                self.items.popitem(last=False)


_PARSED = _LRU(256)  # (path, file bytes) -> parsed YAML
_COMPOSED = _LRU(64)  # (primary file, Hydra overrides) -> _Composed
_PARSER: list[OverridesParser] = []  # Hydra's override parser, built once
# One config folder, or several searched in order (a user's first; the shipped configs always come last).
ConfigDirs = str | os.PathLike[str] | Sequence[str | os.PathLike[str]] | None


def default_config_dir() -> Path:
    """``$GRPO_CONFIG_DIR`` when set, else the shipped configs (``configs/`` in a checkout)."""
    env = os.environ.get("GRPO_CONFIG_DIR")
    return Path(env).expanduser().resolve() if env else shipped_configs()


def config_search_path(config_dir: ConfigDirs = None) -> list[Path]:
    """The folders config names are looked up in, first match first: ``config_dir`` (one folder or several)
    or else ``$GRPO_CONFIG_DIR``, then the shipped configs."""
    if config_dir is None:
        mine = [default_config_dir()]
    elif isinstance(config_dir, (str, os.PathLike)):
        mine = [Path(config_dir).expanduser().resolve()]
    else:
        mine = [Path(d).expanduser().resolve() for d in config_dir]
    return list(dict.fromkeys([*mine, shipped_configs()]))


def group_options(group: str, config_dir: ConfigDirs = None) -> list[str]:
    """The options of a config group (``layout``, ``model``) over the search path, sorted."""
    return sorted({p.stem for p in _group_files(config_search_path(config_dir), group)})


def find_config(name: str, config_dir: ConfigDirs = None) -> Path | None:
    """``<folder>/<name>.yaml`` in the first folder of the search path that has it, else None."""
    return next((p for d in config_search_path(config_dir) if (p := d / f"{name}.yaml").is_file()), None)


def config_names(config_dir: ConfigDirs = None) -> list[str]:
    """Every config name the search path offers, sorted."""
    return sorted({p.stem for d in config_search_path(config_dir) for p in d.glob("*.yaml")})


def _looks_like_path(target: str) -> bool:
    return target.endswith((".yaml", ".yml")) or os.sep in target or "/" in target


def resolve_target(target: str | os.PathLike[str], config_dir: ConfigDirs = None) -> Path:
    """The YAML file a config name or path designates; a one-line UserError when there is none.

    A name is ``<folder>/<name>.yaml`` in the first folder of the search path that has it (see
    ``config_search_path``); anything that looks like a path (a ``/`` or a ``.yaml`` / ``.yml`` suffix) is
    taken as one.
    """
    text = str(target)
    if _looks_like_path(text):
        path = Path(text).expanduser()
        if path.is_dir():
            raise UserError(f"{text}: is a folder, not a config file")
        if not path.is_file():
            raise UserError(f"{text}: no such config file")
        return path.resolve()
    found = find_config(text, config_dir)
    if found is None and Path(text).expanduser().is_dir():
        raise UserError(f"{text}: is a folder, not a config file")
    if found is None:
        where = ", ".join(_display(d) for d in config_search_path(config_dir))
        names = config_names(config_dir)
        raise UserError(f"{text}: no config named '{text}' in {where} (available: {', '.join(names) or 'none'})")
    return found


def _search_dirs(path: Path, config_dir: ConfigDirs) -> list[Path]:
    """Hydra's search path for composing ``path``: its own folder, then the config search path."""
    return list(dict.fromkeys([path.parent, *config_search_path(config_dir)]))


def _read(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except OSError:
        return None


def _load_yaml(path: Path) -> Any:
    """Parse one YAML file through the project's guard (``grpo._yaml``); a syntax error becomes
    ``FILE:LINE: YAML syntax error: ...``.

    Results are cached by file content and shared: treat them as read-only.
    """
    source = _display(path)
    content = read_text_file(path, source, kind="config").encode()  # a folder, a 20 MB file, UTF-16: one line
    key = (path, content)
    cached = _PARSED.get(key)
    if cached is not None:
        return cached[0]
    data = parse_yaml_text(content.decode(), source, kind="config")  # the guard: Hydra would expand a bomb
    _PARSED.put(key, (data,))
    return data


def _group_files(dirs: Sequence[Path], group: str) -> list[Path]:
    return sorted(p for d in dirs for p in (d / group).glob("*.yaml"))


def _check_group_options(group: str, value: Any, dirs: Sequence[Path], source: str) -> list[str]:
    """The option names of a group override (``layout=x``, ``model=[a,b]``); UserError for unknown ones."""
    names = value if isinstance(value, list) else [value]
    options = sorted({p.stem for p in _group_files(dirs, group)})
    for name in names:
        if not isinstance(name, str) or name not in options:
            raise UserError(f"{source}: {group}: unknown {group} {name!r} (available: {', '.join(options) or 'none'})")
    return names


def _defaults(primary: Any) -> list[Any]:
    defaults = primary.get("defaults", []) if isinstance(primary, dict) else []
    return list(defaults or [])


def _named_groups(primary: Any) -> list[str]:
    """The config groups the defaults list of ``primary`` names (``- model: tiny_qwen`` -> model)."""
    groups = [
        str(k).lstrip("/+").removeprefix("override ").lstrip("/").split("@")[0]
        for e in _defaults(primary)
        if isinstance(e, dict)
        for k in e
    ]
    return list(dict.fromkeys(g for g in groups if g and not g.startswith("hydra")))


def _defaults_has_group(primary: Any, group: str) -> bool:
    for entry in _defaults(primary):
        if isinstance(entry, dict) and any(
            str(k).lstrip("+").split("@")[0].removeprefix("override ") == group for k in entry
        ):
            return True
    return False


def _canonical(text: str, key: str) -> str:
    """``rl_config.shuffle_minibatch=x`` -> ``rl_config.shuffle_mini_batch=x`` (see KEY_ALIASES)."""
    return KEY_ALIASES[key] + text[len(key) :] if key in KEY_ALIASES and text.startswith(key) else text


def _parser() -> OverridesParser:
    from hydra.core.override_parser.overrides_parser import OverridesParser

    if not _PARSER:
        _PARSER.append(OverridesParser.create())
    return _PARSER[0]


@dataclass(frozen=True)
class _Planned:
    """One user override: the text Hydra gets, and the key update it is when composition need not see it."""

    text: str
    key: str | None = None  # set for a plain key override (applied after composition)
    override: Override | None = None
    hydra_only: bool = False  # only Hydra's own composition can apply it


def _plan(overrides: Sequence[str], primary: Any, source: str, dirs: Sequence[Path]) -> list[_Planned]:
    """Rewrite user overrides into what Hydra needs (see the module docstring)."""
    from hydra.core.override_parser.types import OverrideType
    from hydra.errors import OverrideParseException

    parser = _parser()
    groups = (MODEL_GROUP, *PRESET_GROUPS)
    out: list[_Planned] = []
    for text in overrides:
        try:
            (override,) = parser.parse_overrides([text])
        except OverrideParseException as err:
            raise UserError(f"{source}: override '{text}': {first_line(err)}") from None
        key = override.key_or_group
        plain_key = (
            override.package is None
            and not override.is_sweep_override()
            and not override.is_hydra_override()
            and key != "hydra"
            and not any((d / key).is_dir() for d in dirs)  # Hydra would take it as a config group
        )
        if key in groups and override.type in (OverrideType.CHANGE, OverrideType.ADD) and override.is_sweep_override():
            # a Hydra app's multirun (grpo-train): each job's option is checked when that job is composed
            plus = (
                "+"
                if key in PRESET_GROUPS and not text.startswith("+") and not _defaults_has_group(primary, key)
                else ""
            )
            out.append(_Planned(plus + text, hydra_only=True))
        elif key in groups and override.type in (OverrideType.CHANGE, OverrideType.ADD):
            _check_group_options(key, override.value(), dirs, source)
            if key in PRESET_GROUPS:
                plus = "" if _defaults_has_group(primary, key) else "+"
                out.append(_Planned(f"{plus}{key}={override.value()}"))
            else:
                out.append(_Planned(text))
        elif override.type == OverrideType.CHANGE and override.package is None and not key.startswith("hydra."):
            canonical = KEY_ALIASES.get(key, key)
            out.append(_Planned("++" + _canonical(text.strip(), key), canonical, override, hydra_only=not plain_key))
        elif override.type == OverrideType.FORCE_ADD and plain_key:
            out.append(_Planned(text, key, override))
        else:
            out.append(_Planned(text, hydra_only=not (override.is_hydra_override() or key == "hydra")))
    return out


def hydra_overrides(
    name_or_path: str | os.PathLike[str], overrides: Sequence[str], config_dir: ConfigDirs = None
) -> list[str]:
    """``overrides`` as ``load_config`` hands them to Hydra (``a.b=v`` -> ``++a.b=v``, ``layout=x`` ->
    ``+layout=x`` when the defaults list names no layout); a Hydra app passes these to get the same config."""
    path = resolve_target(name_or_path, config_dir)
    dirs = _search_dirs(path, config_dir)
    return [p.text for p in _plan(list(overrides), _load_yaml(path), _display(path), dirs)]


@dataclass(frozen=True)
class _Composed:
    """One Hydra composition, unresolved, and the contents of the files it was composed from."""

    inputs: tuple[tuple[Path, bytes | None], ...]
    groups: tuple[str, ...]
    container: dict[str, Any]
    picked: tuple[tuple[str, str], ...]  # (group, option) of the preset groups chosen


def _inputs(
    path: Path, primary: Any, dirs: Sequence[Path], groups: Sequence[str]
) -> tuple[tuple[Path, bytes | None], ...]:
    """The files a composition of ``path`` can read: itself, its sibling defaults and its groups' options."""
    siblings = [e.lstrip("/") for e in _defaults(primary) if isinstance(e, str) and e != "_self_"]
    files = [path, *(d / f"{s}.yaml" for d in dirs for s in siblings)]
    files += [p for g in groups for p in _group_files(dirs, g)]
    return tuple((p, _read(p)) for p in files)


def _hydra_compose(primary_dir: Path, name: str, overrides: list[str], source: str) -> tuple[Any, dict[str, Any]]:
    """Hydra compose under the lock: (the config without its ``hydra`` node, Hydra's group choices)."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.errors import HydraException
    from hydra.initialize import get_gh_backup, restore_gh_from_backup
    from omegaconf.errors import OmegaConfBaseException

    # Composing inside a running Hydra app (grpo-train) must leave that app's Hydra untouched.
    backup = get_gh_backup()
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(primary_dir), version_base=None), warnings.catch_warnings():
            # MindSpeed-RL's own trainer YAMLs have no `_self_` in their defaults list; Hydra's
            # default (primary config last) is what they mean.
            warnings.filterwarnings("ignore", message=".*Defaults list is missing `_self_`")
            cfg = compose(config_name=name, overrides=overrides, return_hydra_config=True)
            choices = dict(cfg.hydra.runtime.choices)
            with open_dict(cfg):
                del cfg["hydra"]
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"{mark.name}:{mark.line + 1}" if mark is not None else source
        raise UserError(f"{where}: YAML syntax error: {getattr(err, 'problem', err)}") from None
    except (HydraException, OmegaConfBaseException) as err:
        raise UserError(_one_line(source, err)) from None
    finally:
        restore_gh_from_backup(backup)
    return cfg, choices


def quoted(text: str) -> str:
    """``text`` as a quoted string of Hydra's override grammar (a path with spaces or commas stays one)."""
    return "'" + text.replace("'", "\\'") + "'"  # Hydra unescapes a backslash only before a quote


def _one_line(source: str, err: Exception) -> str:
    lines = [ln.strip() for ln in str(err).splitlines() if ln.strip()]
    return f"{source}: {' '.join(lines[:3])}"


def _picked(choices: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    """The preset groups' options Hydra chose (``layout``, ``algorithm``), set as top-level keys of the config."""
    return tuple((g, str(choices[g])) for g in PRESET_GROUPS if choices.get(g) is not None)


def _compose(path: Path, primary: Any, planned: list[_Planned], dirs: Sequence[Path], source: str) -> dict[str, Any]:
    """Hydra compose (cached, see the module docstring); the resolved plain dict with ``layout`` set."""
    from omegaconf.errors import OmegaConfBaseException

    slow = any(p.hydra_only for p in planned)
    to_hydra = [p.text for p in planned if slow or p.key is None]
    if len(dirs) > 1:
        paths = ",".join(quoted(f"file://{d}") for d in dirs[1:])
        to_hydra.append(f"hydra.searchpath=[{paths}]")
    with _HYDRA_LOCK:
        if slow:
            cfg, choices = _hydra_compose(path.parent, path.stem, to_hydra, source)
            entry = None
        else:
            key = (path, tuple(str(d) for d in dirs), tuple(to_hydra))
            entry = _COMPOSED.get(key)
            if entry is None or _inputs(path, primary, dirs, entry.groups) != entry.inputs:
                cfg, choices = _hydra_compose(path.parent, path.stem, to_hydra, source)
                groups = tuple(sorted(g for g in choices if not g.startswith("hydra")))
                container = OmegaConf.to_container(cfg, resolve=False)
                assert isinstance(container, dict)
                plain = {str(k): v for k, v in container.items()}
                entry = _Composed(_inputs(path, primary, dirs, groups), groups, plain, _picked(choices))
                _COMPOSED.put(key, entry)
    try:
        if entry is not None:  # the key overrides, as Hydra applies `++a.b=v`
            cfg = OmegaConf.create(entry.container)
            OmegaConf.set_struct(cfg, True)
            for p in planned:
                if p.key is not None and p.override is not None:
                    OmegaConf.update(cfg, p.key, p.override.value(), merge=True, force_add=True)
        data = OmegaConf.to_container(cfg, resolve=True)
    except OmegaConfBaseException as err:
        raise UserError(_one_line(source, err)) from None
    assert isinstance(data, dict)
    data.update(entry.picked if entry is not None else _picked(choices))
    return {str(k): v for k, v in data.items()}


def config_from_dict(data: dict[str, Any], source: str = "config", user_keys: Collection[str] = ()) -> GRPOConfig:
    """Schema-validate a composed dict and check the cross-field rules; UserError lists every problem.

    ``source`` names the file in every message (and becomes ``cfg._source``). A Hugging Face model folder
    (``actor_config.load`` or the tokenizer folder) gives the model's architecture (``hf_model.py``);
    ``user_keys``, the model fields the user set, must agree with it.
    """
    data, moved = canonicalize(data, KEY_HOMES, MEGATRON_DEFAULTS)
    data = apply_model_folder(data, source, user_keys)
    try:
        cfg = GRPOConfig.model_validate(data)
    except ValidationError as err:
        problems = validation_problems(err, source, moved=moved)
        # A model key in actor_config cannot move to a model that is not loaded: name that cause first.
        models, actor = data.get("model"), data.get("actor_config")
        name = actor.get("model") if isinstance(actor, dict) else None
        if isinstance(models, dict) and isinstance(name, str) and name not in models:
            loaded = ", ".join(sorted(map(str, models))) or "none"
            problems.insert(0, f"{source}: actor_config.model: model '{name}' is not loaded by the defaults list "
                               f"(loaded: {loaded})")  # fmt: skip
        raise UserError(problems[0], problems=problems) from None
    cfg._source = source
    problems = [f"{source}: {line}" for line in check_rules(cfg)] or schedule_problems(cfg)
    if problems:
        raise UserError(problems[0], problems=problems)
    return cfg


_SPLIT = re.compile(r"^([+~]{0,2}(?:megatron_training\.)?split)=(\d+(?:\.\d+)?(?:,\d+(?:\.\d+)?)+)$")


def quote_split(overrides: Sequence[str]) -> list[str]:
    """``megatron_training.split=80,20,0`` as the string it means (quoted), not Hydra's sweep over three values:
    MindSpeed's split is one string of percentages, so it works unquoted on the command line."""
    return [_SPLIT.sub(r"\1='\2'", o) for o in overrides]


def load_config(
    name_or_path: str | os.PathLike[str],
    overrides: Sequence[str] = (),
    config_dir: ConfigDirs = None,
) -> GRPOConfig:
    """Compose, validate and rule-check one grpo_trainer config.

    ``name_or_path`` is a config name on the config search path (``config_dir``, one folder or several,
    or ``$GRPO_CONFIG_DIR``, then the shipped configs) or a path to a YAML file; ``overrides`` are Hydra
    override strings. Raises UserError (every problem in ``problems``) on any user mistake.
    """
    overrides = quote_split(overrides)
    path = resolve_target(name_or_path, config_dir)
    source = _display(path)
    primary = _load_yaml(path)
    if primary is not None and not isinstance(primary, dict):
        raise UserError(f"{source}: must be a mapping of sections (got {type(primary).__name__})")
    dirs = _search_dirs(path, config_dir)
    for group in (MODEL_GROUP, *PRESET_GROUPS):  # syntax errors in group files get their line number too
        for option in sorted(set(_group_files(dirs, group))):
            _load_yaml(option)
    named = [o.lstrip("+~").partition("=")[0].split("@")[0] for o in overrides if "=" in o]
    groups = [*_named_groups(primary), *(g for g in named if "." not in g and any((d / g).is_dir() for d in dirs))]
    for other, _ in _inputs(path, primary, dirs, groups):  # every file Hydra may read goes through the guard
        if other.is_file():
            _load_yaml(other)
    planned = _plan(list(overrides), primary, source, dirs)
    return config_from_dict(_compose(path, primary, planned, dirs, source), source, _model_keys_set(primary, planned))


def _model_keys_set(primary: Any, planned: list[_Planned]) -> set[str]:
    """The model fields the user set (overrides, the primary file): a model folder must not contradict them,
    where the model group's YAML values are only defaults the folder replaces."""
    spelled: list[str] = [p.key for p in planned if p.key]
    if isinstance(primary, dict):
        for section, body in primary.items():
            if section == MODEL_GROUP and isinstance(body, dict):
                spelled += [f"model.{n}.{k}" for n, entry in body.items() if isinstance(entry, dict) for k in entry]
            elif isinstance(body, dict):
                spelled += [f"{section}.{k}" for k in body]
    homes = (MODEL_GROUP, "megatron_training", "actor_config")  # where canonicalize finds model keys
    return {k.rpartition(".")[2].replace("-", "_") for k in spelled if k.partition(".")[0] in homes}
