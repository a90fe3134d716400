"""The engine's GRPO variants: clip-higher, token_level_loss / loss_agg_mode, Dr. GRPO, GSPO, their registries,
the algorithm presets, and one short training run per key showing which metrics the key moves.

Parity tests write the upstream formula out on crafted tensors and name the function it mirrors.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import get_args

import pytest
import torch

from grpo._fs import read_jsonl
from grpo.config import GRPOConfig, load_config
from grpo.config.compose import group_options
from grpo.engine import train
from grpo.engine.loss import (
    ADVANTAGE_ESTIMATORS,
    AGGREGATIONS,
    KL_ESTIMATORS,
    POLICY_LOSSES,
    Registry,
    aggregate,
    clip_range,
    group_mean_advantages,
    grpo_loss,
    loss_agg_mode,
    micro_batch_weight,
)
from grpo.errors import UserError

LENGTHS = [1, 12, 3, 7, 12, 5]


def batch(seed: int = 0):
    """Six responses of LENGTHS tokens: policy (requires grad), old log-probs, advantages, mask; ratios clip."""
    g = torch.Generator().manual_seed(seed)
    n, width = len(LENGTHS), max(LENGTHS)
    mask = (torch.arange(width)[None, :] < torch.tensor(LENGTHS)[:, None]).float()
    old = -torch.rand(n, width, generator=g) * 2
    logp = (old + 0.4 * torch.randn(n, width, generator=g)).requires_grad_()
    adv = torch.tensor([1.2, -0.8, 0.5, -1.5, 0.9, -0.3])
    return logp, old, adv, mask


def grad_of(loss: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    return torch.autograd.grad(loss, x)[0]


# ------------------------------------------------------------------------------------------ registries
def _literal(model: type, field: str) -> set[str]:
    return {v for v in get_args(model.model_fields[field].annotation) if isinstance(v, str)} | {
        v for arg in get_args(model.model_fields[field].annotation) for v in get_args(arg) if isinstance(v, str)
    }


def test_each_registry_holds_exactly_the_values_the_schema_allows():
    """config may not import engine, so the schema's Literals and the engine's registries are compared here."""
    engine, rl = GRPOConfig.model_fields["engine"].annotation, GRPOConfig.model_fields["rl_config"].annotation
    assert _literal(engine, "policy_loss") == set(POLICY_LOSSES) == {"vanilla", "gspo"}
    assert _literal(engine, "advantage_estimator") == set(ADVANTAGE_ESTIMATORS)
    assert _literal(engine, "loss_agg_mode") == set(AGGREGATIONS)
    assert _literal(rl, "kl_penalty") == set(KL_ESTIMATORS)
    assert set(AGGREGATIONS) == {"token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"}


def test_a_registry_names_the_known_entries_and_refuses_a_second_function():
    reg: Registry[int] = Registry("thing")
    reg.register("a")(1)
    reg.register("a")(1)  # the same object again (a module imported twice) is fine
    with pytest.raises(ValueError, match="thing 'a' is already registered"):
        reg.register("a")(2)
    with pytest.raises(ValueError, match="unknown thing 'b'; known: a"):
        reg.get("b")
    with pytest.raises(ValueError, match="unknown policy_loss 'ppo'; known: vanilla, gspo"):
        POLICY_LOSSES.get("ppo")


# ------------------------------------------------------------------------------------------ clip-higher
def mindspeed_dapo_loss(logp, old, adv, mask, low, high, token_level_loss):
    """MindSpeed-RL's DAPOActorLossFunc._compute_dapo_policy_loss (models/loss/dapo_actor_loss_func.py), written
    out with torch_functional.masked_mean (sum(v * mask) / (mask.sum() + 1e-8)); entropy_coeff 0."""

    def masked_mean(v, m):
        return (v * m).sum() / (m.sum() + 1e-8)

    ratio = torch.exp(logp - old)
    pg_losses = -adv[:, None] * ratio
    pg_losses2 = -adv[:, None] * torch.clamp(ratio, 1.0 - low, 1.0 + high)
    if token_level_loss:
        loss = masked_mean(torch.max(pg_losses, pg_losses2), mask)
    else:
        loss = (torch.sum(torch.max(pg_losses, pg_losses2) * mask, dim=-1) / torch.sum(mask, dim=-1)).mean()
    return loss, masked_mean(torch.gt(pg_losses2, pg_losses).float(), mask)


@pytest.mark.parametrize("token_level_loss", [True, False])
def test_clip_higher_is_mindspeeds_dapo_loss(token_level_loss):
    logp, old, adv, mask = batch()
    low, high = clip_range(0.2, True, 0.1, 0.28)
    assert (low, high) == (0.1, 0.28)
    ms_loss, ms_clipfrac = mindspeed_dapo_loss(logp, old, adv, mask, low, high, token_level_loss)
    agg = loss_agg_mode(None, token_level_loss)
    parts = grpo_loss(logp, old, adv, mask, low, agg=agg, clip_ratio_high=high)
    assert parts.loss.item() == pytest.approx(ms_loss.item(), rel=1e-6)
    torch.testing.assert_close(grad_of(parts.loss, logp), grad_of(ms_loss, logp))
    assert parts.pg_clipfrac.item() == pytest.approx(ms_clipfrac.item(), rel=1e-6)
    # the asymmetric range really differs from the symmetric one on these tensors
    symmetric = grpo_loss(logp, old, adv, mask, 0.2, agg=agg)
    assert symmetric.loss.item() != pytest.approx(parts.loss.item(), rel=1e-4)


def test_clip_range_without_clip_higher_is_clip_ratio_both_ways():
    """DAPOActorLossFunc.compute_loss: clip_ratio_low = clip_ratio_high = clip_ratio unless clip_higher_enable."""
    assert clip_range(0.2, False, 0.1, 0.28) == (0.2, 0.2)
    assert clip_range(0.2, None, None, None) == (0.2, 0.2)


def test_low_and_high_clip_fractions_are_trls_and_sum_to_mindspeeds_clipfrac():
    """TRL's GRPOTrainer._compute_loss: is_low_clipped = (coef_1 < 1 - epsilon_low) & (advantages < 0),
    is_high_clipped = (coef_1 > 1 + epsilon_high) & (advantages > 0), masked means ('clip_ratio/low_mean',
    'clip_ratio/high_mean')."""
    logp, old, adv, mask = batch()
    low, high = 0.1, 0.28
    parts = grpo_loss(logp, old, adv, mask, low, clip_ratio_high=high)
    ratio = torch.exp(logp - old).detach()
    a = adv[:, None]
    is_low = ((ratio < 1 - low) & (a < 0)).float()
    is_high = ((ratio > 1 + high) & (a > 0)).float()
    assert parts.pg_clipfrac_low.item() == pytest.approx(((is_low * mask).sum() / mask.sum()).item(), rel=1e-6)
    assert parts.pg_clipfrac_high.item() == pytest.approx(((is_high * mask).sum() / mask.sum()).item(), rel=1e-6)
    assert parts.pg_clipfrac_low.item() > 0 and parts.pg_clipfrac_high.item() > 0
    total = parts.pg_clipfrac_low + parts.pg_clipfrac_high
    assert total.item() == pytest.approx(parts.pg_clipfrac.item(), rel=1e-6)


# ------------------------------------------------------------------------------------------ GSPO
def verl_gspo(logp, old, adv, mask, low, high):
    """verl's compute_policy_loss_gspo (verl/trainer/ppo/core_algos.py), written out: the sequence ratio carried
    by each token as sg(s_i) pi / sg(pi), clamped at 10 in log space, aggregated seq-mean-token-mean."""
    neg_kl = logp - old
    seq = torch.sum(neg_kl * mask, dim=-1) / torch.sum(mask, dim=-1).clamp(min=1)
    log_s = torch.clamp(logp - logp.detach() + seq.detach().unsqueeze(-1), max=10.0)
    s = torch.exp(log_s)
    pg1, pg2 = -adv[:, None] * s, -adv[:, None] * torch.clamp(s, 1 - low, 1 + high)
    losses = torch.maximum(pg1, pg2)
    loss = (torch.sum(losses * mask, dim=-1) / (torch.sum(mask, dim=-1) + 1e-8)).mean()
    clipfrac = (torch.gt(pg2, pg1).float() * mask).sum() / mask.sum()
    return loss, clipfrac


def test_gspo_is_verls_compute_policy_loss_gspo():
    logp, old, adv, mask = batch()
    low, high = 0.0003, 0.0004
    theirs, clipfrac = verl_gspo(logp, old, adv, mask, low, high)
    ours = grpo_loss(logp, old, adv, mask, low, agg="seq-mean-token-mean", clip_ratio_high=high, policy_loss="gspo")
    assert ours.loss.item() == pytest.approx(theirs.item(), rel=1e-6)
    torch.testing.assert_close(grad_of(ours.loss, logp), grad_of(theirs, logp))
    assert ours.pg_clipfrac.item() == pytest.approx(clipfrac.item(), rel=1e-6)
    # a sequence is clipped as a whole: every token of a response is clipped or none is
    ratio = torch.exp(((logp - old) * mask).sum(-1) / mask.sum(-1)).detach()
    clipped_rows = ((ratio > 1 + high) & (adv > 0)) | ((ratio < 1 - low) & (adv < 0))
    expected = (clipped_rows.float() * mask.sum(-1)).sum() / mask.sum()
    assert ours.pg_clipfrac.item() == pytest.approx(expected.item(), rel=1e-6)


def test_gspo_gradient_is_trls_sequence_level_importance_sampling():
    """TRL's importance_sampling_level="sequence": log_importance_weights = (log_ratio * mask).sum(-1) /
    mask.sum(-1).clamp(min=1), one weight per sequence, loss seq-mean-token-mean; same gradient as verl's."""
    logp, old, adv, mask = batch(1)
    low = high = 0.2  # wide enough that some sequences are unclipped
    log_w = (((logp - old) * mask).sum(-1) / mask.sum(-1).clamp(min=1)).unsqueeze(-1)
    coef_1 = torch.exp(log_w)
    coef_2 = torch.clamp(coef_1, 1 - low, 1 + high)
    per_token = -torch.min(coef_1 * adv[:, None], coef_2 * adv[:, None]).expand_as(mask)
    trl = ((per_token * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).mean()
    ours = grpo_loss(logp, old, adv, mask, low, agg="seq-mean-token-mean", policy_loss="gspo").loss
    assert ours.item() == pytest.approx(trl.item(), rel=1e-6)
    torch.testing.assert_close(grad_of(ours, logp), grad_of(trl, logp))


# ------------------------------------------------------------------------------------------ aggregation
def verl_agg_loss(loss_mat, loss_mask, mode, loss_scale_factor=None):
    """verl's agg_loss (core_algos.py) on one micro batch (dp_size 1, no global batch info), written out."""
    if mode == "token-mean":
        return (loss_mat * loss_mask).sum() / loss_mask.sum()
    if mode == "seq-mean-token-sum":
        seq = torch.sum(loss_mat * loss_mask, dim=-1)
        seq_mask = (torch.sum(loss_mask, dim=-1) > 0).float()
        return (seq * seq_mask).sum() / seq_mask.sum()
    if mode == "seq-mean-token-mean":
        n = torch.sum(loss_mask, dim=-1)
        seq = torch.sum(loss_mat * loss_mask, dim=-1) / (n + 1e-8)
        seq_mask = (n > 0).float()
        return (seq * seq_mask).sum() / seq_mask.sum()
    assert mode == "seq-mean-token-sum-norm"
    seq = torch.sum(loss_mat * loss_mask, dim=-1)
    return torch.sum(seq) / (loss_scale_factor or loss_mask.shape[-1])


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-sum", "seq-mean-token-mean"])
def test_aggregations_are_verls_agg_loss(mode):
    x, _, _, mask = batch()
    assert aggregate(x, mask, mode).item() == pytest.approx(verl_agg_loss(x, mask, mode).item(), rel=1e-6)


def test_seq_mean_token_sum_norm_is_dr_grpos_and_trls_dr_grpo_loss():
    """TRL's loss_type="dr_grpo": (per_token_loss * mask).sum() / (per_token_loss.size(0) * max_completion_length),
    the mean over responses of their token sum / a constant. verl's agg_loss sums the micro batch's responses
    instead: the same up to the factor of its number of responses."""
    x, _, _, mask = batch()
    max_tokens = 24
    trl = (x * mask).sum() / (x.size(0) * max_tokens)
    assert aggregate(x, mask, "seq-mean-token-sum-norm", max_tokens).item() == pytest.approx(trl.item(), rel=1e-6)
    verl = verl_agg_loss(x, mask, "seq-mean-token-sum-norm", loss_scale_factor=max_tokens)
    assert verl.item() == pytest.approx(trl.item() * x.size(0), rel=1e-6)


@pytest.mark.parametrize("mode", ["seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"])
@pytest.mark.parametrize("micro", [1, 2, 4, 6])
def test_each_seq_mean_mode_weighs_micro_batches_to_the_whole_mini_batch(mode, micro):
    """Accumulating micro batches (4 leaves a short last one) times micro_batch_weight gives the mode's loss
    and gradient over the whole mini batch: the weight belongs to the mode (Aggregation), so a mode cannot
    come with another mode's weight."""
    logp, old, adv, mask = batch()
    whole = grpo_loss(logp, old, adv, mask, 0.2, agg=mode, norm=24.0).loss
    chunks = list(torch.arange(len(LENGTHS)).split(micro))
    total = sum(
        grpo_loss(logp[c], old[c], adv[c], mask[c], 0.2, agg=mode, norm=24.0).loss
        * micro_batch_weight(mode, len(c), len(LENGTHS), len(chunks))
        for c in chunks
    )
    assert total.item() == pytest.approx(whole.item(), rel=1e-6)
    torch.testing.assert_close(grad_of(total, logp), grad_of(whole, logp))


def test_modes_differ_on_ragged_responses():
    x, _, _, mask = batch()
    values = {m: aggregate(x, mask, m, 24.0).item() for m in AGGREGATIONS}
    assert len({round(v, 6) for v in values.values()}) == len(values)


def test_token_level_loss_maps_onto_loss_agg_mode():
    """MindSpeed-RL's _compute_dapo_policy_loss: token_level_loss true = token-mean, false = seq-mean-token-mean;
    engine.loss_agg_mode, when set, decides."""
    assert loss_agg_mode(None, True) == "token-mean" and loss_agg_mode(None, None) == "token-mean"
    assert loss_agg_mode(None, False) == "seq-mean-token-mean"
    assert loss_agg_mode("seq-mean-token-sum-norm", False) == "seq-mean-token-sum-norm"
    assert load_config("grpo_trainer_tiny_cpu").engine.loss_agg_mode is None


# ------------------------------------------------------------------------------------------ advantages
def test_group_norm_no_std_is_verls_grpo_advantage_without_std():
    """verl's compute_grpo_outcome_advantage(norm_adv_by_std_in_grpo=False): scores - id2mean; TRL's
    scale_rewards="none": rewards - mean_grouped_rewards. A group of equal rewards gets exactly 0."""
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 0.1, 0.1, 0.1, 0.1, 1.1, 0.0, 0.1, 1.0])
    expected = rewards.view(-1, 4) - rewards.view(-1, 4).mean(1, keepdim=True)
    expected[1] = 0.0
    assert torch.equal(ADVANTAGE_ESTIMATORS.get("group_norm_no_std")(rewards, 4), expected.view(-1))
    assert group_mean_advantages(rewards, 4)[4:8].abs().max().item() == 0.0
    normed = ADVANTAGE_ESTIMATORS.get("group_norm")(rewards, 4)
    assert not torch.allclose(normed, expected.view(-1))


