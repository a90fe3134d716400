"""GRPO math on hand-computed tensors: advantages, KL estimators, clipped loss, entropy, KL control, lr."""

import math

import pytest
import torch

from grpo.engine.loss import (AdaptiveKLController, FixedKLController, entropy_from_logits, group_norm_advantages,
                              grpo_loss, kl_controller, kl_penalty)
from grpo.engine.rollout import filter_logits
from grpo.engine.trainer import lr_at


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
        [math.exp(0.5) - 1.5, math.exp(-0.5) - 0.5], rel=1e-6)
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


def test_loss_averages_tokens_per_response_then_responses():
    """Seq-mean-token-mean: a long response does not outweigh a short one."""
    logp = torch.zeros(2, 4, requires_grad=True)
    mask = torch.tensor([[1.0, 0, 0, 0], [1.0, 1, 1, 1]])
    parts = grpo_loss(logp, logp.detach(), torch.tensor([1.0, -1.0]), mask, 0.2)
    assert parts.loss.item() == pytest.approx(-1.0 + 1.0)
    parts.loss.backward()
    assert logp.grad[0, 0].item() == pytest.approx(-1.0)
    assert logp.grad[1].tolist() == pytest.approx([0.25] * 4)


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
    ctrl.update(current_kl=0.5, n_steps=10)   # far above target: error clipped to +0.2
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
