"""MindSpeed-RL's merge of Megatron sections, as moves of keys to the one section that holds them here.

MindSpeed-RL builds the actor's Megatron config from three dicts, later ones winning: the model file
(``model.<actor_config.model>``), ``megatron_training``, ``actor_config`` (``cli/train_grpo.py``
``parse_training_config``; ``BaseConfig.update`` applies the model first). Any Megatron key is legal in
any of them, and ``-`` in a key reads as ``_``. The schema holds each first-class key in one section
(``num_layers`` in the model, ``global_batch_size`` in ``megatron_training``, ``lr`` in ``actor_config``),
so before validation the value that wins is moved there. The actor's config is the same either way.

Without the integrated worker, ``ref_config`` and ``reward_config`` are merged over ``megatron_training``
(and their model file) the same way: when a move changes what such a section would inherit, the section
gets the value it inherited before, so its config is unchanged too. Long-tail keys are not moved: they
stay where they are written and are rendered there; MindSpeed-RL merges them itself.

Leaf module: the key homes and defaults come from ``schema``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

TIERS = ("model", "megatron_training", "actor_config")  # MindSpeed-RL's order: later wins
ROLE_SECTIONS = ("ref_config", "reward_config")
MEGATRON_SECTIONS = ("megatron_training", "actor_config", *ROLE_SECTIONS)

Loc = tuple[str, ...]
_MISSING = object()


def _underscored(section: dict[str, Any]) -> dict[str, Any]:
    return {k.replace("-", "_") if isinstance(k, str) else k: v for k, v in section.items()}


def _role_view(key: str, role: dict[str, Any], tiers: dict[str, Any], models: dict[str, Any]) -> Any:
    """What ``role`` (ref_config / reward_config, not setting ``key``) inherits: megatron_training, else its model."""
    if key in tiers["megatron_training"]:
        return tiers["megatron_training"][key]
    name = role.get("model", tiers["megatron_training"].get("model"))
    arch = models.get(name) if isinstance(name, str) else None
    return arch.get(key, _MISSING) if isinstance(arch, dict) else _MISSING


def canonicalize(
    data: Any, homes: Mapping[str, str], defaults: Mapping[str, Any] | None = None
) -> tuple[Any, dict[Loc, Loc]]:
    """``data`` with every first-class Megatron key in its home section, and where each moved key came from.

    ``homes`` maps a key to ``model``, ``megatron_training`` or ``actor_config``; ``defaults`` gives
    MindSpeed-RL's default of a key (for a role section that inherited nothing before a move). Returns a
    new dict (the input is not changed) and ``{new location: location as written}`` for error messages.
    Anything that is not shaped as expected is left for the schema to report.
    """
    if not isinstance(data, dict):
        return data, {}
    data = dict(data)
    for name in MEGATRON_SECTIONS:
        if isinstance(data.get(name), dict):
            data[name] = _underscored(data[name])
    models = data.get("model")
    if isinstance(models, dict):
        models = {n: _underscored(a) if isinstance(a, dict) else a for n, a in models.items()}
        data["model"] = models
    else:
        models = {}
    mt, ac = data.get("megatron_training"), data.get("actor_config")
    if not isinstance(mt, dict) or not isinstance(ac, dict):
        return data, {}
    # One merged config has one `model`: a section that does not name it inherits the other's.
    if "model" in mt and "model" not in ac:
        ac["model"] = mt["model"]
    elif "model" in ac and "model" not in mt:
        mt["model"] = ac["model"]
    actor_model = ac.get("model")
    arch = models.get(actor_model) if isinstance(actor_model, str) else None
    if isinstance(arch, dict):
        arch = models[actor_model] = dict(arch)
    else:
        arch = None
    tiers: dict[str, dict[str, Any] | None] = {"model": arch, "megatron_training": mt, "actor_config": ac}
    locs: dict[str, Loc] = {
        "model": ("model", str(actor_model)),
        "megatron_training": ("megatron_training",),
        "actor_config": ("actor_config",),
    }
    roles = {r: dict(data[r]) for r in ROLE_SECTIONS if isinstance(data.get(r), dict)}
    data.update(roles)
    moved: dict[Loc, Loc] = {}
    for key, home in homes.items():
        where = [t for t in TIERS if (section := tiers[t]) is not None and key in section]
        home_section = tiers[home]
        if not where or where == [home] or home_section is None:
            continue
        value = tiers[where[-1]][key]  # type: ignore[index]
        before = {r: _role_view(key, role, tiers, models) for r, role in roles.items() if key not in role}
        for tier in where:
            if tier != home:
                del tiers[tier][key]  # type: ignore[union-attr]
        home_section[key] = value
        for r, seen in before.items():
            if _role_view(key, roles[r], tiers, models) != seen:
                roles[r][key] = (defaults or {}).get(key) if seen is _MISSING else seen
        if where[-1] != home:
            at = (*locs[home], key)  # named: mypy's 3.10 target takes d[(*a, b)] for 3.11-only syntax
            moved[at] = (*locs[where[-1]], key)
    return data, moved