# ------------------------------------------------------------------------------------------ presets
def test_the_algorithm_presets_compose_and_pass_the_engine_checks():
    from grpo.engine.check import check_config

    assert group_options("algorithm") == ["dapo", "dr_grpo", "grpo", "gspo"]
    seen = {}
    for name in ("grpo", "dapo", "dr_grpo", "gspo"):
        cfg = load_config("grpo_trainer_tiny_cpu", [f"algorithm={name}"])
        assert cfg.algorithm == name and check_config(cfg) == []
        rl, eng = cfg.rl_config, cfg.engine
        seen[name] = (
            eng.policy_loss,
            eng.advantage_estimator,
            eng.loss_agg_mode,
            rl.clip_higher_enable,
            rl.init_kl_coef,
            rl.filter_groups_enable,
            rl.overlong_buffer_enable,
        )
    assert seen["grpo"] == ("vanilla", "group_norm", "token-mean", False, 0.01, False, False)  # the base's KL
    assert seen["dapo"] == ("vanilla", "group_norm", "token-mean", True, 0.0, True, True)
    assert seen["dr_grpo"] == ("vanilla", "group_norm_no_std", "seq-mean-token-sum-norm", False, 0.0, False, False)
    assert seen["gspo"] == ("gspo", "group_norm", "seq-mean-token-mean", True, 0.0, False, False)
    dapo = load_config("grpo_trainer_tiny_cpu", ["algorithm=dapo", "rl_config.clip_ratio_high=0.3"])
    assert (dapo.rl_config.clip_ratio_low, dapo.rl_config.clip_ratio_high) == (0.2, 0.3)  # a key override wins
    assert dapo.rl_config.rollout_max_tokens == dapo.generate_config.sampling_config.max_tokens
    assert dapo.rl_config.filter_groups_train_batch_size == dapo.megatron_training.global_batch_size


