"""``GRPOConfig``: the whole config, every section of it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
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
from grpo.errors import UserError, describe_error

# ------------------------------------------------------------------ schedule (grpo/config/schedule.py: the API)
# Here, not there, because the schema validates a schedule and schedule.py needs the schema and its rules.
Schedule = dict[str, dict[int, Any]]

SCHEDULABLE: tuple[str, ...] = (
    "actor_config.lr",
    "actor_config.min_lr",
    "actor_config.clip_grad",
    "actor_config.weight_decay",
    "rl_config.clip_ratio",
    "rl_config.clip_ratio_low",  # clip-higher (rl_config.clip_higher_enable): the low and high sides
    "rl_config.clip_ratio_high",
    "rl_config.init_kl_coef",  # fixed KL control only: the adaptive controller sets the coefficient itself
    "rl_config.entropy_coeff",
    "generate_config.sampling_config.temperature",
    "generate_config.sampling_config.top_p",
    "generate_config.sampling_config.top_k",
    "generate_config.sampling_config.min_p",
)


def _start(at: Any) -> int | None:
    """An iteration number written as an int or an int-like string; None for anything else (bools too)."""
    if isinstance(at, bool):
        return None
    if isinstance(at, int):
        return at
    if isinstance(at, str):
        try:
            return int(at.strip())
        except ValueError:
            return None
    return None


def _flat(raw: Mapping[Any, Any], prefix: str) -> list[tuple[Any, Any]]:
    """(key, points) of a schedule, nested spellings joined (``+schedule.rl_config.clip_ratio={0: 0.2}`` as a
    Hydra override nests the key): a mapping none of whose keys is an iteration is a level of the key."""
    out: list[tuple[Any, Any]] = []
    for key, points in raw.items():
        name = f"{prefix}{key}" if isinstance(key, str) else key
        nested = isinstance(points, Mapping) and points and all(_start(at) is None for at in points)
        out += _flat(points, f"{name}.") if nested and isinstance(name, str) else [(name, points)]
    return out


def normalise_schedule(raw: Any) -> Schedule | None:
    """``raw`` as a schedule: string keys, int starts in order. Raises ValueError (``schedule.<key>: ...``)."""
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        raise ValueError(
            f"schedule: must be a mapping of config key -> {{first iteration: value}} (got {type(raw).__name__})"
        )
    out: Schedule = {}
    for key, points in _flat(raw, ""):
        if not isinstance(key, str):
            raise ValueError(f"schedule: {key!r} is not a dotted config key")
        if not isinstance(points, Mapping) or not points:
            raise ValueError(
                f"schedule.{key}: must be a non-empty mapping of first iteration -> value (got {points!r})"
            )
        starts: dict[int, Any] = {}
        for at, value in points.items():
            start = _start(at)
            if start is None:
                raise ValueError(f"schedule.{key}: {at!r} is not an iteration number (an integer >= 0)")
            if start in starts:
                raise ValueError(f"schedule.{key}: iteration {start} is given twice")
            starts[start] = value
        out[key] = dict(sorted(starts.items()))
    return out


def schedule_owner(root: Any, key: str) -> tuple[BaseModel, str] | None:
    """(the section object holding ``key``, the field name) in ``root`` (a config or a mapping of sections)."""
    *path, field = key.split(".")
    node = root
    for part in path:
        node = node.get(part) if isinstance(node, Mapping) else getattr(node, part, None)
    return (node, field) if isinstance(node, BaseModel) else None


def check_schedule(
    schedule: Schedule, sections: Any, train_iters: int | None, kl_ctrl_type: str | None
) -> tuple[Schedule, list[str]]:
    """``schedule`` with its values as the schema takes them (``1e-6`` as a float), and one
    ``schedule.<key>: <why>`` line per problem. ``sections``: the config, or a mapping of its validated
    sections (a missing one is skipped: its own error is reported)."""
    problems: list[str] = []
    out: Schedule = {}
    listed = ", ".join(SCHEDULABLE)
    for key, points in schedule.items():
        where = f"schedule.{key}"
        if key not in SCHEDULABLE:
            problems.append(f"{where}: not a key the engine can change between iterations (schedulable: {listed})")
            continue
        if key == "rl_config.init_kl_coef" and kl_ctrl_type == "adaptive":
            problems.append(
                f"{where}: rl_config.kl_ctrl_type is adaptive, whose controller sets the coefficient itself "
                f"(init_kl_coef is only its start); schedule it with kl_ctrl_type: fixed"
            )
            continue
        for start in points:
            if start < 0 or (train_iters is not None and start >= train_iters):
                problems.append(
                    f"{where}: iteration {start} is outside the run (0 .. megatron_training.train_iters - 1 = "
                    f"{(train_iters or 0) - 1}): it would never apply"
                )
        owner = schedule_owner(sections, key)
        if owner is None:
            out[key] = dict(points)
            continue
        section, field = owner
        trial = section.model_copy()
        values: dict[int, Any] = {}
        for start, value in points.items():
            try:
                setattr(trial, field, value)
            except ValidationError as err:
                problems.append(f"{where}: from iteration {start}: {describe_error(err.errors()[0])}")
                continue
            values[start] = getattr(trial, field)
        out[key] = values
    return out, problems


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
    verl: dict[str, Any] | None = Field(
        None,
        description=(
            "backend verl's own settings by verl's config path (verl.actor_rollout_ref.rollout.enforce_eager: true), "
            "fixed or searched like any key; a path a mapped key sets is refused, and every other backend refuses "
            "them (docs/backend_verl.md)."
        ),
    )
    trl: dict[str, Any] | None = Field(
        None,
        description=(
            "backend trl's own settings: trl.args.<field> is a TRL GRPOConfig field (trl.args.loss_type: bnpo), fixed "
            "or searched like any key; a field a mapped key sets is refused, and every other backend refuses them "
            "(docs/backend_trl.md)."
        ),
    )
    schedule: dict[str, dict[int, Any]] | None = Field(
        None,
        description=(
            "Values that change during the run: {dotted key: {first iteration: value}}; a value applies once that "
            "many iterations are done (grpo.config.schedule.SCHEDULABLE lists the keys; null = none). grpo-sweep's "
            "own, as engine."
        ),
    )

    # The file the config was composed from, as messages name it (set by load_config / config_from_dict).
    _source: str = PrivateAttr(default="config")

    @model_validator(mode="before")
    @classmethod
    def _merge_megatron_sections(cls, data: Any) -> Any:
        """First-class Megatron keys written in another Megatron section move to their own (canonical.py)."""
        return canonicalize(data, KEY_HOMES, MEGATRON_DEFAULTS)[0]

    @field_validator("schedule", mode="before")
    @classmethod
    def _normalise_schedule(cls, value: Any) -> Any:
        return normalise_schedule(value)

    @field_validator("schedule")
    @classmethod
    def _check_schedule(cls, value: dict[str, dict[int, Any]] | None, info: ValidationInfo) -> Any:
        """Keys, starts and values checked against the sections validated before it (on assignment too)."""
        if not value:
            return value
        data = info.data
        mt, rl = data.get("megatron_training"), data.get("rl_config")
        checked, problems = check_schedule(
            value,
            data,
            mt.train_iters if mt is not None else None,
            rl.kl_ctrl_type if rl is not None else None,
        )
        if problems:
            raise ValueError(problems[0])  # starts with its key: validation_lines shows it as it is
        return checked

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
        reward_config / schedule when present; ``GRPOConfig.model_validate(cfg.to_dict())`` gives it back."""
        out: dict[str, Any] = {"model": {name: arch.dump() for name, arch in self.model.items()}}
        for name in type(self).model_fields:
            value = getattr(self, name)
            if isinstance(value, Section):
                out[name] = value.dump()
            elif name == "schedule":  # only when set (a config without one dumps as before); starts stay ints
                if value is not None:
                    out[name] = {
                        key: {at: to_jsonable_python(v) for at, v in points.items()} for key, points in value.items()
                    }
            elif name not in out and not (name in OPTIONAL_SECTIONS and value is None):
                out[name] = to_jsonable_python(value)
        return out
