"""GRPO math as verl-style registries: advantage estimators, KL estimators, policy losses, aggregations.

Shapes: per-token tensors are (B, R) over the response tokens, ``mask`` is 1 on real response tokens.
Each kind is a ``Registry`` of named functions (verl's ``core_algos``: ``register_policy_loss``,
``register_adv_est``); its names are exactly the values the config schema allows for its key, which
tests/test_engine_algorithms.py checks (the config package may not import the engine).

- Advantages (``engine.advantage_estimator``). ``group_norm``: each response's reward minus its group's
  mean, divided by the group's standard deviation + 1e-6, the group being the ``n_samples_per_prompt``
  responses of one prompt. The std is the unbiased one (Bessel, ``torch.std``), as in MindSpeed-RL's
  ``compute_verifier_score`` and TRL's GRPOTrainer; a group of identical rewards gets advantage 0. The same
  value is used for every token. ``group_norm_no_std`` (Dr. GRPO): the reward minus the group mean, not
  divided (verl's ``compute_grpo_outcome_advantage`` with ``norm_adv_by_std_in_grpo=False``, TRL's
  ``scale_rewards="none"``).
- KL estimators (``rl_config.kl_penalty``) between the policy ``logp`` and the frozen reference ``ref``
  (MindSpeed-RL's ``compute_kl_penalty``): ``kl`` logp - ref (k1), ``abs`` |logp - ref|, ``mse``
  0.5 (logp - ref)^2 (k2), ``low_var_kl`` exp(ref - logp) - (ref - logp) - 1 (k3, Schulman 2020), with
  ref - logp clamped to [-20, 20] and the result to [-10, 10] as MindSpeed-RL does.
- Policy losses (``engine.policy_loss``), with the clip range 1 - low .. 1 + high: ``clip_ratio`` both ways,
  or ``clip_ratio_low`` / ``clip_ratio_high`` when ``rl_config.clip_higher_enable`` (DAPO's clip-higher,
  MindSpeed-RL's ``DAPOActorLossFunc.compute_loss``). ``vanilla`` (MindSpeed-RL's
  ``_compute_grpo_policy_loss`` / ``_compute_dapo_policy_loss``): ratio = exp(logp - old),
  max(-A ratio, -A clip(ratio, 1 - low, 1 + high)). ``gspo`` (GSPO, verl's ``compute_policy_loss_gspo``):
  the same with the sequence-level ratio s_i = exp(mean_t(logp - old)) carried by every token as
  sg(s_i) * pi / sg(pi), so each token's gradient is s_i's. Then + kl_coef * KL - entropy_coeff * entropy.
- Aggregations (``engine.loss_agg_mode``, verl's ``agg_loss`` names), each with the weight of one micro
  batch's loss before backward (``Aggregation``: no mode without its weight). ``token-mean`` (the
  default) is MindSpeed-RL's GRPO loss (``grpo_actor_loss_func.py``): the masked mean over every response
  token of the micro batch, each micro batch's loss divided by the mini batch's number of micro batches
  (Megatron's ``forward_step_calc_loss``), so it depends on how rows are split into micro batches. The
  three ``seq-mean-*`` modes are means over responses, weighted rows / mini batch rows, so they do not
  depend on micro batching: ``seq-mean-token-mean`` (the GRPO paper's 1/G sum_i 1/|o_i| sum_t; MindSpeed-RL's
  DAPO loss with ``token_level_loss: false``), ``seq-mean-token-sum`` (sum over tokens), and
  ``seq-mean-token-sum-norm`` (Dr. GRPO: the token sum / the rollout's max_tokens, a constant; the mean over
  responses as Dr. GRPO and TRL's ``loss_type="dr_grpo"`` take it, where verl's ``agg_loss`` sums the micro
  batch's responses instead, a factor of its micro batch size).
- Statistics, as MindSpeed-RL's GRPO loss returns them per micro batch: ``pg_loss`` = |total loss| (not
  the surrogate alone), and ``pg_clipfrac``, ``ppo_kl``, ``kl_loss``, ``entropy`` = masked means over the
  micro batch's tokens whatever the aggregation; the trainer averages them over micro batches.
  ``pg_clipfrac_low`` / ``pg_clipfrac_high`` split ``pg_clipfrac`` into the tokens clipped at 1 - low
  (A < 0) and at 1 + high (A > 0), as TRL's ``clip_ratio/low_mean`` and ``high_mean``; they sum to it.
- KL control: ``fixed`` keeps init_kl_coef. ``adaptive`` is the PPO controller of Ziegler et al. (2019)
  that verl and MindSpeed-RL define: coef *= 1 + clip(kl / kl_target - 1, -0.2, 0.2) * n_steps / kl_horizon,
  called once per iteration with that iteration's mean KL and n_steps = its number of responses.
  (MindSpeed-RL's GRPO trainer builds the controller but never calls ``update``; here it does adapt.)
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Generic, NamedTuple, TypeVar

import numpy as np
import torch

F = TypeVar("F")


class TrainingDiverged(RuntimeError):
    """The loss, the gradient norm or the policy's logits became NaN or infinite."""


