"""Compose a grpo_trainer config with Hydra's compose API and validate it against the schema.

A config is named (``grpo_trainer_tiny_cpu``, looked up in the config dir) or given as a path to a
YAML file. The config dir is ``<repo>/configs`` unless ``GRPO_CONFIG_DIR`` or ``config_dir`` says
otherwise; it holds the ``model/`` and ``layout/`` config groups. A file outside the config dir still
sees those groups (the config dir is added to Hydra's search path).

Overrides use Hydra's grammar. A plain ``a.b=v`` sets the key whether or not the YAML spells it (it
is sent to Hydra as ``++a.b=v``; the schema then rejects unknown keys with a did-you-mean), and
``layout=NAME`` works whether or not the defaults list names a layout (``+layout=NAME`` when absent).
Every failure a user can cause ends as one ``UserError`` whose ``problems`` lists every line.
"""

from __future__ import annotations

import copy
import os
import threading
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml
from omegaconf import OmegaConf, open_dict
from pydantic import ValidationError

from grpo.config.messages import validation_problems
from grpo.config.schema import GRPOConfig
from grpo.errors import UserError

REPO_ROOT = Path(__file__).resolve().parents[2]
LAYOUT_GROUP = "layout"
MODEL_GROUP = "model"
# Second spellings the schema accepts; an override of one must set the key the YAML spells.
_HYDRA_LOCK = threading.Lock()
KEY_ALIASES = {"rl_config.shuffle_minibatch": "rl_config.shuffle_mini_batch"}


def default_config_dir() -> Path:
    """``$GRPO_CONFIG_DIR`` when set, else the repository's ``configs/``."""
    env = os.environ.get("GRPO_CONFIG_DIR")
    return Path(env).expanduser().resolve() if env else REPO_ROOT / "configs"


def _display(path: Path) -> str:
    """A path as the user would type it: relative to the working directory when inside it."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def _looks_like_path(target: str) -> bool:
    return target.endswith((".yaml", ".yml")) or os.sep in target or "/" in target


def resolve_target(target: str | os.PathLike, config_dir: Path) -> Path:
    """The YAML file a config name or path designates; a one-line UserError when there is none."""
    text = str(target)
    if _looks_like_path(text):
        path = Path(text).expanduser()
        if not path.is_file():
            raise UserError(f"{text}: no such config file")
        return path.resolve()
    path = config_dir / f"{text}.yaml"
    if not path.is_file():
        names = sorted(p.stem for p in config_dir.glob("*.yaml"))
        raise UserError(
            f"{text}: no config named '{text}' in {_display(config_dir)} (available: {', '.join(names) or 'none'})"
        )
    return path


def _load_yaml(path: Path) -> Any:
    """Parse one YAML file; a syntax error becomes ``FILE:LINE: YAML syntax error: ...``."""
    try:
        return yaml.safe_load(path.read_text())
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"{_display(path)}:{mark.line + 1}" if mark is not None else _display(path)
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise UserError(f"{where}: YAML syntax error: {problem}") from None


def _group_options(dirs: Sequence[Path], group: str) -> list[str]:
    return sorted({p.stem for d in dirs for p in (d / group).glob("*.yaml")})


def _check_group_options(group: str, value: Any, dirs: Sequence[Path], source: str) -> list[str]:
    """The option names of a group override (``layout=x``, ``model=[a,b]``); UserError for unknown ones."""
    names = value if isinstance(value, list) else [value]
    options = _group_options(dirs, group)
    for name in names:
        if not isinstance(name, str) or name not in options:
            raise UserError(f"{source}: {group}: unknown {group} {name!r} (available: {', '.join(options) or 'none'})")
    return names


def _defaults_has_group(primary: Any, group: str) -> bool:
    defaults = primary.get("defaults", []) if isinstance(primary, dict) else []
    for entry in defaults or []:
        if isinstance(entry, dict) and any(
            str(k).lstrip("+").split("@")[0].removeprefix("override ") == group for k in entry
        ):
            return True
    return False


def _canonical(text: str, key: str) -> str:
    """``rl_config.shuffle_minibatch=x`` -> ``rl_config.shuffle_mini_batch=x`` (see KEY_ALIASES)."""
    return KEY_ALIASES[key] + text[len(key) :] if key in KEY_ALIASES and text.startswith(key) else text


def _hydra_overrides(overrides: Sequence[str], primary: Any, source: str, dirs: Sequence[Path]) -> list[str]:
    """Rewrite user overrides into what Hydra needs (see the module docstring)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.core.override_parser.types import OverrideType
    from hydra.errors import OverrideParseException

    parser = OverridesParser.create()
    groups = (MODEL_GROUP, LAYOUT_GROUP)
    out: list[str] = []
    for text in overrides:
        try:
            (override,) = parser.parse_overrides([text])
        except OverrideParseException as err:
            raise UserError(f"{source}: override '{text}': {str(err).splitlines()[0]}") from None
        key = override.key_or_group
        if key in groups and override.type in (OverrideType.CHANGE, OverrideType.ADD):
            _check_group_options(key, override.value(), dirs, source)
            if key == LAYOUT_GROUP:
                plus = "" if _defaults_has_group(primary, LAYOUT_GROUP) else "+"
                out.append(f"{plus}{LAYOUT_GROUP}={override.value()}")
            else:
                out.append(text)
        elif override.type == OverrideType.CHANGE and override.package is None and not key.startswith("hydra."):
            out.append("++" + _canonical(text.strip(), key))
        else:
            out.append(text)
    return out


