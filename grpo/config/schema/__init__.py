"""The typed schema of a grpo_trainer config: one pydantic model per MindSpeed-RL section.

Every parameter of the MindSpeed-RL GRPO reference (shared/seed) and of MindSpeed-RL's own
`grpo_trainer_qwen25_7b_A3.yaml` is a field with a default, a one-line description, its range and
its allowed values. Unknown keys are errors everywhere (``extra="forbid"``). Checks that involve
more than one field live in ``rules.py``; single-field ranges live here so the message names the
field and the offending value.

Defaults are MindSpeed-RL's own (its config classes at the commit of ``mindspeed_keys.json``), except the
few listed with their reason in tests/test_config_manifest.py. Fields whose default is ``None`` mean "not
set: MindSpeed-RL's own default applies"; the renderer leaves them out so versions of MindSpeed-RL that
do not know the key still accept the YAML.

Every other key MindSpeed-RL accepts (the long tail: ``reuse_fp32_param``, ``moe_grouped_gemm``,
``use_remove_padding``, ...) is a field too, typed and defaulted from the key manifest (``manifest.py``).
Long-tail fields are kept, dumped and rendered only when the config sets them, exactly as given.

MindSpeed-RL builds one Megatron config per role from a model file, ``megatron_training`` and the role's
section (``actor_config``; ``ref_config``/``reward_config`` without the integrated worker), later ones
winning, so any Megatron key is legal in any of them. ``canonical.py`` moves the first-class keys to the
one section that holds them here (``num_layers`` to the model, ``lr`` to ``actor_config``...) before
validation, with the same effect.

One module per section group: ``megatron`` (``model``, ``megatron_training``, ``actor_config``, the role
sections), ``rl`` (``rl_config``), ``generate`` (``generate_config``), ``mindstudio`` (``profiler_config``,
``msprobe_config``), ``engine`` (grpo-sweep's ``engine``), ``root`` (``GRPOConfig``); ``_base`` holds
``Section`` and the long-tail fields. This package re-exports their public names.
"""

from grpo.config.schema._base import TYPE_CORRECTIONS, Section, long_tail_annotation, with_long_tail
from grpo.config.schema.engine import EngineConfig
from grpo.config.schema.generate import GenerateConfig, SamplingConfig
from grpo.config.schema.megatron import (
    KEY_HOMES,
    MEGATRON_DEFAULTS,
    ActorConfig,
    MegatronRoleConfig,
    MegatronTrainingConfig,
    ModelConfig,
)
from grpo.config.schema.mindstudio import MsprobeConfig, ProfilerRoleConfig, ProfilerSectionConfig
from grpo.config.schema.rl import ResourceConfig, RLConfig, VerifierName
from grpo.config.schema.root import OPTIONAL_SECTIONS, GRPOConfig

__all__ = [
    "KEY_HOMES",
    "MEGATRON_DEFAULTS",
    "OPTIONAL_SECTIONS",
    "TYPE_CORRECTIONS",
    "ActorConfig",
    "EngineConfig",
    "GRPOConfig",
    "GenerateConfig",
    "MegatronRoleConfig",
    "MegatronTrainingConfig",
    "ModelConfig",
    "MsprobeConfig",
    "ProfilerRoleConfig",
    "ProfilerSectionConfig",
    "RLConfig",
    "ResourceConfig",
    "SamplingConfig",
    "Section",
    "VerifierName",
    "long_tail_annotation",
    "with_long_tail",
]