def test_an_unknown_algorithm_or_a_contradicting_key_is_one_line():
    with pytest.raises(UserError, match=r"algorithm: unknown algorithm 'dapoo' \(available: dapo, dr_grpo"):
        load_config("grpo_trainer_tiny_cpu", ["algorithm=dapoo"])
    with pytest.raises(UserError, match=r"engine\.loss_agg_mode=seq-mean-token-sum-norm contradicts"):
        load_config("grpo_trainer_tiny_cpu", ["algorithm=dr_grpo", "rl_config.token_level_loss=true"])


def test_a_spec_searches_the_algorithm_as_one_categorical():
    from optuna.distributions import CategoricalDistribution

    from grpo.sweep.spec.space import SearchSpace

    space = SearchSpace.from_entries({"algorithm": "choice(grpo, dapo, dr_grpo, gspo)"})
    (param,) = space.params
    assert isinstance(param.distribution, CategoricalDistribution)
    assert param.distribution.choices == ("grpo", "dapo", "dr_grpo", "gspo")
    with pytest.raises(
        UserError, match=r"search\.algorithm: unknown algorithm dapo2 \(no configs/algorithm/dapo2\.yaml\)"
    ):
        SearchSpace.from_entries({"algorithm": "choice(grpo, dapo2)"})
    with pytest.raises(UserError, match=r"search\.algorithm: algorithms are names"):
        SearchSpace.from_entries({"algorithm": "interval(0, 1)"})


