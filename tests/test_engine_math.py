"""GRPO math on hand-computed tensors: advantages, KL estimators, clipped loss, entropy, KL control, lr."""

import math

import pytest
import torch

from grpo.engine.loss import (
    AdaptiveKLController,
    FixedKLController,
    entropy_from_logits,
    group_norm_advantages,
    grpo_loss,
    kl_controller,
    kl_penalty,
    micro_batch_weight,
)
from grpo.engine.rollout import filter_logits
from grpo.engine.update import lr_at


def test_group_norm_advantages_by_hand():
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 2.0, 2.0, 2.0, 2.0])
    adv = group_norm_advantages(rewards, group_size=4)
    # group 1: mean 0.5, unbiased std sqrt(((.5^2)*4)/3) = sqrt(1/3)
    std = math.sqrt(1 / 3)
    expected = [0.5 / (std + 1e-6), -0.5 / (std + 1e-6), -0.5 / (std + 1e-6), 0.5 / (std + 1e-6), 0, 0, 0, 0]
    assert adv.tolist() == pytest.approx(expected, rel=1e-6)
    # equal rewards carry no signal: exactly zero, not float noise / eps
    assert adv[4:].abs().max().item() == 0.0


def test_group_norm_matches_trl_formula():
    """TRL's GRPOTrainer: (r - mean_grouped) / (std_grouped + eps) with torch's unbiased std."""
    torch.manual_seed(0)
    r = torch.randn(24)
    trl_like = (r.view(-1, 6) - r.view(-1, 6).mean(1, keepdim=True)) / (r.view(-1, 6).std(1, keepdim=True) + 1e-6)
    assert torch.allclose(group_norm_advantages(r, 6), trl_like.view(-1))


def test_kl_estimators_match_mindspeed_unit_test_values():
    """The values MindSpeed-RL's own tests/ut/utils/test_compute_utils.py expects."""
    logp = torch.tensor([[0.5, 1.0]])
    ref = torch.tensor([[1.0, 0.5]])
    assert kl_penalty(logp, ref, "kl")[0].tolist() == pytest.approx([-0.5, 0.5])
    assert kl_penalty(logp, ref, "abs")[0].tolist() == pytest.approx([0.5, 0.5])
    assert kl_penalty(logp, ref, "mse")[0].tolist() == pytest.approx([0.125, 0.125])
    # k3: exp(ref - logp) - (ref - logp) - 1 = e^0.5 - 1.5 and e^-0.5 - 0.5
    assert kl_penalty(logp, ref, "low_var_kl")[0].tolist() == pytest.approx(
        [math.exp(0.5) - 1.5, math.exp(-0.5) - 0.5], rel=1e-6
    )
    assert kl_penalty(logp, ref, "low_var_kl")[0].tolist() == pytest.approx([0.14872121810913086, 0.10653066635131836])


def test_low_var_kl_is_clamped_like_mindspeed():
    logp = torch.tensor([0.0, 0.0, 0.0])
    ref = torch.tensor([50.0, -50.0, -3.0])  # ref - logp is clamped to [-20, 20], the estimate to [-10, 10]
    out = kl_penalty(logp, ref, "low_var_kl")
    assert out.tolist() == [10.0, 10.0, pytest.approx(math.exp(-3) + 3 - 1, rel=1e-6)]
    assert torch.isfinite(kl_penalty(torch.tensor([-1e4]), torch.tensor([0.0]), "low_var_kl")).all()


def test_kl_unknown_kind():
    with pytest.raises(ValueError, match="unknown kl_penalty"):
        kl_penalty(torch.zeros(1), torch.zeros(1), "full")


def test_clipped_surrogate_by_hand():
    # one response of two tokens, A = +1: ratios e^0.5 (clipped to 1.2) and e^-0.5 (unclipped: min of -A r)
    logp = torch.tensor([[0.5, -0.5]], requires_grad=True)
    old = torch.zeros(1, 2)
    mask = torch.ones(1, 2)
    parts = grpo_loss(logp, old, torch.tensor([1.0]), mask, clip_ratio=0.2)
    r1, r2 = math.exp(0.5), math.exp(-0.5)
    expected = (max(-r1, -1.2) + max(-r2, -r2)) / 2
    assert parts.loss.item() == pytest.approx(expected, rel=1e-6)
    assert parts.pg_clipfrac.item() == pytest.approx(0.5)  # the first token is clipped
    parts.loss.backward()
    # clipped token: no gradient; unclipped: d(-r)/dlogp = -r / 2 tokens
    assert logp.grad[0].tolist() == pytest.approx([0.0, -r2 / 2], rel=1e-6)


