"""Render a config as the YAML files MindSpeed-RL's ``cli/train_grpo.py`` reads.

Two files, as MindSpeed-RL lays them out: the trainer YAML (``configs/grpo_trainer_*.yaml``: a
defaults list naming the model, then megatron_training, actor_config, ref_config and reward_config when
the config has them, rl_config, generate_config, then profiler_config and msprobe_config when given)
and one ``configs/model/<name>.yaml`` per model, which MindSpeed-RL's Hydra loads itself, so the
architecture is not inlined into the trainer YAML. grpo-sweep's own ``engine`` section and the
``layout`` marker are dropped (the layout's values are already in the sections).

First-class keys whose value is null are left out: in the schema a null always means "not set,
MindSpeed-RL's default applies" (every optional first-class field defaults to None), so leaving them out
loses nothing and keeps the YAML acceptable to MindSpeed-RL versions that do not know the key. Long-tail
keys (``schema``) are written when the config sets them, exactly as given, and never otherwise.
"""

from __future__ import annotations

from typing import Any

import yaml

from grpo.config.schema import GRPOConfig

MINDSPEED_SECTIONS = (
    "megatron_training",
    "actor_config",
    "ref_config",
    "reward_config",
    "rl_config",
    "generate_config",
    "profiler_config",
    "msprobe_config",
)


class _Dumper(yaml.SafeDumper):
    """Block-style YAML with lists indented under their key, like MindSpeed-RL's own files."""

    def increase_indent(self, flow: bool = False, indentless: bool = False) -> Any:
        return super().increase_indent(flow, False)


def _dump(data: dict[str, Any]) -> str:
    return yaml.dump(data, Dumper=_Dumper, sort_keys=False, default_flow_style=False, allow_unicode=True)


def mindspeed_dict(cfg: GRPOConfig) -> dict[str, Any]:
    """The trainer YAML as a dict: defaults list + the MindSpeed-RL sections, unset keys left out."""
    data: dict[str, Any] = {"defaults": [{"model": list(cfg.model)}, "_self_"]}
    for name in MINDSPEED_SECTIONS:
        section = getattr(cfg, name)
        if section is not None:  # ref_config, reward_config, profiler_config, msprobe_config only when given
            data[name] = section.dump(render=True)
    return data


def render_mindspeed(cfg: GRPOConfig) -> str:
    """The grpo_trainer YAML text MindSpeed-RL accepts for ``cfg`` (model files: render_mindspeed_model)."""
    header = f"# Rendered by grpo-sweep from {cfg._source}" + (f" (layout {cfg.layout})" if cfg.layout else "")
    return header + "\n" + _dump(mindspeed_dict(cfg))


def render_mindspeed_model(cfg: GRPOConfig, name: str | None = None) -> tuple[str, str]:
    """``(name, yaml_text)`` of ``configs/model/<name>.yaml`` for one model (default: the actor's)."""
    name = name or cfg.actor_config.model
    arch = cfg.model.get(name) or cfg.model_arch  # model_arch raises the UserError
    return name, _dump({name: arch.dump(render=True)})
