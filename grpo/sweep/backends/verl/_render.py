"""One trial as Hydra overrides over verl 0.9.x's own ``ppo_trainer`` config (``verl.trainer.main_ppo``).

Key names follow verl 0.9.1's own config (github.com/volcengine/verl, tag v0.9.1: verl/trainer/config/ppo_trainer.yaml
and its actor/, rollout/, data/ and algorithm groups; the dataclasses in verl/workers/config/ and
verl/trainer/config/algorithm.py). Unit conversions and semantics are the point of this module:
- verl's ``data.train_batch_size`` and ``actor.ppo_mini_batch_size`` both count prompts, as MindSpeed-RL's
  ``global_batch_size`` and ``mini_batch_size`` do (verl multiplies the mini batch by ``rollout.n`` itself);
- verl's ``clip_ratio_low`` and ``clip_ratio_high`` both default to 0.2 and override ``clip_ratio``, so both
  are always written: without clip-higher each is ``clip_ratio``;
- KL goes into the loss (``actor.use_kl_loss``) unless the trial puts it in the reward
  (``algorithm.use_kl_in_reward`` with ``algorithm.kl_ctrl``), never both;
- Dr. GRPO's ``seq-mean-token-sum-norm`` divides by a constant, the rollout's ``max_tokens``, as the engine
  (grpo/engine/loss.py) and TRL's ``dr_grpo`` do: verl's ``agg_loss`` divides by each micro batch's padded length
  unless ``actor.loss_scale_factor`` is set, so it is set;
- held-out evaluation means what it means on the embedded engine (grpo/engine/evaluate.py): ``eval/acc`` is the
  fraction correct of ``EVAL_SAMPLES`` responses per held-out prompt sampled with the rollout's own sampling
  parameters, so ``rollout.val_kwargs`` (greedy by default in verl) is set to them; verl runs one validation
  configuration, so the engine's greedy ``eval/acc_greedy`` has no verl counterpart;
- the seed: ``megatron_training.seed`` is the prompt order (``data.seed``: verl's sampler is unseeded without it),
  the mini-batch shuffle's seed (``actor.data_loader_seed``, read when ``actor.shuffle``) and, unless
  ``sampling_config.seed`` is set, vLLM's (``rollout.seed``), as on the engine;
- DAPO's dynamic sampling (``algorithm.filter_groups``): verl 0.9.1's v1 trainer (``main_ppo``'s default,
  ``trainer.use_v1``) refills prompts one by one until ``data.train_batch_size`` groups whose
  ``filter_groups_metric`` scores are not all equal are kept, so that batch is MindSpeed-RL's
  ``filter_groups_train_batch_size``;
- LoRA (``model.lora_rank``, ``lora_alpha``, ``target_modules``) from MindSpeed-RL's ``lora_*`` keys, Megatron's
  module names mapped to the Hugging Face projections as the engine maps them (grpo/engine/lora.py).

``launch_settings`` adds what verl leaves unset or mandatory (``rollout.name``, the micro batch sizes that
default to None, the GPU count) and the run's length, checkpoints, evaluation and optimizer, so a trial never
runs on a verl default the MindSpeed-RL config says otherwise about (``rollout.tensor_model_parallel_size``
defaults to 2, ``trainer.n_gpus_per_node`` to 8, ``optim.weight_decay`` to 0.01).
"""

from __future__ import annotations

from typing import Any

from grpo.config import GRPOConfig
from grpo.engine import lora
from grpo.sweep.backends.verl import _native