def test_clipped_surrogate_negative_advantage_and_masking():
    logp = torch.tensor([[-0.5, 0.3, 9.0]])
    old = torch.zeros(1, 3)
    mask = torch.tensor([[1.0, 1.0, 0.0]])  # the third token is padding and must not count
    parts = grpo_loss(logp, old, torch.tensor([-2.0]), mask, clip_ratio=0.2)
    r1, r2 = math.exp(-0.5), math.exp(0.3)
    # A<0: max(2r, 2clip(r)) -> token1 uses clip 0.8 (2*0.8 > 2*0.607), token2 uses r (2*1.35 > 2*1.2)
    expected = (max(2 * r1, 2 * 0.8) + max(2 * r2, 2 * 1.2)) / 2
    assert parts.loss.item() == pytest.approx(expected, rel=1e-6)
    assert parts.pg_clipfrac.item() == pytest.approx(0.5)


def test_seq_mean_token_mean_averages_tokens_per_response_then_responses():
    """Seq-mean-token-mean: a long response does not outweigh a short one."""
    logp = torch.zeros(2, 4, requires_grad=True)
    mask = torch.tensor([[1.0, 0, 0, 0], [1.0, 1, 1, 1]])
    parts = grpo_loss(logp, logp.detach(), torch.tensor([1.0, -1.0]), mask, 0.2, agg="seq-mean-token-mean")
    assert parts.loss.item() == pytest.approx((-1.0 + 1.0) / 2)
    parts.loss.backward()
    assert logp.grad[0, 0].item() == pytest.approx(-1.0 / 2)
    assert logp.grad[1].tolist() == pytest.approx([0.25 / 2] * 4)


def test_token_mean_weighs_every_token_alike():
    """Token-mean (the default): the long response's 4 tokens outweigh the short one's single token."""
    logp = torch.zeros(2, 4, requires_grad=True)
    mask = torch.tensor([[1.0, 0, 0, 0], [1.0, 1, 1, 1]])
    parts = grpo_loss(logp, logp.detach(), torch.tensor([1.0, -1.0]), mask, 0.2)
    assert parts.loss.item() == pytest.approx((-1.0 + 4 * 1.0) / 5)
    parts.loss.backward()
    assert logp.grad[0].tolist() == pytest.approx([-1 / 5, 0, 0, 0])
    assert logp.grad[1].tolist() == pytest.approx([1 / 5] * 4)
    with pytest.raises(ValueError, match="unknown loss_agg_mode"):
        grpo_loss(logp, logp.detach(), torch.tensor([1.0, -1.0]), mask, 0.2, agg="token-sum")


def test_kl_and_entropy_terms_enter_the_loss_with_their_weights():
    logp = torch.tensor([[-1.0, -2.0]])
    ref = torch.tensor([[-1.5, -1.0]])
    ent = torch.tensor([[0.7, 0.3]])
    mask = torch.ones(1, 2)
    base = grpo_loss(logp, logp, torch.tensor([0.0]), mask, 0.2)
    full = grpo_loss(logp, logp, torch.tensor([0.0]), mask, 0.2, ref, 0.5, "mse", ent, 0.1)
    kl = (0.5 * 0.25 + 0.5 * 1.0) / 2
    assert full.kl_loss.item() == pytest.approx(kl)
    assert full.entropy.item() == pytest.approx(0.5)
    assert full.loss.item() - base.loss.item() == pytest.approx(0.5 * kl - 0.1 * 0.5)


def test_entropy_by_hand():
    logits = torch.log(torch.tensor([[0.5, 0.25, 0.25]]))
    expected = -(0.5 * math.log(0.5) + 2 * 0.25 * math.log(0.25))
    assert entropy_from_logits(logits).item() == pytest.approx(expected, rel=1e-6)
    assert entropy_from_logits(torch.zeros(1, 8)).item() == pytest.approx(math.log(8))


