"""One trial as Hydra overrides over verl 0.9.x's own ``ppo_trainer`` config (``verl.trainer.main_ppo``).

Key names follow verl-0.9.1:verl/trainer/config/ppo_trainer.yaml and its actor/rollout/algorithm groups
(see /work/shared/research/gpu-backends.md §1). Unit conversions are the point of this module:
- verl's ``data.train_batch_size`` and ``actor.ppo_mini_batch_size`` both count prompts, as MindSpeed-RL's
  ``global_batch_size`` and ``mini_batch_size`` do (verl multiplies the mini batch by ``rollout.n`` itself);
- verl's ``clip_ratio_low`` and ``clip_ratio_high`` both default to 0.2 and override ``clip_ratio``, so both
  are always written: without clip-higher each is ``clip_ratio``;
- KL goes into the loss (``actor.use_kl_loss``) unless the trial puts it in the reward
  (``algorithm.use_kl_in_reward`` with ``algorithm.kl_ctrl``), never both.

``launch_settings`` adds what verl leaves unset or mandatory (``rollout.name``, the micro batch sizes that
default to None, the GPU count) and the run's length, checkpoints, evaluation and optimizer, so a trial never
runs on a verl default the MindSpeed-RL config says otherwise about (``rollout.tensor_model_parallel_size``
defaults to 2, ``trainer.n_gpus_per_node`` to 8, ``optim.weight_decay`` to 0.01).
"""

from __future__ import annotations

from typing import Any

from grpo.config import GRPOConfig

ACTOR = "actor_rollout_ref.actor"
ROLLOUT = "actor_rollout_ref.rollout"
REF = "actor_rollout_ref.ref"
ROLLOUT_ENGINE = "vllm"  # MindSpeed-RL generates with vLLM; verl's rollout.name is mandatory (???)
GPUS_PER_NODE = 8
# MindSpeed-RL's lr_decay_style -> verl's FSDP optim.lr_scheduler_type (FSDPOptimizerConfig: constant or cosine;
# any other value is left for verl's own validation to refuse, naming actor_config.lr_decay_style).
# MindSpeed-RL's kl_penalty names -> verl's kl_loss_type / kl_penalty names (verl: core_algos.kl_penalty).
KL_TYPES = {"kl": "kl", "abs": "abs", "mse": "mse", "low_var_kl": "low_var_kl"}
ADV = {"group_norm": "grpo"}  # GRPO only (coverage.VALUES refuses the rest before this runs)


def _loss_agg_mode(cfg: GRPOConfig) -> str:
    """verl's ``loss_agg_mode``: the engine's explicit choice, else MindSpeed-RL's token_level_loss switch."""
    explicit = getattr(cfg.engine, "loss_agg_mode", None)
    if explicit:
        return str(explicit)
    token_level = getattr(cfg.rl_config, "token_level_loss", True)
    return "token-mean" if token_level else "seq-mean-token-mean"


def _clip(rl: Any) -> tuple[float, float]:
    if getattr(rl, "clip_higher_enable", False):
        return float(rl.clip_ratio_low), float(rl.clip_ratio_high)
    return float(rl.clip_ratio), float(rl.clip_ratio)


def verl_settings(cfg: GRPOConfig) -> dict[str, Any]:
    """The verl config values one trial sets, keyed by verl's dotted path."""
    rl, gen = cfg.rl_config, cfg.generate_config
    sc = gen.sampling_config
    low, high = _clip(rl)
    in_reward = bool(getattr(rl, "use_kl_in_reward", False))
    kl_type = KL_TYPES[rl.kl_penalty]
    out: dict[str, Any] = {
        "algorithm.adv_estimator": ADV[rl.adv_estimator],
        "algorithm.gamma": rl.gamma,
        "algorithm.lam": rl.lam,
        "data.train_batch_size": cfg.megatron_training.global_batch_size,
        "data.max_prompt_length": rl.max_prompt_length,
        "data.max_response_length": sc.max_tokens,
        f"{ACTOR}.ppo_mini_batch_size": rl.mini_batch_size,
        f"{ACTOR}.ppo_epochs": rl.epochs,
        f"{ACTOR}.optim.lr": cfg.actor_config.lr,
        f"{ACTOR}.clip_ratio": rl.clip_ratio,
        f"{ACTOR}.clip_ratio_low": low,
        f"{ACTOR}.clip_ratio_high": high,
        f"{ACTOR}.entropy_coeff": rl.entropy_coeff,
        f"{ACTOR}.loss_agg_mode": _loss_agg_mode(cfg),
        f"{ACTOR}.use_kl_loss": not in_reward and rl.init_kl_coef > 0,
        f"{ACTOR}.kl_loss_coef": rl.init_kl_coef,
        f"{ACTOR}.kl_loss_type": kl_type,
        "algorithm.use_kl_in_reward": in_reward,
        "algorithm.norm_adv_by_std_in_grpo": cfg.engine.advantage_estimator != "group_norm_no_std",
        f"{ACTOR}.policy_loss.loss_mode": str(cfg.engine.policy_loss),
        f"{ACTOR}.shuffle": bool(rl.shuffle_mini_batch),
        f"{ROLLOUT}.n": rl.n_samples_per_prompt,
        f"{ROLLOUT}.temperature": sc.temperature,
        f"{ROLLOUT}.top_p": sc.top_p,
        f"{ROLLOUT}.top_k": sc.top_k,
        f"{ROLLOUT}.gpu_memory_utilization": gen.gpu_memory_utilization,
        f"{ROLLOUT}.tensor_model_parallel_size": gen.infer_tensor_parallel_size,
    }
    if in_reward:
        out["algorithm.kl_penalty"] = kl_type
        out["algorithm.kl_ctrl.type"] = rl.kl_ctrl_type
        out["algorithm.kl_ctrl.kl_coef"] = rl.init_kl_coef
        out["algorithm.kl_ctrl.target_kl"] = rl.kl_target
        out["algorithm.kl_ctrl.horizon"] = rl.kl_horizon
    return out