ACTOR = "actor_rollout_ref.actor"
ROLLOUT = "actor_rollout_ref.rollout"
REF = "actor_rollout_ref.ref"
ROLLOUT_ENGINE = "vllm"  # MindSpeed-RL generates with vLLM; verl's rollout.name is mandatory (???)
GPUS_PER_NODE = 8
# Responses per held-out prompt behind eval/acc: the embedded engine's Trainer.evaluate(samples=4) default
# (tests/test_verl_resolved.py checks they agree).
EVAL_SAMPLES = 4
MODEL = "actor_rollout_ref.model"
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
        f"{ACTOR}.data_loader_seed": int(cfg.megatron_training.seed),
        "data.seed": int(cfg.megatron_training.seed),
        "data.shuffle": not cfg.megatron_training.no_shuffle,
        f"{ROLLOUT}.n": rl.n_samples_per_prompt,
        f"{ROLLOUT}.temperature": sc.temperature,
        f"{ROLLOUT}.top_p": sc.top_p,
        f"{ROLLOUT}.top_k": sc.top_k,
        f"{ROLLOUT}.seed": int(sc.seed if sc.seed is not None else cfg.megatron_training.seed),
        **_evaluation(cfg),
        f"{ROLLOUT}.gpu_memory_utilization": gen.gpu_memory_utilization,
        f"{ROLLOUT}.tensor_model_parallel_size": gen.infer_tensor_parallel_size,
    }
    if out[f"{ACTOR}.loss_agg_mode"] == "seq-mean-token-sum-norm":
        out[f"{ACTOR}.loss_scale_factor"] = int(sc.max_tokens)
    out.update(_lora(cfg))
    out.update(_dynamic_sampling(cfg))
    if in_reward:
        out["algorithm.kl_penalty"] = kl_type
        out["algorithm.kl_ctrl.type"] = rl.kl_ctrl_type
        out["algorithm.kl_ctrl.kl_coef"] = rl.init_kl_coef
        out["algorithm.kl_ctrl.target_kl"] = rl.kl_target
        out["algorithm.kl_ctrl.horizon"] = rl.kl_horizon
    return out


def _evaluation(cfg: GRPOConfig) -> dict[str, Any]:
    """``rollout.val_kwargs``: eval/acc's sampled responses (greedy when the rollout itself is greedy)."""
    sc = cfg.generate_config.sampling_config
    sampled = sc.temperature > 0
    return {
        f"{ROLLOUT}.val_kwargs.do_sample": sampled,
        f"{ROLLOUT}.val_kwargs.n": EVAL_SAMPLES if sampled else 1,
        f"{ROLLOUT}.val_kwargs.temperature": sc.temperature,
        f"{ROLLOUT}.val_kwargs.top_p": sc.top_p,
        f"{ROLLOUT}.val_kwargs.top_k": sc.top_k,
    }


def _lora(cfg: GRPOConfig) -> dict[str, Any]:
    """verl's FSDP LoRA (peft) from MindSpeed-RL's keys; nothing when ``lora_target_modules`` is unset."""
    settings = lora.settings(cfg)
    if settings is None:
        return {}
    return {
        f"{MODEL}.lora_rank": settings.r,
        f"{MODEL}.lora_alpha": settings.alpha,
        f"{MODEL}.target_modules": "[" + ",".join(settings.modules) + "]",
    }


def _dynamic_sampling(cfg: GRPOConfig) -> dict[str, Any]:
    """``algorithm.filter_groups`` (see the module docstring); nothing when ``filter_groups_enable`` is off."""
    rl = cfg.rl_config
    if not getattr(rl, "filter_groups_enable", False):
        return {}
    return {  # long-tail keys (getattr): typed by the manifest, not by RLConfig
        "algorithm.filter_groups.enable": True,
        "algorithm.filter_groups.metric": metric_key(str(getattr(rl, "filter_groups_metric", None))),
        "data.train_batch_size": int(getattr(rl, "filter_groups_train_batch_size", 0)),
    }


def metric_key(name: str) -> str:
    """A verifier's (user function's) key in the generated compute_score's result (verl's reward_extra_info,
    which ``algorithm.filter_groups.metric`` names): ``<name>_rewards``; a user function's other keys
    (``<name>/<key>``) as they are."""
    return name if "/" in name else f"{name}_rewards"


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
    return "null" if value is None else str(value)


def as_overrides(settings: dict[str, Any]) -> list[str]:
    """``key=value`` Hydra overrides, sorted (a rerun is identical)."""
    return [f"{key}={_hydra_value(value)}" for key, value in sorted(settings.items())]


def trial_overrides(cfg: GRPOConfig, per_node: int = GPUS_PER_NODE) -> list[str]:
    """Every override of one trial but its paths (model, data, checkpoints, log): what preflight validates. The
    config's own verl keys (``verl.<path>``) come last."""
    return mapped_overrides(cfg, per_node) + as_overrides(_native.native_settings(cfg))


def mapped_overrides(cfg: GRPOConfig, per_node: int = GPUS_PER_NODE) -> list[str]:
    """The overrides rendered from grpo-sweep's keys (sorted: a rerun is identical)."""
    return as_overrides({**verl_settings(cfg), **launch_settings(cfg, per_node)})
