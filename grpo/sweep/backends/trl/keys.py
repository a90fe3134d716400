"""MindSpeed-RL keys -> TRL ``GRPOConfig`` fields (checked against trl 1.16's trl/trainer/grpo_config.py).

Only the one-to-one mapping and the loss; backend.py's ``render`` adds the batch, schedule, optimizer and
checkpoint fields. A key not mapped there is refused or classified in coverage.py.

    kwargs = grpo_config_kwargs(cfg)   # -> dict for trl.GRPOConfig(**kwargs)
"""

from __future__ import annotations

from typing import Any

from grpo.errors import UserError

RL = "rl_config"
SAMPLING = "generate_config.sampling_config"

# MindSpeed-RL key -> GRPOConfig field, for keys that carry over one to one.
DIRECT: dict[str, str] = {
    f"{RL}.init_kl_coef": "beta",
    f"{RL}.n_samples_per_prompt": "num_generations",
    f"{RL}.epochs": "num_iterations",
    "actor_config.lr": "learning_rate",
    f"{SAMPLING}.temperature": "temperature",
    f"{SAMPLING}.top_p": "top_p",
    f"{SAMPLING}.top_k": "top_k",
    f"{SAMPLING}.min_p": "min_p",
    f"{SAMPLING}.max_tokens": "max_completion_length",
}

# verl's loss_agg_mode names -> TRL loss_type: "grpo" is per-sequence token mean, "dapo" the token mean over
# the accumulated batch, "dr_grpo" the token sum over a constant (max_completion_length, the engine's max_tokens).
LOSS_TYPE = {"seq-mean-token-mean": "grpo", "token-mean": "dapo", "seq-mean-token-sum-norm": "dr_grpo"}
# TRL's GSPO recipe (docs paper_index, and GRPOTrainer's warning for the token-summing losses): the sequence-level
# ratio with loss_type grpo, the sequence mean; verl's gspo recipe and the engine agree with seq-mean-token-mean.
GSPO_MODE = "seq-mean-token-mean"


def _get(cfg: Any, dotted: str) -> Any:
    node = cfg
    for part in dotted.split("."):
        node = getattr(node, part)
    return node


def grpo_config_kwargs(cfg: Any) -> dict[str, Any]:
    """The ``GRPOConfig`` keyword arguments one composed MindSpeed-RL config maps to."""
    out = {field: _get(cfg, key) for key, field in DIRECT.items()}
    if out["top_k"] == -1:  # MindSpeed-RL/vLLM disable top-k with -1, TRL (transformers) with 0
        out["top_k"] = 0
    rl = cfg.rl_config
    if rl.clip_higher_enable:  # TRL: epsilon is the low clip, epsilon_high the high one
        out["epsilon"], out["epsilon_high"] = rl.clip_ratio_low, rl.clip_ratio_high
    else:
        out["epsilon"] = rl.clip_ratio
    mode = cfg.engine.loss_agg_mode or ("token-mean" if rl.token_level_loss else "seq-mean-token-mean")
    if mode not in LOSS_TYPE:  # seq-mean-token-sum: TRL has no per-sequence token sum
        raise UserError(f"{cfg._source}: engine.loss_agg_mode: {mode}: backend trl has no such loss_type")
    gspo = cfg.engine.policy_loss == "gspo"
    if gspo and mode != GSPO_MODE:
        raise UserError(
            f"{cfg._source}: engine.policy_loss: gspo: backend trl runs TRL's GSPO (importance_sampling_level "
            f"sequence, loss_type grpo), the sequence mean; set engine.loss_agg_mode: {GSPO_MODE} (not {mode})"
        )
    out["loss_type"] = LOSS_TYPE[mode]
    out["importance_sampling_level"] = "sequence" if gspo else "token"
    # group_norm_no_std (Dr. GRPO): the reward minus the group mean, not divided by the group's std
    out["scale_rewards"] = "none" if cfg.engine.advantage_estimator == "group_norm_no_std" else "group"
    out["entropy_coef"] = float(rl.entropy_coeff)
    return out


# Rendered fields trl.args may still set, to the values no mapped key expresses (TRL's losses beyond verl's modes).
NATIVE_VALUES: dict[str, tuple[str, ...]] = {"loss_type": ("bnpo", "cispo", "sapo", "luspo", "vespo")}

# Every GRPOConfig field backend.render sets -> the grpo-sweep key that sets it ("the backend": set for every
# trial by the backend itself). ``trl.args`` may not set one of them (the mapped key is the one to set).
RENDERED: dict[str, str] = {
    **{field: key for key, field in DIRECT.items()},
    "epsilon": f"{RL}.clip_ratio (clip_ratio_low with clip_higher_enable)",
    "epsilon_high": f"{RL}.clip_ratio_high",
    "loss_type": "engine.loss_agg_mode (or rl_config.token_level_loss)",
    "importance_sampling_level": "engine.policy_loss",
    "scale_rewards": "engine.advantage_estimator",
    "entropy_coef": f"{RL}.entropy_coeff",
    "reward_weights": f"{RL}.verifier_weight",
    "per_device_train_batch_size": "actor_config.micro_batch_size",
    "gradient_accumulation_steps": f"{RL}.mini_batch_size",
    "steps_per_generation": "megatron_training.global_batch_size",
    "generation_batch_size": "megatron_training.global_batch_size",
    "max_steps": "megatron_training.train_iters",
    "save_steps": "megatron_training.save_interval",
    "save_total_limit": "engine.keep_checkpoints",
    "output_dir": "actor_config.save",
    "use_cpu": "engine.device",
    "seed": "megatron_training.seed",
    "shuffle_dataset": "megatron_training.no_shuffle",
    "lr_scheduler_type": "actor_config.lr_decay_style",
    "lr_scheduler_kwargs": "actor_config.min_lr",
    "warmup_steps": "actor_config.lr_warmup_fraction",
    "warmup_ratio": "actor_config.lr_warmup_fraction",
    "weight_decay": "actor_config.weight_decay",
    "adam_beta1": "actor_config.adam_beta1",
    "adam_beta2": "actor_config.adam_beta2",
    "max_grad_norm": "actor_config.clip_grad",
    **{field: "the backend" for field in ("logging_steps", "save_strategy", "report_to", "disable_tqdm",
                                          "dataloader_num_workers", "bf16")},
}  # fmt: skip
