"""grpo-sweep's config system: MindSpeed-RL-style grpo_trainer YAML composed by Hydra, one schema.

    from grpo.config import load_config, derive, render_mindspeed
    cfg = load_config("grpo_trainer_tiny_cpu", overrides=["rl_config.clip_ratio=0.3", "layout=tp1_pp1_cpu"])

``load_config`` is the one path from a config name (or file) and Hydra overrides to a ``GRPOConfig``;
``config_from_dict`` validates a dict that is already composed (a Hydra app's own config).
See docs/contracts.md for the interface and docs/config_reference.md for every key.
"""

from grpo.config.compose import (
    config_from_dict,
    config_names,
    config_search_path,
    default_config_dir,
    find_config,
    group_options,
    hydra_overrides,
    load_config,
    resolve_target,
)
from grpo.config.derived import Derived, derive
from grpo.config.keys import known_keys, suggest_key
from grpo.config.render import render_mindspeed, render_mindspeed_model
from grpo.config.rules import RULES, check_rules
from grpo.config.schema import (
    ActorConfig,
    EngineConfig,
    GenerateConfig,
    GRPOConfig,
    MegatronTrainingConfig,
    ModelConfig,
    ResourceConfig,
    RLConfig,
    SamplingConfig,
)
from grpo.config.shipped import shipped_configs, shipped_sweep, shipped_sweep_names, shipped_sweeps
from grpo.config.validate import cli_validate

__all__ = [
    "RULES",
    "ActorConfig",
    "Derived",
    "EngineConfig",
    "GRPOConfig",
    "GenerateConfig",
    "MegatronTrainingConfig",
    "ModelConfig",
    "RLConfig",
    "ResourceConfig",
    "SamplingConfig",
    "check_rules",
    "cli_validate",
    "config_from_dict",
    "config_names",
    "config_search_path",
    "default_config_dir",
    "derive",
    "find_config",
    "group_options",
    "hydra_overrides",
    "known_keys",
    "load_config",
    "render_mindspeed",
    "render_mindspeed_model",
    "resolve_target",
    "shipped_configs",
    "shipped_sweep",
    "shipped_sweep_names",
    "shipped_sweeps",
    "suggest_key",
]
