"""MindSpeed-RL's reward-side GRPO variants on the engine's tensors: dynamic sampling, overlong reward shaping
and the KL penalty in the reward (``variants.py`` reads and checks their keys; ``Run.iteration`` calls these).

- Dynamic sampling (``filter_groups_enable``; ``workers/dynamic_sampling.py`` ``DynamicSampling.dynamic_sampling``
  and ``trainer/dapo_trainer_hybrid.py`` ``RayDAPOTrainer.fit``/``dynamic_sampling``): a group is kept when
  ``np.std`` of its ``filter_groups_metric`` verifier scores is > 0 (or the group has one response); kept
  groups fill the batch in generation order up to ``filter_groups_train_batch_size``, the surplus of the
  last generation batch is dropped; another batch of ``global_batch_size`` prompts is generated while too
  few are kept, and after ``filter_groups_max_batches`` (> 0) batches MindSpeed-RL raises (here a UserError).
- Overlong shaping (``overlong_buffer_enable``; ``models/rule_verifier.py`` ``compute_verifier_score``):
  reward += min(-min(len - (rollout_max_tokens - buffer), buffer) / buffer * factor, 0), len counting the
  stop token, added to the weighted verifier total (not to the verifier's own scores, which dynamic
  sampling filters on).
- KL in the reward (``use_kl_in_reward``; ``trainer/utils/compute_utils.py`` ``apply_kl_penalty``): the
  token-level reward is the score on the last response token minus kl_ctrl.value * KL(old || ref) per
  token (the ``kl_penalty`` estimator), and the controller is updated with the batch's mean per-response
  KL and the number of responses. MindSpeed-RL does this in its PPO trainer only (its group_norm
  ``compute_advantage`` reads ``rm_scores`` and ignores the key); for group-normalised advantages the
  engine sums the token-level rewards per response as verl's ``compute_grpo_outcome_advantage`` does.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from grpo.engine.loss import kl_penalty
from grpo.engine.rollout import Rollout


def kept_groups(metric: list[float] | torch.Tensor, n: int) -> torch.Tensor:
    """(G,) bool: groups of ``n`` consecutive responses whose metric varies (DynamicSampling.dynamic_sampling).

    ``np.std`` over float32 values as there (the metric goes through a float32 tensor), so the
    rare float32 rounding that makes ``np.std`` of equal values > 0 keeps the same groups as there.
    """
    values = np.asarray(torch.as_tensor(metric, dtype=torch.float32).cpu(), dtype=np.float32).reshape(-1, n)
    return torch.tensor([n == 1 or bool(np.std(group) > 0) for group in values], dtype=torch.bool)


def overlong_penalty(
    response_lengths: torch.Tensor, rollout_max_tokens: int, buffer: int, factor: float
) -> torch.Tensor:
    """(N,) float64 reward added for lengths inside the last ``buffer`` tokens (compute_verifier_score, which
    adds it to the scores as Python floats before making its float32 tensor)."""
    expected = rollout_max_tokens - buffer
    exceed = torch.clamp(response_lengths.double() - expected, max=buffer)
    return torch.clamp(-exceed / buffer * factor, max=0.0)


def kl_in_reward(
    scores: torch.Tensor,
    old_logp: torch.Tensor,
    ref_logp: torch.Tensor,
    response_mask: torch.Tensor,
    response_lengths: torch.Tensor,
    kind: str,
    beta: float,
) -> tuple[torch.Tensor, torch.Tensor, float]:
    """(token-level rewards (N, R), per-response rewards = their sum (N,), current KL for the controller).

    ``apply_kl_penalty``: the score sits on each response's last token; ``- beta * kld`` on every token;
    current KL = the mean over responses of each response's masked token mean of kld.
    """
    mask = response_mask.float()
    kld = kl_penalty(old_logp.float(), ref_logp.float(), kind) * mask
    rows = torch.arange(scores.shape[0], device=scores.device)
    token_rewards = torch.zeros_like(mask)
    token_rewards[rows, (response_lengths - 1).clamp(min=0)] = scores.float()
    token_rewards = token_rewards - beta * kld
    per_response = torch.where(mask.bool(), kld, 0.0).sum(-1) / (mask.sum(-1) + 1e-8)
    return token_rewards, (token_rewards * mask).sum(-1), float(per_response.mean())


@dataclass
class Scored:
    """One generation batch (or the kept groups of several) with its decoded texts and rewards."""

    batch: Rollout
    texts: list[str]
    labels: list[str]
    scores: torch.Tensor  # (N,) the reward: weighted verifier total (+ overlong penalty)
    per_verifier: dict[str, list[float]]  # each verifier's own scores
    correct: list[bool]

    def groups(self, index: torch.Tensor, n: int) -> Scored:
        """The groups ``index`` (each ``n`` consecutive rows), renumbered 0.. in that order."""
        rows = (index[:, None] * n + torch.arange(n)).reshape(-1)
        picked = rows.tolist()
        batch = self.batch.select(rows.to(self.batch.input_ids.device))
        batch.groups = torch.arange(len(index), device=batch.input_ids.device).repeat_interleave(n)
        return Scored(
            batch,
            [self.texts[r] for r in picked],
            [self.labels[r] for r in picked],
            self.scores[rows.to(self.scores.device)],
            {k: [v[r] for r in picked] for k, v in self.per_verifier.items()},
            [self.correct[r] for r in picked],
        )


def concat(parts: list[Scored], pad_id: int) -> Scored:
    """The rows of ``parts`` in order as one batch: prompts left-padded and responses right-padded to the
    widest part, groups numbered on."""
    if len(parts) == 1:
        return parts[0]
    P = max(p.batch.prompt_width for p in parts)
    R = max(p.batch.input_ids.shape[1] - p.batch.prompt_width for p in parts)
    ids, attn, resp_mask, logps, groups = [], [], [], [], []
    offset = 0
    for part in parts:
        b = part.batch
        left, right = P - b.prompt_width, R - (b.input_ids.shape[1] - b.prompt_width)
        ids.append(torch.nn.functional.pad(b.input_ids, (left, right), value=pad_id))
        # responses attend to everything after the prompt, as generate() lays them out
        attn.append(torch.nn.functional.pad(torch.nn.functional.pad(b.attention_mask, (left, 0)), (0, right), value=1))
        resp_mask.append(torch.nn.functional.pad(b.response_mask, (0, right)))
        logps.append(torch.nn.functional.pad(b.logprobs, (0, right)))
        assert b.groups is not None
        groups.append(b.groups + offset)
        offset += int(b.groups.max()) + 1
    batch = Rollout(
        torch.cat(ids),
        torch.cat(attn),
        P,
        torch.cat(resp_mask),
        torch.cat(logps),
        torch.cat([p.batch.prompt_lengths for p in parts]),
        torch.cat([p.batch.response_lengths for p in parts]),
        torch.cat(groups),
    )
    return Scored(
        batch,
        [t for p in parts for t in p.texts],
        [t for p in parts for t in p.labels],
        torch.cat([p.scores for p in parts]),
        {k: [v for p in parts for v in p.per_verifier[k]] for k in parts[0].per_verifier},
        [c for p in parts for c in p.correct],
    )