def test_adaptive_kl_controller_moves_toward_target():
    ctrl = AdaptiveKLController(0.1, kl_target=0.05, kl_horizon=100)
    ctrl.update(current_kl=0.5, n_steps=10)  # far above target: error clipped to +0.2
    assert ctrl.value == pytest.approx(0.1 * (1 + 0.2 * 10 / 100))
    ctrl.update(current_kl=0.04, n_steps=10)  # below: error -0.2
    assert ctrl.value == pytest.approx(0.1 * 1.02 * (1 - 0.2 * 10 / 100))
    ctrl.update(current_kl=0.055, n_steps=100)  # 10% above target, one horizon
    assert ctrl.value == pytest.approx(0.1 * 1.02 * 0.98 * 1.1)
    fixed = FixedKLController(0.3)
    fixed.update(9.0, 1000)
    assert fixed.value == 0.3
    assert isinstance(kl_controller("adaptive", 0.1, 0.1, 10), AdaptiveKLController)


def test_sampling_filters():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    neg = torch.finfo(logits.dtype).min
    assert (filter_logits(logits, top_k=2) == neg).tolist() == [[False, False, True, True]]
    # nucleus 0.7: 0.5 < 0.7 so the second token is needed; 0.8 >= 0.7 so the third is dropped
    assert (filter_logits(logits, top_p=0.7) == neg).tolist() == [[False, False, True, True]]
    assert (filter_logits(logits, top_p=0.45) == neg).tolist() == [[False, True, True, True]]
    # min_p 0.2: drop p < 0.1
    assert (filter_logits(logits, min_p=0.2) == neg).tolist() == [[False, False, False, True]]


def test_lr_schedule():
    assert lr_at(0, 10, 1.0, 0.0, 0.2, "constant") == pytest.approx(0.5)  # warmup of 2 steps
    assert lr_at(1, 10, 1.0, 0.0, 0.2, "constant") == pytest.approx(1.0)
    assert lr_at(5, 10, 1.0, 0.0, 0.2, "constant") == 1.0
    assert lr_at(2, 10, 1.0, 0.1, 0.2, "linear") == pytest.approx(1.0)
    assert lr_at(9, 10, 1.0, 0.1, 0.2, "linear") == pytest.approx(0.1)
    assert lr_at(9, 10, 1.0, 0.1, 0.0, "cosine") == pytest.approx(0.1)
    mid = lr_at(5, 11, 1.0, 0.0, 0.0, "cosine")  # halfway: cos(pi/2)
    assert mid == pytest.approx(0.5)


# ---- loss aggregation against MindSpeed-RL (mirror Ascend/MindSpeed-RL 05a90d7) and Megatron-LM (d98e8a6)
LENGTHS = [1, 2, 12, 3, 9, 1]  # responses of very different lengths


def ragged_batch(seed: int = 0):
    """Six responses of LENGTHS tokens (width 12): policy, old, reference log-probs, entropy, advantages."""
    g = torch.Generator().manual_seed(seed)
    n, width = len(LENGTHS), max(LENGTHS)
    mask = (torch.arange(width)[None, :] < torch.tensor(LENGTHS)[:, None]).float()
    old = -torch.rand(n, width, generator=g) * 2
    logp = (old + 0.4 * torch.randn(n, width, generator=g)).requires_grad_()  # some ratios clip
    ref = old + 0.2 * torch.randn(n, width, generator=g)
    entropy = (torch.rand(n, width, generator=g) + 0.5).requires_grad_()
    adv = torch.tensor([1.2, -0.8, 0.5, -1.5, 0.9, -0.3])
    return logp, old, ref, entropy, adv, mask


CLIP, KL_COEF, KL_KIND, ENT_COEFF = 0.2, 0.05, "low_var_kl", 0.01


