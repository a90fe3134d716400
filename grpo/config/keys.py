"""The dotted key names of the schema, and did-you-mean suggestions for misspelt ones.

A key is a dotted path into the config (``rl_config.clip_ratio``,
``generate_config.sampling_config.top_p``). Model architecture keys depend on the model names the
defaults list loads, so without a config they are spelt ``model.*.num_layers``; ``suggest_key``
accepts any model name in that position.

Every MindSpeed-RL Megatron key is legal in ``megatron_training``, ``actor_config``, a model and
``ref_config``/``reward_config`` (MindSpeed-RL merges them; ``canonical.py``), so each of those spellings is
a known key; suggestions name the section that holds a first-class key (``actor_config.lr``).
"""

from __future__ import annotations

import types
from functools import lru_cache
from typing import Union, get_args, get_origin

from pydantic import AliasChoices, BaseModel

from grpo.config.manifest import MEGATRON_KEYS
from grpo.config.schema import GRPOConfig, ModelConfig, Section
from grpo.errors import did_you_mean

# Sections that take every Megatron key besides their own fields (moved or merged, see canonical.py).
_MERGED_SECTIONS = ("megatron_training", "actor_config")


def _field_names(model: type[BaseModel]) -> list[str]:
    """Field names of a model plus every alias it accepts (shuffle_minibatch)."""
    names: list[str] = []
    for name, info in model.model_fields.items():
        names.append(name)
        alias = info.validation_alias
        if isinstance(alias, AliasChoices):
            names += [a for a in alias.choices if isinstance(a, str) and a != name]
    return names


def _nested_model(model: type[BaseModel], name: str) -> type[BaseModel] | None:
    annotation = model.model_fields[name].annotation
    if get_origin(annotation) in (Union, types.UnionType):  # ref_config: MegatronRoleConfig | None
        annotation = next((a for a in get_args(annotation) if a is not type(None)), None)
    return annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) else None


def _walk(model: type[BaseModel], prefix: str, *, first_class: bool = False) -> list[str]:
    """Dotted keys under ``model``; ``first_class`` leaves out long-tail fields and merged spellings."""
    keys: list[str] = []
    long_tail = model.long_tail if issubclass(model, Section) and first_class else frozenset()
    for name in _field_names(model):
        if name in long_tail:
            continue
        if name not in model.model_fields:  # an alias: a leaf
            keys.append(prefix + name)
            continue
        if model is GRPOConfig and name == "model":
            keys += _walk(ModelConfig, "model.*.", first_class=first_class)
            continue
        child = _nested_model(model, name)
        keys += _walk(child, f"{prefix}{name}.", first_class=first_class) if child else [prefix + name]
        if model is GRPOConfig and name in _MERGED_SECTIONS and not first_class:
            keys += [f"{name}.{k}" for k in sorted(MEGATRON_KEYS) if f"{name}.{k}" not in keys]
    return keys


@lru_cache(maxsize=1)
def _static_keys() -> tuple[str, ...]:
    return tuple(dict.fromkeys(_walk(GRPOConfig, "")))


@lru_cache(maxsize=1)
def _known_set() -> frozenset[str]:
    return frozenset(_static_keys())


@lru_cache(maxsize=1)
def _first_class_keys() -> tuple[str, ...]:
    return tuple(_walk(GRPOConfig, "", first_class=True))


def known_keys(cfg: GRPOConfig | None = None) -> list[str]:
    """Every valid dotted key; with a config, ``model.*`` is spelt out for each loaded model."""
    keys = list(_static_keys())
    if cfg is None:
        return keys
    out: list[str] = []
    for key in keys:
        if key.startswith("model.*."):
            out += [key.replace("*", name, 1) for name in cfg.model]
        else:
            out.append(key)
    return out


def _generic(key: str) -> tuple[str, str | None]:
    """``model.qwen25_7b.num_layers`` -> (``model.*.num_layers``, ``qwen25_7b``)."""
    parts = key.split(".")
    if len(parts) >= 3 and parts[0] == "model":
        return ".".join(["model", "*", *parts[2:]]), parts[1]
    return key, None


def suggest_key(key: str) -> str | None:
    """The nearest valid key to ``key`` (None when nothing is close).

    A valid key is its own suggestion. Else the same name in another section comes first
    (``rl_config.lr`` -> ``actor_config.lr``: the section that holds a first-class key, then any other
    but a model), then the closest sibling in the same section (``rl_config.clip_rato`` ->
    ``rl_config.clip_ratio``), then the closest key anywhere, compared on the whole dotted path.
    """
    generic, model_name = _generic(key)
    if generic in _known_set():
        return key
    keys = _static_keys()
    parent, _, leaf = generic.rpartition(".")
    prefix = parent + "." if parent else ""
    siblings = [k[len(prefix) :] for k in keys if k.startswith(prefix) and "." not in k[len(prefix) :]]
    if not parent:  # top level: the section names
        siblings = sorted({k.split(".")[0] for k in keys})
    match = did_you_mean(leaf, siblings)
    same_leaf = [k for k in _first_class_keys() if k.rsplit(".", 1)[-1] == leaf]  # a key in the wrong section
    same_leaf += sorted((k for k in keys if k.rsplit(".", 1)[-1] == leaf), key=lambda k: k.startswith("model."))
    if same_leaf:
        found = same_leaf[0]
    elif match:
        found = prefix + match
    else:
        anywhere = did_you_mean(generic, keys)
        if anywhere is None:
            return None
        found = anywhere
    if model_name is not None and found.startswith("model.*."):
        found = found.replace("*", model_name, 1)
    return found
