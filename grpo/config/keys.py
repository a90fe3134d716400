"""The dotted key names of the schema, and did-you-mean suggestions for misspelt ones.

A key is a dotted path into the config (``rl_config.clip_ratio``,
``generate_config.sampling_config.top_p``). Model architecture keys depend on the model names the
defaults list loads, so without a config they are spelt ``model.*.num_layers``; ``suggest_key``
accepts any model name in that position.
"""

from __future__ import annotations

from functools import lru_cache

from pydantic import AliasChoices, BaseModel

from grpo.config.schema import GRPOConfig, ModelConfig
from grpo.errors import did_you_mean


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
    return annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) else None


def _walk(model: type[BaseModel], prefix: str) -> list[str]:
    keys: list[str] = []
    for name in _field_names(model):
        if name not in model.model_fields:  # an alias: a leaf
            keys.append(prefix + name)
            continue
        if model is GRPOConfig and name == "model":
            keys += [f"model.*.{f}" for f in _field_names(ModelConfig)]
            continue
        child = _nested_model(model, name)
        keys += _walk(child, f"{prefix}{name}.") if child else [prefix + name]
    return keys


@lru_cache(maxsize=1)
def _static_keys() -> tuple[str, ...]:
    return tuple(_walk(GRPOConfig, ""))


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

    The same name in another section comes first (``megatron_training.lr`` -> ``actor_config.lr``),
    then the closest sibling in the same section (``rl_config.clip_rato`` -> ``rl_config.clip_ratio``),
    then the closest key anywhere, compared on the whole dotted path.
    """
    generic, model_name = _generic(key)
    keys = _static_keys()
    parent, _, leaf = generic.rpartition(".")
    prefix = parent + "." if parent else ""
    siblings = [k[len(prefix) :] for k in keys if k.startswith(prefix) and "." not in k[len(prefix) :]]
    if not parent:  # top level: the section names
        siblings = sorted({k.split(".")[0] for k in keys})
    match = did_you_mean(leaf, siblings)
    same_leaf = [k for k in keys if k.rsplit(".", 1)[-1] == leaf]  # a key put in the wrong section
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