def test_mindspeed_refuses_the_engine_only_algorithms(tmp_path):
    """MindSpeed-RL has no policy-loss, advantage or aggregation switch beyond token_level_loss (DAPO stage)."""
    from mindspeed_helpers import config, make_weights, settings_for

    from grpo.sweep.backends.mindspeed import MindSpeedBackend

    backend = MindSpeedBackend(settings_for(make_weights(tmp_path / "w")))
    assert not any("engine." in p for p in backend.check(config()))
    for override, line in (
        ("engine.policy_loss=gspo", ": engine.policy_loss: gspo is the embedded engine's; MindSpeed-RL has no such"),
        ("engine.advantage_estimator=group_norm_no_std", ": engine.advantage_estimator: group_norm_no_std is the"),
        ("engine.loss_agg_mode=seq-mean-token-sum-norm", ": engine.loss_agg_mode: seq-mean-token-sum-norm is the"),
    ):
        problems = backend.check(config(override))
        assert sum(line in p for p in problems) == 1, (override, problems)
    # grpo_actor_loss_func.py reads neither DAPO loss key (dapo_actor_loss_func.py does): refused, not ignored
    for override in ("+rl_config.clip_higher_enable=true", "+rl_config.token_level_loss=false"):
        key = override.split("=")[0].lstrip("+")
        problems = backend.check(config(override))
        assert sum(f": {key}: MindSpeed-RL's GRPO loss (cli/train_grpo.py) ignores it" in p for p in problems) == 1
    assert not any("token_level_loss" in p for p in backend.check(config("+rl_config.token_level_loss=true")))


