"""``engine``: grpo-sweep's own section for the embedded trainer."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator

from grpo.config.schema._base import Section


class EngineConfig(Section):
    """grpo-sweep's own section for the embedded trainer (not MindSpeed's; never rendered)."""

    device: Literal["auto", "cpu", "cuda", "npu"] = Field(
        "auto", description="Where the embedded engine trains: auto = cuda or npu when present, else cpu."
    )
    num_threads: int = Field(1, ge=1, description="Torch threads per trial (also its Ray CPU request).")
    warm_start_steps: int = Field(200, ge=0, description="Supervised warm-start steps of a freshly built tiny policy.")
    cache_dir: str | None = Field(
        None, description="Cache of warm-started policies; null = $GRPO_CACHE_DIR or ~/.cache/grpo-sweep."
    )
    task: Literal["arithmetic", "dataset"] = Field(
        "arithmetic",
        description="Generated verifiable task the engine trains on; dataset = read megatron_training.data_path.",
    )
    eval_data_path: str | None = Field(
        None,
        description=(
            "Held-out dataset (jsonl, json or parquet, the formats data_path may have) scored by evaluation on every "
            "backend (verl: data.val_files); null = the split's validation part of data_path. Needs task=dataset."
        ),
    )
    data_fields: dict[str, str] | None = Field(
        None,
        description=(
            "Column names of a dataset in no known format: {prompt: <column>, label: <column>} (dotted for nested "
            "columns, e.g. reward_model.ground_truth); null = the format is detected from the first record."
        ),
    )
    task_size: int = Field(
        4096, ge=1, description="Number of generated training prompts (4096: a 150-iteration run sees each about once)."
    )
    task_seed: int = Field(
        1234,
        description=(
            "Seed of the generated task (prompts, held-out split) and of the warm start; fixed across a study's "
            "seeds, so every seed starts from the same base policy and is scored on the same held-out prompts."
        ),
    )
    eval_every: int | None = Field(None, ge=1, description="Evaluate every this many iterations (null = never).")
    eval_size: int = Field(
        256, ge=1, description="Held-out prompts of a generated task, scored greedily and sampled by eval."
    )
    exit_interval: int | None = Field(
        None,
        ge=1,
        description=(
            "Stop after an iteration divisible by it (before train_iters), as Megatron's --exit-interval: evaluate "
            "(when eval_every is set), save a checkpoint (needs actor_config.save) and return; the learning-rate "
            "schedule still spans train_iters. A segment of a longer run (pbt); null = run to train_iters."
        ),
    )
    recompute_old_logprobs: bool = Field(
        False, description="Recompute old log-probs by a forward pass (MindSpeed-RL) instead of the sampler's own."
    )
    loss_agg_mode: (
        Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"] | None
    ) = Field(
        None,
        description=(
            "How the embedded engine averages the GRPO loss (verl's names); null = rl_config.token_level_loss "
            "decides (true: token-mean, false: seq-mean-token-mean), as MindSpeed-RL does. token-mean is "
            "MindSpeed-RL's GRPO loss: the mean over every response token of the micro batch, each micro batch's "
            "loss divided by the number of micro batches, as Megatron does (so it depends on micro_batch_size). "
            "The seq-mean modes average responses: of their token mean (the GRPO paper), token sum, or token sum "
            "/ max_tokens (Dr. GRPO). Backend mindspeed: token-mean only."
        ),
    )
    policy_loss: Literal["vanilla", "gspo"] = Field(
        "vanilla",
        description=(
            "Policy loss of the embedded engine: vanilla = PPO's clipped token ratio (MindSpeed-RL's), gspo = GSPO's "
            "sequence-level ratio and clip (use tiny clip ratios, e.g. clip_ratio_low 3e-4, clip_ratio_high 4e-4). "
            "Backend mindspeed: vanilla only."
        ),
    )
    advantage_estimator: Literal["group_norm", "group_norm_no_std"] = Field(
        "group_norm",
        description=(
            "Advantages of the embedded engine: group_norm = (r - group mean) / group std (MindSpeed-RL's), "
            "group_norm_no_std = r - group mean (Dr. GRPO). Backend mindspeed: group_norm only."
        ),
    )
    keep_checkpoints: int | None = Field(
        None, ge=1, description="Newest checkpoints kept in actor_config.save (null = all); resuming needs the newest."
    )
    wandb_mode: Literal["online", "offline"] | None = Field(
        None,
        description=(
            "W&B mode when rl_config.use_wandb; null = MindSpeed-RL's rule (online when WANDB_API_KEY is set). "
            "offline stays offline whatever the environment says."
        ),
    )
    wandb_group: str | None = Field(
        None, description="W&B run group (a sweep sets its study name, so a study's runs are grouped)."
    )
    swanlab_group: str | None = Field(
        None,
        description="SwanLab experiment group when rl_config.use_swanlab (a sweep sets its study name); also a tag.",
    )
    trial_params: dict[str, Any] | None = Field(
        None,
        description=(
            "The searched parameters of the sweep trial this run is a seed of (key -> value), written as the "
            "run's TensorBoard HParams; a sweep sets them, null outside one."
        ),
    )

    @field_validator("data_fields")
    @classmethod
    def _known_fields(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        if value is not None:
            unknown = sorted(set(value) - {"prompt", "label"})
            if unknown or "prompt" not in value:
                raise ValueError(
                    f"engine.data_fields: maps prompt (required) and label to column names (got keys {sorted(value)})"
                )
        return value