def _compose(
    primary_dir: Path, name: str, overrides: list[str], extra_dirs: Sequence[Path], source: str
) -> dict[str, Any]:
    """Hydra compose; returns the resolved plain dict with ``layout`` set to the chosen layout."""
    if extra_dirs:
        paths = ",".join(f"file://{d}" for d in extra_dirs)
        overrides = [*overrides, f"hydra.searchpath=[{paths}]"]
    # Composing inside a running Hydra app (grpo-train) must leave that app's Hydra untouched, and
    # Hydra's global state allows one composition at a time.
    with _HYDRA_LOCK:
        return _compose_locked(primary_dir, name, overrides, source)


def _compose_locked(primary_dir: Path, name: str, overrides: list[str], source: str) -> dict[str, Any]:
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.errors import HydraException
    from hydra.initialize import get_gh_backup, restore_gh_from_backup
    from omegaconf.errors import OmegaConfBaseException

    backup = get_gh_backup()
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(primary_dir), version_base=None), warnings.catch_warnings():
            # MindSpeed-RL's own trainer YAMLs have no `_self_` in their defaults list; Hydra's
            # default (primary config last) is what they mean.
            warnings.filterwarnings("ignore", message=".*Defaults list is missing `_self_`")
            cfg = compose(config_name=name, overrides=overrides, return_hydra_config=True)
            layout = cfg.hydra.runtime.choices.get(LAYOUT_GROUP)
            with open_dict(cfg):
                del cfg["hydra"]
            data = OmegaConf.to_container(cfg, resolve=True)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"{mark.name}:{mark.line + 1}" if mark is not None else source
        raise UserError(f"{where}: YAML syntax error: {getattr(err, 'problem', err)}") from None
    except (HydraException, OmegaConfBaseException) as err:
        lines = [ln.strip() for ln in str(err).splitlines() if ln.strip()]
        raise UserError(f"{source}: {' '.join(lines[:3])}") from None
    finally:
        restore_gh_from_backup(backup)
    assert isinstance(data, dict)
    if layout is not None:
        data[LAYOUT_GROUP] = layout
    return data


def validate_dict(data: dict[str, Any], source: str = "config", config_dir: Path | None = None) -> GRPOConfig:
    """Schema-validate a composed dict and check the cross-field rules; UserError lists every problem."""
    from grpo.config.rules import check_rules

    try:
        cfg = GRPOConfig.model_validate(data)
    except ValidationError as err:
        problems = validation_problems(err, source)
        raise UserError(problems[0], problems=problems) from None
    cfg._source = source
    cfg._config_dir = config_dir
    problems = [f"{source}: {line}" for line in check_rules(cfg)]
    if problems:
        raise UserError(problems[0], problems=problems)
    return cfg