# ------------------------------------------------------------------------------------------ training runs
def small(cache_dir: Path, **extra) -> list[str]:
    """3 iterations of 4 prompts x 4 samples, 2 epochs of 2 mini batches (not on-policy: clips can bite)."""
    values = {
        "engine.cache_dir": str(cache_dir),
        "engine.warm_start_steps": 30,
        "engine.task_size": 64,
        "engine.eval_every": None,
        "megatron_training.global_batch_size": 4,
        "megatron_training.train_iters": 3,
        "rl_config.n_samples_per_prompt": 4,
        "rl_config.mini_batch_size": 2,
        "actor_config.micro_batch_size": 4,
        "actor_config.lr": 1e-3,
        "generate_config.sampling_config.max_tokens": 16,
        **extra,
    }
    return [f"{k}={'null' if v is None else v}" for k, v in values.items()]


def run(cache_dir: Path, root: Path, name: str, *overrides: str) -> list[dict]:
    cfg = load_config("grpo_trainer_tiny_cpu", [*small(cache_dir), *overrides])
    train(cfg, root / name)
    return read_jsonl(root / name / "metrics.jsonl")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("algorithms")
    cache = tmp_path_factory.mktemp("cache")
    return lambda name, *overrides: run(cache, root, name, *overrides)


@pytest.fixture(scope="module")
def default(runs):
    return runs("default")


