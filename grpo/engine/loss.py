"""GRPO math: group-normalised advantages, KL estimators, the clipped surrogate, entropy, KL controllers.

Shapes: per-token tensors are (B, R) over the response tokens, ``mask`` is 1 on real response tokens.

- Advantages (``group_norm``): each response's reward minus its group's mean, divided by the group's
  standard deviation + 1e-6, the group being the ``n_samples_per_prompt`` responses of one prompt. The std
  is the unbiased one (Bessel, ``torch.std``), as in MindSpeed-RL's ``compute_verifier_score`` and TRL's
  GRPOTrainer; a group of identical rewards gets advantage 0. The same value is used for every token.
- KL estimators between the policy ``logp`` and the frozen reference ``ref`` (MindSpeed-RL's
  ``compute_kl_penalty``): ``kl`` logp - ref (k1), ``abs`` |logp - ref|, ``mse`` 0.5 (logp - ref)^2 (k2),
  ``low_var_kl`` exp(ref - logp) - (ref - logp) - 1 (k3, Schulman 2020), with ref - logp clamped to
  [-20, 20] and the result to [-10, 10] as MindSpeed-RL does.
- Policy loss (MindSpeed-RL's ``_compute_grpo_policy_loss``): ratio = exp(logp - old);
  max(-A ratio, -A clip(ratio, 1 - eps, 1 + eps)) + kl_coef * KL - entropy_coeff * entropy.
- Aggregation (``engine.loss_agg_mode``, verl's names). ``token-mean`` (the default) is MindSpeed-RL's GRPO
  loss (``grpo_actor_loss_func.py``): the masked mean over every response token of the micro batch, each
  micro batch's loss divided by the mini batch's number of micro batches before backward (Megatron's
  ``forward_step_calc_loss``), so it depends on how rows are split into micro batches.
  ``seq-mean-token-mean`` is the GRPO paper's 1/G sum_i 1/|o_i| sum_t over the mini batch (MindSpeed-RL's DAPO
  loss with ``token_level_loss: false``): it does not depend on micro batching. ``micro_batch_weight`` is
  the factor of each micro batch's loss for either mode.
- Statistics, as MindSpeed-RL's GRPO loss returns them per micro batch: ``pg_loss`` = |total loss| (not
  the surrogate alone), and ``pg_clipfrac``, ``ppo_kl``, ``kl_loss``, ``entropy`` = masked means over the
  micro batch's tokens whatever the aggregation; the trainer averages them over micro batches.
- KL control: ``fixed`` keeps init_kl_coef. ``adaptive`` is the PPO controller of Ziegler et al. (2019)
  that verl and MindSpeed-RL define: coef *= 1 + clip(kl / kl_target - 1, -0.2, 0.2) * n_steps / kl_horizon,
  called once per iteration with that iteration's mean KL and n_steps = its number of responses.
  (MindSpeed-RL's GRPO trainer builds the controller but never calls ``update``; here it does adapt.)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

KL_KINDS = ("kl", "abs", "mse", "low_var_kl")


class TrainingDiverged(RuntimeError):
    """The loss, the gradient norm or the policy's logits became NaN or infinite."""


def group_norm_advantages(rewards: torch.Tensor, group_size: int, eps: float = 1e-6) -> torch.Tensor:
    """(r - mean_group) / (std_group + eps) for rewards laid out group after group."""
    grouped = rewards.view(-1, group_size)
    mean = grouped.mean(dim=1, keepdim=True)
    std = grouped.std(dim=1, keepdim=True) if group_size > 1 else torch.zeros_like(mean)
    # A group of equal rewards carries no signal: exactly 0 (the float error of the mean / eps would not be).
    tied = grouped.amax(dim=1, keepdim=True) == grouped.amin(dim=1, keepdim=True)
    centered = torch.where(tied, torch.zeros_like(grouped), grouped - mean)
    return (centered / (std + eps)).view(-1)


def kl_penalty(logp: torch.Tensor, ref_logp: torch.Tensor, kind: str) -> torch.Tensor:
    """Per-token KL estimate of the policy from the reference (see the module docstring)."""
    if kind == "kl":
        return logp - ref_logp
    if kind == "abs":
        return (logp - ref_logp).abs()
    if kind == "mse":
        return 0.5 * (logp - ref_logp).square()
    if kind == "low_var_kl":
        log_ratio = torch.clamp(ref_logp - logp, min=-20, max=20)
        return torch.clamp(torch.exp(log_ratio) - log_ratio - 1, min=-10, max=10)
    raise ValueError(f"unknown kl_penalty {kind!r}; known: {', '.join(KL_KINDS)}")


LOSS_AGG_MODES = ("token-mean", "seq-mean-token-mean")


