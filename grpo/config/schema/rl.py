"""``rl_config``: GRPO's own parameters and resources."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Literal, get_args

from pydantic import AfterValidator, AliasChoices, Field, model_validator

from grpo.config.schema._base import Section, with_long_tail

# The names MindSpeed-RL's rule verifier knows (mindspeed_rl/models/rule_verifier.py); the embedded engine
# scores a subset (grpo.engine.rewards.VERIFIERS; grpo.engine.check refuses the others before launch).
VerifierName = Literal[
    "acc", "base_acc", "math_17k_acc", "strict_format", "format", "step",
    "math_verify_reward", "acc_for_dapo", "acc_for_ppo", "retool_reward",
]  # fmt: skip


def _verifier_or_user_function(value: str) -> str:
    """A verifier name, or a user reward function: ``path/file.py:function`` or ``package.module:function``
    (optionally ``@trl`` / ``@verl``); the function itself is imported by ``validate`` and the trial
    (grpo.engine.rewards.custom), not here."""
    if value in get_args(VerifierName):
        return value
    body, _, form = value.rpartition("@") if "@" in value else (value, "", "")
    module, colon, name = body.rpartition(":")
    if colon and module and name.isidentifier() and form in ("", "trl", "verl"):
        return value
    raise ValueError(
        f"must be one of {', '.join(get_args(VerifierName))}, or a user function path/to/file.py:function or "
        f"package.module:function (got {value!r})"
    )


# A verifier_function entry: a MindSpeed-RL verifier name or a user's own reward function.
VerifierRef = Annotated[str, AfterValidator(_verifier_or_user_function)]


class ResourceConfig(Section):
    """Devices given to one role."""

    num_npus: int = Field(1, ge=1, description="NPUs (or CPU slots) for the actor and reference models.")


class _RLConfigBase(Section):
    """GRPO-specific parameters and resources (MindSpeed-RL `rl_config`).

    MindSpeed-RL multiplies mini_batch_size by n_samples_per_prompt internally: the YAML counts
    prompts, one optimizer step consumes mini_batch_size * n_samples_per_prompt responses.
    """

    use_integrated_worker: bool = Field(True, description="Colocate actor, reference and rollout on the same devices.")
    blocking: bool = Field(True, description="Run the stages synchronously (false = asynchronous).")
    guarantee_order: bool = Field(False, description="Keep sample order in the TransferDock.")
    gamma: float = Field(1.0, ge=0, le=1, description="Reward discount factor.")
    lam: float = Field(0.95, ge=0, le=1, description="GAE lambda.")
    actor_forward_micro_batch_size: int | None = Field(
        None,
        gt=0,
        description="Micro batch of the actor's log-prob forward pass; null = actor_config.micro_batch_size.",
    )
    ref_forward_micro_batch_size: int | None = Field(
        None,
        gt=0,
        description="Micro batch of the reference log-prob forward pass; null = actor_config.micro_batch_size.",
    )
    adv_estimator: Literal["group_norm", "gae"] = Field("group_norm", description="Advantage estimator.")
    kl_penalty: Literal["kl", "abs", "mse", "low_var_kl"] = Field(
        "low_var_kl", description="KL estimator of the KL term."
    )
    kl_ctrl_type: Literal["fixed", "adaptive"] = Field("fixed", description="KL coefficient control.")
    init_kl_coef: float = Field(0.01, ge=0, description="(Initial) weight of the KL loss.")
    kl_target: float = Field(100.0, gt=0, description="Target KL of the adaptive controller (kl_ctrl_type=adaptive).")
    kl_horizon: int = Field(1000, gt=0, description="Horizon (responses) of the adaptive KL controller.")
    mini_batch_size: int = Field(
        1, gt=0, description="Prompts per actor update (times n_samples_per_prompt responses)."
    )
    max_prompt_length: int = Field(512, gt=0, description="Longest prompt in tokens.")
    epochs: int = Field(1, ge=1, description="Passes over each iteration's rollouts.")
    clip_ratio: float = Field(0.2, ge=0, le=1, description="PPO clip ratio of the policy loss; usually 0.1-0.3.")
    entropy_coeff: float = Field(0.0, ge=0, description="Weight of the entropy bonus.")
    n_samples_per_prompt: int = Field(1, ge=1, description="Responses generated per prompt (the GRPO group size).")
    shuffle_mini_batch: bool = Field(
        False,
        validation_alias=AliasChoices("shuffle_mini_batch", "shuffle_minibatch"),
        description="Shuffle responses into mini batches for the actor update (alias shuffle_minibatch).",
    )
    log_max_throughput: bool | None = Field(None, description="Report throughput from the slowest (max) stage time.")
    rule_reward: bool = Field(True, description="Score responses with rule-based verifiers.")
    verifier_function: list[VerifierRef] = Field(
        default_factory=lambda: ["base_acc"],
        description=(
            "Rule-reward functions, e.g. [acc, strict_format]; an entry may be a user's own function, "
            "path/to/file.py:function (relative to the spec's folder) or package.module:function (docs/your_run.md)."
        ),
        json_schema_extra={
            "allowed": ", ".join(f"`{name}`" for name in get_args(VerifierName)) + ", `file.py:function`, "
            "`package.module:function`"
        },
    )
    verifier_weight: list[float] = Field(
        default_factory=lambda: [1.0], description="Weight of each verifier_function, same length."
    )
    num_cpus_for_local_task: float = Field(1.0, gt=0, description="CPUs of each local Ray task.")
    use_tensorboard: bool = Field(False, description="Log to TensorBoard (ignored when use_wandb is on).")
    use_wandb: bool = Field(False, description="Log to Weights & Biases.")
    wandb_project: str = Field("", description="W&B project name.")
    wandb_exp_name: str = Field("", description="W&B experiment name.")
    wandb_save_dir: str = Field("", description="Local folder for W&B files.")
    actor_resource: ResourceConfig = Field(
        default_factory=ResourceConfig,
        description="Devices of the actor.",
    )

    @model_validator(mode="before")
    @classmethod
    def _one_spelling_of_shuffle(cls, data: Any) -> Any:
        """shuffle_minibatch (MindSpeed's example) and shuffle_mini_batch (its code) are one key."""
        if isinstance(data, dict) and "shuffle_minibatch" in data and "shuffle_mini_batch" in data:
            if data["shuffle_minibatch"] != data["shuffle_mini_batch"]:
                raise ValueError(
                    "rl_config.shuffle_minibatch and rl_config.shuffle_mini_batch are one key "
                    f"(got {data['shuffle_minibatch']} and {data['shuffle_mini_batch']}); set only one"
                )
            data = {k: v for k, v in data.items() if k != "shuffle_minibatch"}
        return data


if TYPE_CHECKING:
    RLConfig = _RLConfigBase
else:
    RLConfig = with_long_tail(_RLConfigBase, "rl")