def _moved(default: list[dict], other: list[dict], key: str) -> bool:
    return any(not math.isclose(a[key], b[key], rel_tol=1e-6) for a, b in zip(default, other, strict=True))


def test_default_run_logs_the_clip_fractions(default):
    assert len(default) == 3
    for row in default:
        low, high, total = row["actor/pg_clipfrac_low"], row["actor/pg_clipfrac_high"], row["actor/pg_clipfrac"]
        assert low + high == pytest.approx(total, rel=1e-5, abs=1e-9)
    assert any(row["actor/pg_clipfrac"] > 0 for row in default)  # 2 epochs: the ratio departs from 1


def test_clip_higher_with_the_default_ratios_is_the_default_run(runs, default):
    same = runs("clip-0.2-0.2", "rl_config.clip_higher_enable=true", "rl_config.clip_ratio_low=0.2",
                "rl_config.clip_ratio_high=0.2")  # fmt: skip
    assert [r["actor/pg_loss"] for r in same] == [r["actor/pg_loss"] for r in default]


# key overrides -> the metrics they must move (iteration 1 samples the same rollout: only the update differs)
CHANGES = {
    "clip_higher_enable": (("rl_config.clip_higher_enable=true",), ("actor/pg_clipfrac",)),  # 0.1 / 0.1
    "clip_ratio_low": (
        ("rl_config.clip_higher_enable=true", "rl_config.clip_ratio_low=0.02", "rl_config.clip_ratio_high=0.2"),
        ("actor/pg_clipfrac_low",),
    ),
    "clip_ratio_high": (
        ("rl_config.clip_higher_enable=true", "rl_config.clip_ratio_low=0.2", "rl_config.clip_ratio_high=0.4"),
        ("actor/pg_clipfrac_high",),
    ),
    "token_level_loss": (("rl_config.token_level_loss=false",), ("actor/pg_loss",)),
    "seq-mean-token-mean": (("engine.loss_agg_mode=seq-mean-token-mean",), ("actor/pg_loss",)),
    "seq-mean-token-sum": (("engine.loss_agg_mode=seq-mean-token-sum",), ("actor/pg_loss",)),
    "seq-mean-token-sum-norm": (("engine.loss_agg_mode=seq-mean-token-sum-norm",), ("actor/pg_loss",)),
    "gspo": (("engine.policy_loss=gspo",), ("actor/pg_clipfrac", "actor/pg_loss")),
    "group_norm_no_std": (("engine.advantage_estimator=group_norm_no_std",), ("actor/pg_loss", "actor/grad_norm")),
}


@pytest.mark.parametrize("name", list(CHANGES))
def test_each_key_moves_its_metrics_in_a_3_iteration_run(runs, default, name):
    overrides, metrics = CHANGES[name]
    rows = runs(name, *overrides)
    assert rows[0]["grpo/score/mean"] == default[0]["grpo/score/mean"]  # the same first rollout
    for key in metrics:
        assert rows[0][key] != pytest.approx(default[0][key], rel=1e-6), key  # the first update already differs
    assert _moved(default, rows, "actor/grad_norm") or name == "token_level_loss"


def test_token_level_loss_false_is_seq_mean_token_mean(runs):
    a = runs("tl-false", "rl_config.token_level_loss=false")
    b = runs("seq-mean-token-mean", "engine.loss_agg_mode=seq-mean-token-mean")
    assert [r["actor/pg_loss"] for r in a] == [r["actor/pg_loss"] for r in b]


@pytest.mark.parametrize("name", ["grpo", "dapo", "dr_grpo", "gspo"])
def test_each_preset_trains(runs, default, name):
    rows = runs(f"algorithm-{name}", f"algorithm={name}")
    assert len(rows) == 3
    if name == "grpo":  # the base config's algorithm: the default run
        assert [r["actor/pg_loss"] for r in rows] == [r["actor/pg_loss"] for r in default]
    else:
        assert "actor/kl_loss" not in rows[0]  # no KL term: no reference pass
    if name == "dapo":
        # dynamic sampling and overlong shaping are on (DAPO-TRAINER's part, in Run.iteration)
        assert all("train/num_gen_batches" in r and "overlong_penalty/mean" in r for r in rows)