def mindspeed_micro_batch(logp, old, ref, entropy, adv, mask, clip=CLIP, kl_coef=KL_COEF, ent_coeff=ENT_COEFF):
    """MindSpeed-RL's GRPOActorLossFunc._compute_grpo_policy_loss (grpo_actor_loss_func.py:101-144), written
    out with its torch_functional.masked_mean (sum(v * mask) / (mask.sum() + 1e-8), axis None) and the k3
    estimator of utils/compute.py; returns (loss, stats) as compute_loss (lines 91-97) does."""

    def masked_mean(v, m):
        return (v * m).sum() / (m.sum() + 1e-8)

    ratio = torch.exp(logp - old)
    pg_losses = -adv[:, None] * ratio
    pg_losses2 = -adv[:, None] * torch.clamp(ratio, 1.0 - clip, 1.0 + clip)
    log_ratio = torch.clamp(ref - logp, min=-20, max=20)
    kl = torch.clamp(torch.exp(log_ratio) - log_ratio - 1, min=-10, max=10)
    pg_loss = (
        masked_mean(torch.max(pg_losses, pg_losses2), mask)
        + masked_mean(kl, mask) * kl_coef
        - ent_coeff * masked_mean(entropy, mask)
    )
    stats = {
        "pg_loss": abs(pg_loss.item()),
        "pg_clipfrac": masked_mean(torch.gt(pg_losses2, pg_losses).float(), mask).item(),
        "ppo_kl": masked_mean(-(logp - old), mask).item(),
        "kl_loss": masked_mean(kl, mask).item(),
        "entropy": masked_mean(entropy, mask).item(),
    }
    return pg_loss, stats


def mindspeed_mini_batch(micro: int, seed: int = 0):
    """base_training_engine.py: _split_batches cuts the mini batch into consecutive micro batches (torch.split,
    line 142); Megatron's forward_step_calc_loss (megatron/core/pipeline_parallel/schedules.py:343-346, the
    (loss, stats) branch MindSpeed-RL takes) divides each micro batch's loss by num_microbatches before
    backward; update() appends each micro batch's stats (line 534) and metrics_post_processing
    (utils/utils.py:227) averages them. Returns the loss, d loss / d (logp, entropy) and the mean stats."""
    logp, old, ref, entropy, adv, mask = ragged_batch(seed)
    chunks = list(torch.arange(len(LENGTHS)).split(micro))
    total, stats = 0.0, []
    for c in chunks:
        loss, st = mindspeed_micro_batch(logp[c], old[c], ref[c], entropy[c], adv[c], mask[c])
        total = total + loss / len(chunks)
        stats.append(st)
    total.backward()
    mean_stats = {k: sum(s[k] for s in stats) / len(stats) for k in stats[0]}
    return total.item(), logp.grad, entropy.grad, mean_stats


def ours_mini_batch(micro: int, agg: str, seed: int = 0):
    """The engine's accumulation (update.update): grpo_loss per consecutive micro batch, times
    micro_batch_weight, backward; stats averaged over micro batches."""
    logp, old, ref, entropy, adv, mask = ragged_batch(seed)
    chunks = list(torch.arange(len(LENGTHS)).split(micro))
    total, stats = 0.0, []
    for c in chunks:
        parts = grpo_loss(logp[c], old[c], adv[c], mask[c], CLIP, ref[c], KL_COEF, KL_KIND, entropy[c], ENT_COEFF, agg)
        weighted = parts.loss * micro_batch_weight(agg, len(c), len(LENGTHS), len(chunks))
        weighted.backward()
        total += weighted.item()
        stats.append({k: float(getattr(parts, k)) for k in ("pg_loss", "pg_clipfrac", "ppo_kl", "kl_loss", "entropy")})
    mean_stats = {k: sum(s[k] for s in stats) / len(stats) for k in stats[0]}
    return total, logp.grad, entropy.grad, mean_stats


@pytest.mark.parametrize("micro", [1, 2, 3, 4, 6])
def test_token_mean_is_mindspeed_grpo_loss_under_gradient_accumulation(micro):
    """Mirrors grpo_actor_loss_func.py _compute_grpo_policy_loss + compute_loss, base_training_engine.py
    _split_batches/_forward_backward_batch/update and Megatron's schedules.py forward_step_calc_loss:
    the loss, its gradient (policy and entropy terms) and every logged stat agree, micro batch 4 leaving
    a short last micro batch as MindSpeed-RL's torch.split does."""
    ms_loss, ms_grad, ms_ent_grad, ms_stats = mindspeed_mini_batch(micro)
    loss, grad, ent_grad, stats = ours_mini_batch(micro, "token-mean")
    assert loss == pytest.approx(ms_loss, rel=1e-6)
    torch.testing.assert_close(grad, ms_grad, rtol=1e-5, atol=1e-8)
    torch.testing.assert_close(ent_grad, ms_ent_grad, rtol=1e-5, atol=1e-8)
    assert stats == pytest.approx(ms_stats, rel=1e-6)