def load_config(
    name_or_path: str | os.PathLike, overrides: Sequence[str] = (), config_dir: str | os.PathLike | None = None
) -> GRPOConfig:
    """Compose, validate and rule-check one grpo_trainer config.

    ``name_or_path`` is a config name in the config dir or a path to a YAML file; ``overrides`` are
    Hydra override strings. Raises UserError (every problem in ``problems``) on any user mistake.
    """
    cfg_dir = Path(config_dir).expanduser().resolve() if config_dir is not None else default_config_dir()
    path = resolve_target(name_or_path, cfg_dir)
    source = _display(path)
    primary = _load_yaml(path)
    if primary is not None and not isinstance(primary, dict):
        raise UserError(f"{source}: must be a mapping of sections (got {type(primary).__name__})")
    dirs = [path.parent] + ([cfg_dir] if cfg_dir != path.parent else [])
    for group in (MODEL_GROUP, LAYOUT_GROUP):  # syntax errors in group files get their line number too
        for option in {p for d in dirs for p in (d / group).glob("*.yaml")}:
            _load_yaml(option)
    hydra_overrides = _hydra_overrides(list(overrides), primary, source, dirs)
    data = _compose(path.parent, path.stem, hydra_overrides, dirs[1:], source)
    return validate_dict(data, source, config_dir=cfg_dir)


def _deep_merge(into: dict, other: dict) -> dict:
    """Merge ``other`` into ``into`` in place, recursively, as OmegaConf.merge does for mappings."""
    for key, value in other.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            _deep_merge(into[key], value)
        else:
            into[key] = copy.deepcopy(value)
    return into


def _plain(value: Any) -> Any:
    """An override's parsed value as plain Python (Hydra returns lists/dicts of its own types)."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def apply_overrides(cfg: GRPOConfig, overrides: list[str]) -> GRPOConfig:
    """``cfg`` with Hydra-style overrides applied, re-validated and rule-checked.

    As in Hydra, config-group overrides (``layout=NAME``, ``model=[NAME]``) are applied first and key
    overrides after them, so ``layout=tp2_pp2 actor_config.micro_batch_size=4`` keeps the explicit
    micro batch size. Group files are read from the config dir the config was loaded with.
    """
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.core.override_parser.types import OverrideType
    from hydra.errors import OverrideParseException

    source = cfg._source
    cfg_dir = cfg._config_dir or default_config_dir()
    parser = OverridesParser.create()
    try:
        parsed = parser.parse_overrides(list(overrides))
    except OverrideParseException as err:
        raise UserError(f"{source}: override: {str(err).splitlines()[0]}") from None
    # Plain dicts, not OmegaConf nodes: wrapping the whole config per call cost ~60 ms, and a sweep
    # applies overrides for every trial. Values are already resolved (no interpolations left).
    data = copy.deepcopy(cfg.to_dict())
    groups = (MODEL_GROUP, LAYOUT_GROUP)
    for override in (o for o in parsed if o.key_or_group in groups):
        group = override.key_or_group
        names = _check_group_options(group, override.value(), [cfg_dir], source)
        contents = [_load_yaml(cfg_dir / group / f"{name}.yaml") or {} for name in names]
        if group == MODEL_GROUP:  # like the defaults list: model.<name> = the file's content
            merged: dict = {}
            for content in contents:
                _deep_merge(merged, content)
            data[MODEL_GROUP] = merged
        else:  # a layout is `# @package _global_`
            for content in contents:
                _deep_merge(data, content)
            data[LAYOUT_GROUP] = names[-1]
    for override in parsed:
        if override.key_or_group in groups:
            continue
        key = KEY_ALIASES.get(override.key_or_group, override.key_or_group)
        *parents, leaf = key.split(".")
        node = data
        for part in parents:
            child = node.get(part) if isinstance(node, dict) else None
            if not isinstance(child, dict):
                if override.type == OverrideType.DEL:
                    node = None
                    break
                child = node[part] = {}
            node = child
        if override.type == OverrideType.DEL:
            if isinstance(node, dict):
                node.pop(leaf, None)
            continue
        node[leaf] = _plain(override.value())
    return validate_dict(data, source, config_dir=cfg._config_dir)
