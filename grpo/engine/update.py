"""The update phase of an iteration (trainer.py's steps 5-6): old log-probs, then for each epoch one AdamW step
per mini batch, its gradient accumulated over micro batches, with Megatron's learning-rate schedule."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterator

import torch

from grpo.config import GRPOConfig
from grpo.engine import checkpoint as ckpt
from grpo.engine.loss import STATS, TrainingDiverged, clip_range, grpo_loss, loss_agg_mode, micro_batch_weight
from grpo.engine.model import Qwen2
from grpo.engine.rollout import Rollout, response_logprobs


def lr_at(step: int, total_steps: int, lr: float, min_lr: float, warmup_fraction: float, style: str) -> float:
    """Learning rate of optimizer step ``step`` (0-based) of ``total_steps`` (see trainer.py's docstring)."""
    warmup = round(warmup_fraction * total_steps)
    if step < warmup:
        return lr * (step + 1) / warmup
    if style == "constant":
        return lr
    span = max(1, total_steps - 1 - warmup)
    progress = min(1.0, (step - warmup) / span)
    coeff = 1.0 - progress if style == "linear" else 0.5 * (1.0 + math.cos(math.pi * progress))
    return min_lr + coeff * (lr - min_lr)


def micro_batches(
    batch: Rollout, rows: torch.Tensor, micro: int, by_length: bool = True
) -> Iterator[tuple[torch.Tensor, Rollout]]:
    """Split ``rows`` into micro batches, each trimmed of the padding its rows share.

    ``by_length``: rows are ordered by prompt (so a micro batch holds whole groups, whose shared prompt
    is computed once), groups by their longest response (so groups of similar length share a micro batch
    and little padding), rows by length within a group. That only regroups the rows of one mini batch,
    which is free where the loss is a sum over responses (no-grad passes, ``seq-mean-token-mean``).
    Otherwise micro batches are consecutive ``rows``, as MindSpeed-RL splits a mini batch: a
    ``token-mean`` loss depends on which rows share a micro batch.
    """
    if not by_length:
        for m in rows.split(micro):
            yield m, batch.select(m).trimmed()
        return
    assert batch.groups is not None  # generate() always sets it
    groups, lengths = batch.groups[rows], batch.response_lengths[rows]
    longest = torch.zeros(int(batch.groups.max()) + 1, dtype=lengths.dtype, device=lengths.device)
    longest = longest.scatter_reduce(0, groups, lengths, reduce="amax")[groups]
    width = batch.input_ids.shape[1] + 1
    key = (longest * (int(groups.max()) + 1) + groups) * width + lengths
    order = rows[torch.argsort(key, stable=True)]
    for m in order.split(micro):
        yield m, batch.select(m).trimmed()


def forward_logprobs(
    model: Qwen2,
    batch: Rollout,
    rows: torch.Tensor,
    micro: int,
    out: torch.Tensor,
    temperature: float,
    vocab_size: int,
) -> torch.Tensor:
    """Log-probs of ``rows`` under ``model`` without autograd, written into ``out`` (N, R)."""
    with torch.no_grad():
        for m, sub in micro_batches(batch, rows, micro):
            logp, _ = response_logprobs(model, sub, temperature, vocab_size)
            out[m, : logp.shape[1]] = logp
    return out


def update(
    cfg: GRPOConfig,
    policy: Qwen2,
    optimizer: torch.optim.Optimizer,
    generator: torch.Generator,
    state: ckpt.TrainerState,
    batch: Rollout,
    advantages: torch.Tensor,
    ref_logp: torch.Tensor | None,
    *,
    kl_coef: float,
    temperature: float,
    vocab_size: int,
    max_tokens: int,
    total_steps: int,
    recompute_old_logprobs: bool,
) -> dict[str, float]:
    """Train ``policy`` on one rollout batch; advance ``state.optimizer_steps``; return the ``actor/*`` metrics."""
    rl, actor, eng = cfg.rl_config, cfg.actor_config, cfg.engine
    N = batch.input_ids.shape[0]
    mb, micro = rl.mini_batch_size * rl.n_samples_per_prompt, actor.micro_batch_size
    device = batch.input_ids.device
    orders = [
        torch.randperm(N, generator=generator, device=device)
        if rl.shuffle_mini_batch
        else torch.arange(N, device=device)
        for _ in range(rl.epochs)
    ]
    if recompute_old_logprobs:
        old = torch.zeros_like(batch.logprobs)
        rest = orders[0][mb:]
        if len(rest):  # mini batches after the first see an updated policy: their old log-probs come first
            forward_logprobs(policy, batch, rest, cfg.forward_micro_batch_size("actor"), old, temperature, vocab_size)
    else:  # the sampler's own log-probs: the same policy and temperature, no extra forward pass
        old = batch.logprobs
    params = [p for p in policy.parameters() if p.requires_grad]
    # read per call: tests change cfg.engine between two updates of one Run
    agg = loss_agg_mode(eng.loss_agg_mode, getattr(rl, "token_level_loss", None))
    low, high = clip_range(
        rl.clip_ratio,
        getattr(rl, "clip_higher_enable", None),  # long-tail keys: typed by the manifest
        getattr(rl, "clip_ratio_low", None),
        getattr(rl, "clip_ratio_high", None),
    )
    sums: dict[str, float] = defaultdict(float)  # MindSpeed-RL's stats, summed over all micro batches
    count = 0
    norms, lr = [], 0.0
    policy.train()
    for epoch, order in enumerate(orders):
        for k, idx in enumerate(order.split(mb)):
            optimizer.zero_grad(set_to_none=True)
            n_micro = math.ceil(len(idx) / micro)
            for m, sub in micro_batches(batch, idx, micro, by_length=agg != "token-mean"):
                logp, entropy = response_logprobs(
                    policy,
                    sub,
                    temperature,
                    vocab_size,
                    with_entropy=True,
                    entropy_grad=rl.entropy_coeff > 0,
                )
                width = logp.shape[1]
                if recompute_old_logprobs and epoch == 0 and k == 0:
                    old[m, :width] = logp.detach()
                parts = grpo_loss(
                    logp,
                    old[m, :width],
                    advantages[m],
                    sub.response_mask,
                    low,
                    ref_logp[m, :width] if ref_logp is not None else None,
                    kl_coef,
                    rl.kl_penalty,
                    entropy,
                    rl.entropy_coeff,
                    agg,
                    clip_ratio_high=high,
                    policy_loss=eng.policy_loss,
                    norm=max_tokens,
                )
                if not torch.isfinite(parts.loss):
                    raise TrainingDiverged(f"iteration {state.iteration + 1}: loss is {parts.loss.item()}")
                (parts.loss * micro_batch_weight(agg, len(m), len(idx), n_micro)).backward()
                for name in STATS:
                    sums[name] += float(getattr(parts, name))
                count += 1  # MindSpeed-RL logs the plain mean of its micro batches' stats
            norm = torch.nn.utils.clip_grad_norm_(params, actor.clip_grad if actor.clip_grad > 0 else math.inf)
            if not torch.isfinite(norm):
                raise TrainingDiverged(f"iteration {state.iteration + 1}: gradient norm is {norm.item()}")
            norms.append(float(norm))
            lr = lr_at(
                state.optimizer_steps,
                total_steps,
                actor.lr,
                actor.min_lr,
                actor.lr_warmup_fraction,
                actor.lr_decay_style,
            )
            for group in optimizer.param_groups:
                group["lr"] = lr
            optimizer.step()
            state.optimizer_steps += 1
    policy.eval()
    # The plain mean over every micro batch of every mini batch and epoch: MindSpeed-RL's update() appends
    # each micro batch's stats to one list per name, and metrics_post_processing averages those lists.
    out = {f"actor/{k}": v / count for k, v in sums.items()}
    if ref_logp is None:
        out.pop("actor/kl_loss")
    out["actor/grad_norm"] = sum(norms) / len(norms)
    out["actor/lr"] = lr
    return out