class Registry(Generic[F]):
    """Named functions of one kind, filled by the ``register`` decorator (verl's ``register_policy_loss``)."""

    def __init__(self, kind: str):
        self.kind = kind
        self._items: dict[str, F] = {}

    def register(self, name: str) -> Callable[[F], F]:
        def add(fn: F) -> F:
            if self._items.get(name, fn) is not fn:  # verl's register_adv_est refuses a second function too
                raise ValueError(f"{self.kind} {name!r} is already registered")
            self._items[name] = fn
            return fn

        return add

    def get(self, name: str) -> F:
        if name not in self._items:
            raise ValueError(f"unknown {self.kind} {name!r}; known: {', '.join(self._items)}")
        return self._items[name]

    def names(self) -> tuple[str, ...]:
        return tuple(self._items)

    def __contains__(self, name: object) -> bool:
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)


# ------------------------------------------------------------------------------------------ advantages
AdvantageFn = Callable[[torch.Tensor, int], torch.Tensor]
ADVANTAGE_ESTIMATORS: Registry[AdvantageFn] = Registry("advantage_estimator")


def _centered(rewards: torch.Tensor, group_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(rewards grouped, minus their group mean), the second exactly 0 in groups of equal rewards."""
    grouped = rewards.view(-1, group_size)
    mean = grouped.mean(dim=1, keepdim=True)
    # A group of equal rewards carries no signal: exactly 0 (the float error of the mean / eps would not be).
    tied = grouped.amax(dim=1, keepdim=True) == grouped.amin(dim=1, keepdim=True)
    return grouped, torch.where(tied, torch.zeros_like(grouped), grouped - mean)


@ADVANTAGE_ESTIMATORS.register("group_norm")
def group_norm_advantages(rewards: torch.Tensor, group_size: int, eps: float = 1e-6) -> torch.Tensor:
    """(r - mean_group) / (std_group + eps) for rewards laid out group after group."""
    grouped, centered = _centered(rewards, group_size)
    std = grouped.std(dim=1, keepdim=True) if group_size > 1 else torch.zeros_like(grouped[:, :1])
    return (centered / (std + eps)).view(-1)


@ADVANTAGE_ESTIMATORS.register("group_norm_no_std")
def group_mean_advantages(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """Dr. GRPO: r - mean_group, not divided by the group's std (which up-weights near-equal groups)."""
    return _centered(rewards, group_size)[1].reshape(-1)


# ------------------------------------------------------------------------------------------ KL estimators
KLFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
KL_ESTIMATORS: Registry[KLFn] = Registry("kl_penalty")


@KL_ESTIMATORS.register("kl")
def _kl_k1(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    return logp - ref_logp


@KL_ESTIMATORS.register("abs")
def _kl_abs(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    return (logp - ref_logp).abs()


@KL_ESTIMATORS.register("mse")
def _kl_k2(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    return 0.5 * (logp - ref_logp).square()


@KL_ESTIMATORS.register("low_var_kl")
def _kl_k3(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    log_ratio = torch.clamp(ref_logp - logp, min=-20, max=20)
    return torch.clamp(torch.exp(log_ratio) - log_ratio - 1, min=-10, max=10)


KL_KINDS = KL_ESTIMATORS.names()


def kl_penalty(logp: torch.Tensor, ref_logp: torch.Tensor, kind: str) -> torch.Tensor:
    """Per-token KL estimate of the policy from the reference (see the module docstring)."""
    return KL_ESTIMATORS.get(kind)(logp, ref_logp)


# ------------------------------------------------------------------------------------------ aggregation
def masked_mean(x: torch.Tensor, mask: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """The mean over every masked-in element (MindSpeed-RL's ``torch_functional.masked_mean``, axis None)."""
    return (x * mask).sum() / (mask.sum() + eps)


class Aggregation(NamedTuple):
    """How one micro batch's per-token values become a scalar, and that scalar's factor before backward.

    ``reduce(x, mask, norm)``: ``norm`` is the constant of ``seq-mean-token-sum-norm`` (max_tokens).
    ``weight(rows, mini_batch_rows, n_micro)``: the factor making the mini batch's gradient the mode's.
    """

    reduce: Callable[[torch.Tensor, torch.Tensor, float], torch.Tensor]
    weight: Callable[[int, int, int], float]


AGGREGATIONS: Registry[Aggregation] = Registry("loss_agg_mode")


def _per_micro_batch(rows: int, mini_batch_rows: int, n_micro: int) -> float:
    """Megatron's schedule divides each micro batch's loss by their number (MindSpeed-RL returns (loss,
    stats), the legacy branch: ``output_tensor /= num_microbatches``)."""
    return 1.0 / n_micro


def _per_response(rows: int, mini_batch_rows: int, n_micro: int) -> float:
    """rows / mini batch rows: a mean over the mini batch's responses even when its last micro batch is
    short (equal to Megatron's 1 / n_micro when micro batches divide it)."""
    return rows / mini_batch_rows


AGGREGATIONS.register("token-mean")(Aggregation(lambda x, m, norm: masked_mean(x, m), _per_micro_batch))
AGGREGATIONS.register("seq-mean-token-mean")(
    Aggregation(lambda x, m, norm: ((x * m).sum(-1) / m.sum(-1).clamp(min=1)).mean(), _per_response)
)
AGGREGATIONS.register("seq-mean-token-sum")(Aggregation(lambda x, m, norm: (x * m).sum(-1).mean(), _per_response))
AGGREGATIONS.register("seq-mean-token-sum-norm")(
    Aggregation(lambda x, m, norm: (x * m).sum(-1).mean() / norm, _per_response)
)
LOSS_AGG_MODES = AGGREGATIONS.names()


def aggregate(x: torch.Tensor, mask: torch.Tensor, mode: str, norm: float = 1.0) -> torch.Tensor:
    """One micro batch's per-token values (B, R) as a scalar, by ``mode`` (see the module docstring)."""
    return AGGREGATIONS.get(mode).reduce(x, mask, norm)


def micro_batch_weight(mode: str, rows: int, mini_batch_rows: int, n_micro: int) -> float:
    """The factor of one micro batch's loss before backward, so the mini batch's gradient is the mode's."""
    return AGGREGATIONS.get(mode).weight(rows, mini_batch_rows, n_micro)


def loss_agg_mode(mode: str | None, token_level_loss: bool | None) -> str:
    """``engine.loss_agg_mode``, or when null MindSpeed-RL's ``rl_config.token_level_loss``: true token-mean,
    false seq-mean-token-mean (``_compute_dapo_policy_loss``). config/rules.py refuses a contradiction."""
    if mode is not None:
        return mode
    return "seq-mean-token-mean" if token_level_loss is False else "token-mean"


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """Entropy of softmax(logits) along the last axis: logsumexp(l) - sum(p * l)."""
    logp = torch.log_softmax(logits.float(), dim=-1)
    return -(logp.exp() * logp).sum(-1)


# ------------------------------------------------------------------------------------------ policy losses
class Surrogate(NamedTuple):
    """A policy loss per token: max(-A r, -A clip(r)) and where the clipped branch was taken."""

    per_token: torch.Tensor
    clipped: torch.Tensor  # bool: torch.gt(pg_losses2, pg_losses), MindSpeed-RL's pg_clipfrac numerator


# (logp, old_logp, advantages (B, 1) or (B, R), mask, clip_low, clip_high) -> Surrogate
PolicyLossFn = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, float, float], Surrogate]
POLICY_LOSSES: Registry[PolicyLossFn] = Registry("policy_loss")


def _clipped_surrogate(ratio: torch.Tensor, adv: torch.Tensor, low: float, high: float) -> Surrogate:
    pg1 = -adv * ratio
    pg2 = -adv * torch.clamp(ratio, 1.0 - low, 1.0 + high)
    return Surrogate(torch.maximum(pg1, pg2), torch.gt(pg2, pg1))


@POLICY_LOSSES.register("vanilla")
def vanilla_policy_loss(
    logp: torch.Tensor, old_logp: torch.Tensor, adv: torch.Tensor, mask: torch.Tensor, low: float, high: float
) -> Surrogate:
    """PPO's clipped surrogate on the token ratio (MindSpeed-RL's ``_compute_dapo_policy_loss``)."""
    return _clipped_surrogate(torch.exp(logp - old_logp), adv, low, high)


@POLICY_LOSSES.register("gspo")
def gspo_policy_loss(
    logp: torch.Tensor, old_logp: torch.Tensor, adv: torch.Tensor, mask: torch.Tensor, low: float, high: float
) -> Surrogate:
    """GSPO's clipped surrogate on the sequence ratio (verl's ``compute_policy_loss_gspo``; the log ratio is
    clamped at 10 as verl does)."""
    seq = ((logp - old_logp) * mask).sum(-1) / mask.sum(-1).clamp(min=1)
    log_ratio = torch.clamp(logp - logp.detach() + seq.detach()[:, None], max=10.0)
    return _clipped_surrogate(torch.exp(log_ratio), adv, low, high)


def clip_range(
    clip_ratio: float, clip_higher_enable: bool | None, low: float | None, high: float | None
) -> tuple[float, float]:
    """(low, high) of the clip range 1 - low .. 1 + high: MindSpeed-RL's ``DAPOActorLossFunc.compute_loss``
    uses clip_ratio both ways unless clip_higher_enable (config/rules.py checks low and high then)."""
    if clip_higher_enable and low is not None and high is not None:
        return float(low), float(high)
    return clip_ratio, clip_ratio


@dataclass
class LossParts:
    """One micro batch's loss and MindSpeed-RL's statistics of it (detached scalars)."""

    loss: torch.Tensor  # what backward() sees, after the caller multiplies it by micro_batch_weight
    pg_loss: torch.Tensor  # |loss|: MindSpeed-RL's 'actor/pg_loss'
    pg_clipfrac: torch.Tensor
    ppo_kl: torch.Tensor
    kl_loss: torch.Tensor
    entropy: torch.Tensor
    pg_clipfrac_low: torch.Tensor  # tokens clipped at 1 - low (negative advantage)
    pg_clipfrac_high: torch.Tensor  # tokens clipped at 1 + high (positive advantage)


STATS = ("pg_loss", "pg_clipfrac", "ppo_kl", "kl_loss", "entropy", "pg_clipfrac_low", "pg_clipfrac_high")


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
    *,
    clip_ratio_high: float | None = None,
    policy_loss: str = "vanilla",
    norm: float = 1.0,
) -> LossParts:
    """The clipped GRPO objective of one micro batch, aggregated by ``agg`` (see the module docstring).

    ``advantages`` is (B,) or (B, R). ``clip_ratio`` is the low side of the clip range, ``clip_ratio_high``
    its high side (None: symmetric). ``norm`` is seq-mean-token-sum-norm's constant. The statistics are
    token means over the micro batch in every mode.
    """
    mask = mask.to(logp.dtype)
    adv = advantages[:, None] if advantages.dim() == 1 else advantages
    high = clip_ratio if clip_ratio_high is None else clip_ratio_high
    surrogate = POLICY_LOSSES.get(policy_loss)(logp, old_logp, adv, mask, clip_ratio, high)
    per_token = surrogate.per_token
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
    loss = aggregate(per_token, mask, agg, norm)
    clipped = surrogate.clipped.to(logp.dtype)
    return LossParts(
        loss,
        loss.detach().abs(),
        masked_mean(clipped, mask).detach(),
        masked_mean(-(logp - old_logp).detach(), mask),
        kl,
        ent,
        masked_mean(clipped * (adv < 0), mask).detach(),
        masked_mean(clipped * (adv > 0), mask).detach(),
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
