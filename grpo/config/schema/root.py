"""``GRPOConfig``: the whole config, every section of it."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, model_validator
from pydantic_core import to_jsonable_python

from grpo.config.canonical import canonicalize
from grpo.config.schema._base import Section
from grpo.config.schema.engine import EngineConfig
from grpo.config.schema.generate import GenerateConfig
from grpo.config.schema.megatron import (
    KEY_HOMES,
    MEGATRON_DEFAULTS,
    ActorConfig,
    MegatronRoleConfig,
    MegatronTrainingConfig,
    ModelConfig,
)
from grpo.config.schema.mindstudio import MsprobeConfig, ProfilerSectionConfig
from grpo.config.schema.rl import RLConfig
from grpo.errors import UserError

# Top-level sections present only when a config gives them.
OPTIONAL_SECTIONS = ("ref_config", "reward_config", "profiler_config", "msprobe_config")


class GRPOConfig(BaseModel):
    """One resolved grpo_trainer config: MindSpeed-RL's sections plus grpo-sweep's `engine` and `layout`."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    model: dict[str, ModelConfig] = Field(description="Architectures loaded by the defaults list, by name.")
    megatron_training: MegatronTrainingConfig
    actor_config: ActorConfig
    ref_config: MegatronRoleConfig | None = Field(
        None, description="Reference model's settings over megatron_training (use_integrated_worker: false only)."
    )
    reward_config: MegatronRoleConfig | None = Field(
        None, description="Reward model's settings over megatron_training (use_integrated_worker: false only)."
    )
    rl_config: RLConfig = Field(default_factory=RLConfig)
    generate_config: GenerateConfig = Field(default_factory=GenerateConfig)
    profiler_config: ProfilerSectionConfig | None = Field(
        None, description="MindSpeed-RL's profiler settings (rendered when given; the embedded engine ignores them)."
    )
    msprobe_config: MsprobeConfig | None = Field(
        None, description="MindSpeed-RL's msprobe settings (rendered when given; the embedded engine ignores them)."
    )
    engine: EngineConfig = Field(
        default_factory=EngineConfig,
        description="grpo-sweep's embedded-engine settings.",
    )
    layout: str | None = Field(None, description="Name of the configs/layout entry applied (null = none).")
    algorithm: str | None = Field(
        None, description="Name of the configs/algorithm preset applied (grpo, dapo, dr_grpo, gspo; null = none)."
    )

    # The file the config was composed from, as messages name it (set by load_config / config_from_dict).
    _source: str = PrivateAttr(default="config")

    @model_validator(mode="before")
    @classmethod
    def _merge_megatron_sections(cls, data: Any) -> Any:
        """First-class Megatron keys written in another Megatron section move to their own (canonical.py)."""
        return canonicalize(data, KEY_HOMES, MEGATRON_DEFAULTS)[0]

    @property
    def layout_name(self) -> str:
        """The layout entry applied, or the training split it amounts to (``tp2_pp2``)."""
        actor = self.actor_config
        return self.layout or f"tp{actor.tensor_model_parallel_size}_pp{actor.pipeline_model_parallel_size}"

    def megatron_value(self, key: str) -> Any:
        """A Megatron key as the actor's MindSpeed-RL config holds it: the model file, then
        ``megatron_training``, then ``actor_config``, later winning (``parse_training_config``); MindSpeed-RL's
        default when none sets it."""
        for section in (self.actor_config, self.megatron_training, self.model.get(self.actor_config.model)):
            if section is not None and key in section.model_fields_set:
                return getattr(section, key)
        return getattr(self.actor_config, key, None)

    def forward_micro_batch_size(self, role: Literal["actor", "ref"]) -> int:
        """The micro batch of a role's log-prob forward pass: ``rl_config.<role>_forward_micro_batch_size``,
        else ``actor_config.micro_batch_size``, as MindSpeed-RL's IntegratedWorker does (a null keeps the
        training micro batch; a value swaps it in around the forward pass only)."""
        value = getattr(self.rl_config, f"{role}_forward_micro_batch_size")
        return int(value) if value is not None else self.actor_config.micro_batch_size

    @property
    def model_arch(self) -> ModelConfig:
        """The architecture the actor trains: ``model[actor_config.model]``."""
        name = self.actor_config.model
        if name not in self.model:
            raise UserError(
                f"{self._source}: actor_config.model: '{name}' is not loaded by the defaults list "
                f"(loaded: {', '.join(sorted(self.model)) or 'none'})"
            )
        return self.model[name]

    def to_dict(self) -> dict[str, Any]:
        """Plain nested dict: every first-class field, the long-tail keys the config sets, and ref_config /
        reward_config when present; ``GRPOConfig.model_validate(cfg.to_dict())`` gives it back."""
        out: dict[str, Any] = {"model": {name: arch.dump() for name, arch in self.model.items()}}
        for name in type(self).model_fields:
            value = getattr(self, name)
            if isinstance(value, Section):
                out[name] = value.dump()
            elif name not in out and not (name in OPTIONAL_SECTIONS and value is None):
                out[name] = to_jsonable_python(value)
        return out