def masked_mean(x: torch.Tensor, mask: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """The mean over every masked-in element (MindSpeed-RL's ``torch_functional.masked_mean``, axis None)."""
    return (x * mask).sum() / (mask.sum() + eps)


def aggregate(x: torch.Tensor, mask: torch.Tensor, mode: str) -> torch.Tensor:
    """One micro batch's per-token values (B, R) as a scalar: ``token-mean`` or ``seq-mean-token-mean``."""
    if mode == "token-mean":
        return masked_mean(x, mask)
    if mode == "seq-mean-token-mean":
        return ((x * mask).sum(-1) / mask.sum(-1).clamp(min=1)).mean()
    raise ValueError(f"unknown loss_agg_mode {mode!r}; known: {', '.join(LOSS_AGG_MODES)}")


def micro_batch_weight(mode: str, rows: int, mini_batch_rows: int, n_micro: int) -> float:
    """The factor of one micro batch's loss before backward, so the mini batch's gradient is the mode's.

    ``token-mean``: 1 / number of micro batches, as Megatron's schedule divides each micro batch's loss
    (MindSpeed-RL returns (loss, stats), the legacy branch: ``output_tensor /= num_microbatches``).
    ``seq-mean-token-mean``: rows / mini batch rows, so the result is the mean over all the mini batch's
    responses even when its last micro batch is short (equal to Megatron's 1 / n_micro when they divide).
    """
    if mode == "token-mean":
        return 1.0 / n_micro
    return rows / mini_batch_rows


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """Entropy of softmax(logits) along the last axis: logsumexp(l) - sum(p * l)."""
    logp = torch.log_softmax(logits.float(), dim=-1)
    return -(logp.exp() * logp).sum(-1)


@dataclass
class LossParts:
    """One micro batch's loss and MindSpeed-RL's statistics of it (detached scalars)."""

    loss: torch.Tensor  # what backward() sees, after the caller multiplies it by micro_batch_weight
    pg_loss: torch.Tensor  # |loss|: MindSpeed-RL's 'actor/pg_loss'
    pg_clipfrac: torch.Tensor
    ppo_kl: torch.Tensor
    kl_loss: torch.Tensor
    entropy: torch.Tensor


def grpo_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    clip_ratio: float,
    ref_logp: torch.Tensor | None = None,
    kl_coef: float = 0.0,
    kl_kind: str = "low_var_kl",
    entropy: torch.Tensor | None = None,
    entropy_coeff: float = 0.0,
    agg: str = "token-mean",
) -> LossParts:
    """The clipped GRPO objective of one micro batch, aggregated by ``agg`` (see the module docstring).

    ``advantages`` is (B,) or (B, R). The statistics are token means over the micro batch in either mode.
    """
    mask = mask.to(logp.dtype)
    adv = advantages[:, None] if advantages.dim() == 1 else advantages
    log_ratio = logp - old_logp
    ratio = torch.exp(log_ratio)
    pg1 = -adv * ratio
    pg2 = -adv * torch.clamp(ratio, 1.0 - clip_ratio, 1.0 + clip_ratio)
    per_token = torch.maximum(pg1, pg2)
    zero = torch.zeros((), dtype=logp.dtype, device=logp.device)
    kl, ent = zero, zero
    if ref_logp is not None:
        kl_tokens = kl_penalty(logp, ref_logp, kl_kind)
        per_token = per_token + kl_coef * kl_tokens
        kl = masked_mean(kl_tokens.detach(), mask)
    if entropy is not None:
        if entropy_coeff:
            per_token = per_token - entropy_coeff * entropy
        ent = masked_mean(entropy.detach(), mask)
    # pg + coef * kl - c * H token by token, then aggregated: by linearity the same as MindSpeed-RL's
    # masked mean of each term combined afterwards.
    loss = aggregate(per_token, mask, agg)
    return LossParts(
        loss,
        loss.detach().abs(),
        masked_mean(torch.gt(pg2, pg1).to(logp.dtype), mask).detach(),
        masked_mean(-log_ratio.detach(), mask),
        kl,
        ent,
    )


class FixedKLController:
    """The KL coefficient stays init_kl_coef."""

    def __init__(self, init_kl_coef: float):
        self.value = float(init_kl_coef)

    def update(self, current_kl: float, n_steps: int) -> None:
        pass


class AdaptiveKLController:
    """Ziegler et al. (2019): move the coefficient toward the KL target, at most 20% per horizon."""

    def __init__(self, init_kl_coef: float, kl_target: float, kl_horizon: int):
        if kl_horizon <= 0 or kl_target <= 0:
            raise ValueError("adaptive KL control needs kl_target > 0 and kl_horizon > 0")
        self.value = float(init_kl_coef)
        self.target = float(kl_target)
        self.horizon = int(kl_horizon)

    def update(self, current_kl: float, n_steps: int) -> None:
        error = float(np.clip(current_kl / self.target - 1.0, -0.2, 0.2))
        self.value *= 1.0 + error * n_steps / self.horizon


def kl_controller(
    kind: str, init_kl_coef: float, kl_target: float, kl_horizon: int
) -> FixedKLController | AdaptiveKLController:
    if kind == "adaptive":
        return AdaptiveKLController(init_kl_coef, kl_target, kl_horizon)
    return FixedKLController(init_kl_coef)
