"""grpo-sweep's config system: MindSpeed-RL-style grpo_trainer YAML composed by Hydra, one schema.

    from grpo.config import load_config, derive, render_mindspeed
    cfg = load_config("grpo_trainer_tiny_cpu", overrides=["rl_config.clip_ratio=0.3", "layout=tp1_pp1_cpu"])

See docs/contracts.md for the interface and docs/config_reference.md for every key.
"""

from grpo.config.compose import default_config_dir, load_config
from grpo.config.compose import validate_dict as config_from_dict
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
    "default_config_dir",
    "derive",
    "known_keys",
    "load_config",
    "render_mindspeed",
    "render_mindspeed_model",
    "suggest_key",
]
