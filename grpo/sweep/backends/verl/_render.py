"""One trial as Hydra overrides over verl 0.9.x's own ``ppo_trainer`` config (``verl.trainer.main_ppo``).

Key names follow verl-0.9.1:verl/trainer/config/ppo_trainer.yaml and its actor/rollout/algorithm groups
(see /work/shared/research/gpu-backends.md §1). Unit conversions are the point of this module:
- verl's ``data.train_batch_size`` and ``actor.ppo_mini_batch_size`` both count prompts, as MindSpeed-RL's
  ``global_batch_size`` and ``mini_batch_size`` do (verl multiplies the mini batch by ``rollout.n`` itself);
- verl's ``clip_ratio_low`` and ``clip_ratio_high`` both default to 0.2 and override ``clip_ratio``, so both
  are always written: without clip-higher each is ``clip_ratio``;
- KL goes into the loss (``actor.use_kl_loss``) unless the trial puts it in the reward
  (``algorithm.use_kl_in_reward`` with ``algorithm.kl_ctrl``), never both.
"""

from __future__ import annotations

from typing import Any

from grpo.config import GRPOConfig

ACTOR = "actor_rollout_ref.actor"
ROLLOUT = "actor_rollout_ref.rollout"
# MindSpeed-RL's kl_penalty names -> verl's kl_loss_type / kl_penalty names (verl: core_algos.kl_penalty).
KL_TYPES = {"kl": "kl", "abs": "abs", "mse": "mse", "low_var_kl": "low_var_kl"}
ADV = {"group_norm": "grpo", "gae": "gae"}


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


def _hydra_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def verl_overrides(cfg: GRPOConfig) -> list[str]:
    """``key=value`` Hydra overrides for ``python -m verl.trainer.main_ppo`` (sorted, so a rerun is identical)."""
    return [f"{key}={_hydra_value(value)}" for key, value in sorted(verl_settings(cfg).items())]