def test_pg_loss_is_the_absolute_total_loss_as_mindspeed_logs_it():
    """grpo_actor_loss_func.py:92: 'actor/pg_loss' is abs(pg_loss) where pg_loss (line 143) is the whole
    micro-batch loss, surrogate + KL term - entropy bonus, not the surrogate alone."""
    logp, old, ref, entropy, adv, mask = ragged_batch()
    for agg in ("token-mean", "seq-mean-token-mean"):
        parts = grpo_loss(logp, old, adv, mask, CLIP, ref, KL_COEF, KL_KIND, entropy, ENT_COEFF, agg)
        assert parts.pg_loss.item() == abs(parts.loss.item())
        surrogate = grpo_loss(logp, old, adv, mask, CLIP, agg=agg).loss
        assert parts.loss.item() != pytest.approx(surrogate.item())  # the KL and entropy terms are in it
    negative = grpo_loss(logp, old, adv.abs(), mask, CLIP, ref, KL_COEF, KL_KIND, entropy, ENT_COEFF)
    assert negative.loss.item() < 0 and negative.pg_loss.item() == -negative.loss.item()


def test_token_mean_depends_on_micro_batching_seq_mean_does_not():
    """With these lengths, MindSpeed-RL's token-mean gradient changes with micro_batch_size (a 1-token
    response in a micro batch of its own weighs as much as a 12-token one), as its own loss does; the
    seq-mean-token-mean gradient is the GRPO paper's 1/G sum_i 1/|o_i| sum_t for every micro batch size, and
    equals MindSpeed-RL's DAPO seq-mean-token-mean (dapo_actor_loss_func.py:142-145) where micro batches
    divide the mini batch."""
    token = {m: ours_mini_batch(m, "token-mean")[1] for m in (1, 2, 3, 6)}
    seq = {m: ours_mini_batch(m, "seq-mean-token-mean")[1] for m in (1, 2, 3, 4, 6)}
    for a, b in [(1, 2), (2, 3), (3, 6), (1, 6)]:
        assert not torch.allclose(token[a], token[b], rtol=1e-3), (a, b)
    for m in (2, 3, 4, 6):
        torch.testing.assert_close(seq[m], seq[1], rtol=1e-5, atol=1e-8)
    # micro batch 1: one response per micro batch, token-mean is then seq-mean-token-mean
    torch.testing.assert_close(token[1], seq[1], rtol=1e-5, atol=1e-8)
    assert not torch.allclose(token[6], seq[6], rtol=1e-3)

    # the paper's formula, written out for the surrogate alone
    logp, old, _, _, adv, mask = ragged_batch()
    ratio = torch.exp(logp - old)
    per_token = torch.max(-adv[:, None] * ratio, -adv[:, None] * torch.clamp(ratio, 1 - CLIP, 1 + CLIP))
    paper = sum((per_token[i] * mask[i]).sum() / mask[i].sum() for i in range(len(LENGTHS))) / len(LENGTHS)
    for micro in (1, 4):
        logp2, old2, _, _, adv2, mask2 = ragged_batch()
        chunks = list(torch.arange(len(LENGTHS)).split(micro))
        total = sum(
            grpo_loss(logp2[c], old2[c], adv2[c], mask2[c], CLIP, agg="seq-mean-token-mean").loss
            * micro_batch_weight("seq-mean-token-mean", len(c), len(LENGTHS), len(chunks))
            for c in chunks
        )
        assert total.item() == pytest.approx(paper.item(), rel=1e-6)
    # MindSpeed-RL's DAPO seq-mean-token-mean per micro batch, / num_microbatches (micro 2 divides 6)
    dapo = sum((per_token[c] * mask[c]).sum(-1).div(mask[c].sum(-1)).mean() / 3 for c in torch.arange(6).split(2))
    assert dapo.item() == pytest.approx(paper.item(), rel=1e-6)