def nodes(cfg: GRPOConfig, per_node: int = GPUS_PER_NODE) -> tuple[int, int]:
    """(trainer.nnodes, trainer.n_gpus_per_node) for the trial's ``rl_config.actor_resource.num_npus`` GPUs."""
    gpus = int(cfg.rl_config.actor_resource.num_npus)
    if gpus <= per_node:
        return 1, gpus
    return -(-gpus // per_node), per_node


def launch_settings(cfg: GRPOConfig, per_node: int = GPUS_PER_NODE) -> dict[str, Any]:
    """The rest of a trial's verl config: what verl leaves unset, the run's length, saving, evaluation, optimizer."""
    actor, rl, mt = cfg.actor_config, cfg.rl_config, cfg.megatron_training
    nnodes, per = nodes(cfg, per_node)
    lr = float(actor.lr)
    out: dict[str, Any] = {
        f"{ROLLOUT}.name": ROLLOUT_ENGINE,
        f"{ACTOR}.ppo_micro_batch_size_per_gpu": int(actor.micro_batch_size),
        # MindSpeed-RL's forward micro batches (unset: the update's micro batch), responses per GPU in both
        f"{ROLLOUT}.log_prob_micro_batch_size_per_gpu": int(
            rl.actor_forward_micro_batch_size or actor.micro_batch_size
        ),
        f"{REF}.log_prob_micro_batch_size_per_gpu": int(rl.ref_forward_micro_batch_size or actor.micro_batch_size),
        "trainer.nnodes": nnodes,
        "trainer.n_gpus_per_node": per,
        "trainer.total_training_steps": int(mt.train_iters),
        "trainer.save_freq": int(mt.save_interval) if mt.save_interval else -1,
        "trainer.test_freq": int(cfg.engine.eval_every) if cfg.engine.eval_every else -1,
        "trainer.val_before_train": False,  # it would log step 0 (or the resumed step) with eval metrics only
        f"{ACTOR}.data_loader_seed": int(mt.seed),
        f"{ROLLOUT}.seed": int(cfg.generate_config.sampling_config.seed or mt.seed),
        f"{ACTOR}.optim.weight_decay": float(actor.weight_decay),
        f"{ACTOR}.optim.betas": f"[{float(actor.adam_beta1)},{float(actor.adam_beta2)}]",
        f"{ACTOR}.optim.clip_grad": float(actor.clip_grad),
        f"{ACTOR}.optim.lr_warmup_steps_ratio": float(actor.lr_warmup_fraction),
        f"{ACTOR}.optim.lr_scheduler_type": str(actor.lr_decay_style),
        f"{ACTOR}.optim.min_lr_ratio": float(actor.min_lr) / lr if lr > 0 else 0.0,
    }
    return out


def _hydra_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def as_overrides(settings: dict[str, Any]) -> list[str]:
    """``key=value`` Hydra overrides, sorted (a rerun is identical)."""
    return [f"{key}={_hydra_value(value)}" for key, value in sorted(settings.items())]


def verl_overrides(cfg: GRPOConfig) -> list[str]:
    """``key=value`` Hydra overrides for ``python -m verl.trainer.main_ppo`` (sorted, so a rerun is identical)."""
    return as_overrides(verl_settings(cfg))


def trial_overrides(cfg: GRPOConfig, per_node: int = GPUS_PER_NODE) -> list[str]:
    """Every override of one trial but its paths (model, data, checkpoints, log): what preflight validates."""
    return as_overrides({**verl_settings(cfg), **launch_settings(cfg, per_node)})
