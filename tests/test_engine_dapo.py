"""MindSpeed-RL's reward-side GRPO variants on the embedded engine (grpo/engine/dapo.py, variants.py, model.py):
dynamic sampling, overlong reward shaping, the KL penalty in the reward, hidden/attention dropout.

Each feature has a parity test on crafted tensors naming the MindSpeed-RL function it mirrors, and a 3-iteration
``train`` run with its key changed that differs from the default run in the metrics the key should move."""

import dataclasses
import math

import numpy as np
import pytest
import torch

from grpo._fs import read_jsonl
from grpo.config import load_config
from grpo.engine import dapo, train
from grpo.engine.check import check_config
from grpo.engine.loss import AdaptiveKLController, kl_penalty
from grpo.engine.model import ModelArgs, Qwen2, set_dropout
from grpo.engine.rollout import SamplingParams, generate, response_logprobs
from grpo.engine.trainer import Run
from grpo.errors import UserError
from grpo.sweep.spec.load import KNOWN_METRICS

ARGS = ModelArgs(
    num_layers=2, hidden_size=32, ffn_hidden_size=64, num_attention_heads=4, num_query_groups=2, padded_vocab_size=40
)


# ------------------------------------------------------------------ parity on crafted tensors
def mindspeed_kept_rows(metric_values: list[float], n: int) -> list[int]:
    """The rows ``DynamicSampling.dynamic_sampling`` keeps (mindspeed_rl/workers/dynamic_sampling.py), restated:
    the metric travels as a float32 tensor; a group stays when np.std > 0 or it has one response."""
    values = list(torch.tensor(metric_values, dtype=torch.float32))
    kept = []
    for idx in range(0, len(values), n):
        group = values[idx : idx + n]
        if np.std(group) > 0 or len(group) == 1:
            kept.extend(range(idx, idx + n))
    return kept


@pytest.mark.parametrize(
    "metric, n",
    [
        ([1.0, 1.0, 1.0, 1.0, -0.5, 1.0, -1.0, -1.0, -1.0, -1.0, -0.5, -1.0], 4),
        ([1 / 3] * 8 + [0.0, 1 / 3, 2 / 3, 1.0] * 2, 8),  # step-like fractions
        ([0.1] * 6, 3),  # equal values whose float mean is not exact
        ([1.0, -1.0, 0.5], 1),  # one response per group: always kept
    ],
)
def test_kept_groups_mirror_mindspeed_dynamic_sampling(metric, n):
    keep = dapo.kept_groups(metric, n)
    rows = [g * n + k for g in keep.nonzero().flatten().tolist() for k in range(n)]
    assert rows == mindspeed_kept_rows(metric, n)


def test_overlong_penalty_mirrors_mindspeed_compute_verifier_score():
    """mindspeed_rl/models/rule_verifier.py compute_verifier_score, the overlong_buffer_enable block."""
    lengths = torch.tensor([1, 7, 8, 9, 12, 15, 16])
    rollout_max_tokens, buffer, factor = 16, 8, 0.7
    scores = [1.0, -0.5, 1.1, -1.05, 0.95, -0.55, 1.1]
    expected_len = rollout_max_tokens - buffer
    exceed = [min(length.item() - expected_len, buffer) for length in lengths]
    overlong = [min(-length / buffer * factor, 0) for length in exceed]
    want = torch.tensor([s + r for s, r in zip(scores, overlong, strict=True)], dtype=torch.float32)
    penalty = dapo.overlong_penalty(lengths, rollout_max_tokens, buffer, factor)
    got = (torch.tensor(scores, dtype=torch.float64) + penalty).float()
    assert torch.equal(got, want)  # bit for bit, as the trainer adds it
    assert penalty[:3].eq(0).all() and penalty[-1] == -factor


def test_kl_in_reward_mirrors_mindspeed_apply_kl_penalty():
    """mindspeed_rl/trainer/utils/compute_utils.py apply_kl_penalty (token-level rewards, current_kl, the
    controller's update), summed per response as verl's compute_grpo_outcome_advantage (core_algos.py) does."""
    g = torch.Generator().manual_seed(0)
    lengths = torch.tensor([3, 5, 1, 4])
    R = 5
    mask = (torch.arange(R)[None] < lengths[:, None]).long()
    old = -torch.rand(4, R, generator=g) * mask
    ref = -torch.rand(4, R, generator=g) * mask
    scores = torch.tensor([1.0, -0.5, 0.95, -1.05])
    beta = 0.05
    for kind in ("kl", "low_var_kl"):
        # the upstream steps, restated
        kld = kl_penalty(old, ref, kind) * mask
        reward = torch.zeros(4, R)
        for i in range(4):
            reward[i, int(lengths[i].item()) - 1] = scores[i]
        want_tokens = reward - beta * kld
        per_row = torch.where(mask.bool(), kld, 0.0).sum(-1) / (mask.sum(-1) + 1e-8)
        want_kl = torch.mean(per_row, dim=0).item()
        tokens, per_response, current_kl = dapo.kl_in_reward(scores, old, ref, mask, lengths, kind, beta)
        torch.testing.assert_close(tokens, want_tokens)
        torch.testing.assert_close(per_response, scores - beta * kld.sum(-1))
        assert current_kl == pytest.approx(want_kl)
        ctrl = AdaptiveKLController(beta, kl_target=0.01, kl_horizon=100)
        ctrl.update(current_kl, n_steps=4)
        assert ctrl.value == pytest.approx(beta * (1 + float(np.clip(want_kl / 0.01 - 1, -0.2, 0.2)) * 4 / 100))


def test_dropout_only_in_training_passes_as_mindspeed_forward_and_update():
    """mindspeed_rl/models/base/base_training_engine.py: ``forward`` runs eval() under no_grad (no dropout),
    ``update`` runs train(); vLLM samples without dropout. Megatron drops the embeddings, the attention and MLP
    outputs (hidden_dropout) and the attention probabilities (attention_dropout)."""
    torch.manual_seed(0)
    plain = Qwen2(ARGS)
    dropped = Qwen2(ARGS)
    dropped.load_state_dict(plain.state_dict())
    set_dropout(dropped, 0.3, 0.3)
    ids = torch.randint(0, 40, (3, 7))
    dropped.train()
    with torch.no_grad():  # a log-prob pass: no dropout even in train mode
        assert torch.equal(dropped(ids), plain(ids))
    with torch.inference_mode():
        assert torch.equal(dropped(ids), plain(ids))
    dropped.eval()
    assert torch.equal(dropped(ids), plain(ids))
    dropped.train()
    a, b = dropped(ids), dropped(ids)
    assert not torch.allclose(a, plain(ids)) and not torch.allclose(a, b)  # fresh masks each training pass
    torch.manual_seed(1)
    first = dropped(ids)
    torch.manual_seed(1)
    assert torch.equal(first, dropped(ids))  # drawn from torch's global generator (checkpointed with the rng)
    # each kind on its own
    for hidden, attention in ((0.3, 0.0), (0.0, 0.3)):
        set_dropout(dropped, hidden, attention)
        assert not torch.allclose(dropped(ids), plain(ids))
    set_dropout(dropped, 0.0, 0.0)
    assert torch.equal(dropped(ids), plain(ids))
    # sampling with a dropout-configured policy in train mode draws exactly what the plain one draws
    set_dropout(dropped, 0.3, 0.3)
    prompts, params = [[1, 2, 3], [4, 5]], SamplingParams(max_tokens=6)
    one = generate(dropped, prompts, 2, params, [0], 39, 40, torch.Generator().manual_seed(3))
    two = generate(plain, prompts, 2, params, [0], 39, 40, torch.Generator().manual_seed(3))
    assert torch.equal(one.input_ids, two.input_ids)


def test_concatenated_groups_keep_their_logprobs():
    """Kept groups of two generation batches of different widths form one batch with the same log-probs."""
    torch.manual_seed(0)
    model = Qwen2(ARGS).eval()
    params = SamplingParams(max_tokens=5)
    parts = []
    for prompts, seed in (([[1, 2, 3], [4, 5]], 1), ([[6, 7, 8, 9, 10]], 2)):
        batch = generate(model, prompts, 2, params, [0], 39, 40, torch.Generator().manual_seed(seed))
        n = batch.input_ids.shape[0]
        parts.append(dapo.Scored(batch, ["t"] * n, ["l"] * n, torch.arange(n).float(), {"acc": [0.0] * n}, [0] * n))
    parts[0] = parts[0].groups(torch.tensor([1]), 2)  # keep the second group of the first batch
    whole = dapo.concat(parts, pad_id=39)
    assert whole.batch.groups.tolist() == [0, 0, 1, 1]
    with torch.no_grad():
        joint, _ = response_logprobs(model, whole.batch, 1.0, 40)
        for rows, part in ((slice(0, 2), parts[0]), (slice(2, 4), parts[1])):
            alone, _ = response_logprobs(model, part.batch, 1.0, 40)
            width = alone.shape[1]
            torch.testing.assert_close(joint[rows, :width] * part.batch.response_mask, alone * part.batch.response_mask)
            torch.testing.assert_close(joint[rows, :width], part.batch.logprobs, atol=1e-4, rtol=0)
    assert whole.scores.tolist() == [2.0, 3.0, 0.0, 1.0]


# ------------------------------------------------------------------ the config: refused combinations
@pytest.mark.parametrize(
    "overrides, key",
    [
        (["rl_config.filter_groups_enable=true", "rl_config.filter_groups_metric=format"], "filter_groups_metric"),
        (
            ["rl_config.filter_groups_enable=true", "rl_config.filter_groups_train_batch_size=40"],
            "filter_groups_train_batch_size",
        ),
        (["rl_config.overlong_buffer_enable=true", "rl_config.rollout_max_tokens=24"], "overlong_buffer"),
        (["rl_config.overlong_buffer_enable=true", "rl_config.overlong_buffer=4"], "rollout_max_tokens"),
        (["megatron_training.hidden_dropout=0.1", "engine.recompute_old_logprobs=true"], "recompute_old_logprobs"),
    ],
)
def test_what_the_engine_cannot_carry_out_is_refused_in_one_line(overrides, key):
    problems = check_config(load_config("grpo_trainer_tiny_cpu", overrides))
    assert len(problems) == 1 and f".{key}: " in problems[0], problems


def test_the_shipped_config_runs_without_dropout():
    cfg = load_config("grpo_trainer_tiny_cpu", [])
    assert cfg.megatron_training.hidden_dropout == 0.0 and cfg.megatron_training.attention_dropout == 0.0


# ------------------------------------------------------------------ 3-iteration runs against the default
@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("grpo-cache")


def small(cache_dir, *extra: str) -> list[str]:
    """4 prompts x 4 samples, 2 optimizer steps per iteration; a 100-step warm start, about one group in four
    has varying ``acc`` scores (so dynamic sampling has something to drop and something to keep)."""
    values = {
        "engine.cache_dir": str(cache_dir),
        "engine.warm_start_steps": 100,
        "engine.task_size": 64,
        "megatron_training.global_batch_size": 4,
        "rl_config.n_samples_per_prompt": 4,
        "rl_config.mini_batch_size": 2,
        "actor_config.micro_batch_size": 4,
        "megatron_training.train_iters": 3,
        "generate_config.sampling_config.max_tokens": 16,
        "actor_config.lr": 2e-4,
        "engine.eval_every": "null",
    }
    return [f"{k}={v}" for k, v in values.items()] + list(extra)


def run(cache_dir, path, *extra: str) -> list[dict]:
    train(load_config("grpo_trainer_tiny_cpu", small(cache_dir, *extra)), path)
    rows = read_jsonl(path / "metrics.jsonl")
    # a spec's objective may name the variants' metrics without the "not a metric the engine logs" warning
    ours = {k for r in rows for k in r if k.split("/")[0] in ("train", "dynamic_sampling", "overlong_penalty")}
    ours |= {k for r in rows for k in r if k.startswith("actor/reward_kl")}
    assert ours <= set(KNOWN_METRICS), sorted(ours - set(KNOWN_METRICS))
    return rows


@pytest.fixture(scope="module")
def default(cache_dir, tmp_path_factory):
    return run(cache_dir, tmp_path_factory.mktemp("default"))


ACTOR = ("actor/pg_loss", "actor/grad_norm", "actor/entropy")


def test_dynamic_sampling_trains_on_groups_whose_metric_varies(cache_dir, tmp_path, default):
    rows = run(
        cache_dir,
        tmp_path,
        "rl_config.filter_groups_enable=true",
        "rl_config.filter_groups_metric=acc",
        "rl_config.filter_groups_train_batch_size=2",
        "rl_config.filter_groups_max_batches=16",
    )
    assert any(r["grpo/zero_variance_groups"] > 0 for r in default)  # the default trains on tied groups
    for r in rows:
        assert r["grpo/zero_variance_groups"] == 0.0  # acc varies, so the total (acc + 0.1 format) does
        assert 1 <= r["train/num_gen_batches"] <= 16
        assert 2 <= r["dynamic_sampling/kept_groups"] <= 4 * r["train/num_gen_batches"]
        generated_groups = 4 * r["train/num_gen_batches"]
        assert r["dynamic_sampling/kept_fraction"] == r["dynamic_sampling/kept_groups"] / generated_groups
        trained = r["response_length/mean"] * 8  # 2 groups of 4
        if r["train/num_gen_batches"] > 1:  # the dropped groups' tokens are counted in the cost
            assert r["generated_tokens"] > trained
    assert any(r["train/num_gen_batches"] > 1 for r in rows), rows
    assert "train/num_gen_batches" not in default[0]
    assert any(rows[i][k] != default[i][k] for i in range(3) for k in ("grpo/score/mean", *ACTOR))


def test_dynamic_sampling_stops_as_mindspeed_when_too_few_groups_are_kept(cache_dir, tmp_path):
    """RayDAPOTrainer.dynamic_sampling raises once filter_groups_max_batches batches kept too few groups."""
    cfg = load_config(
        "grpo_trainer_tiny_cpu",
        small(
            cache_dir,
            "rl_config.filter_groups_enable=true",
            "rl_config.filter_groups_train_batch_size=4",
            "rl_config.filter_groups_max_batches=1",
        ),
    )
    r = Run(cfg, tmp_path)
    draws = []

    def draw(state, timing):
        draws.append(1)
        n = 4
        batch = generate(
            r.policy, [r.prompt_ids[r.train_set[0].prompt]] * 4, n, r.sampling, r.tokenizer.stop_ids,
            r.tokenizer.pad_id, r.tokenizer.vocab_size, r.generator,
        )  # fmt: skip
        acc = [1.0, -1.0, -1.0, -1.0] + [-1.0] * 12  # one informative group of four
        verifiers = {"acc": acc, "strict_format": acc}
        return dapo.Scored(batch, [""] * 16, ["1"] * 16, torch.tensor(acc), verifiers, [0] * 16)

    r.drawer.draw = draw
    with pytest.raises(UserError, match="filter_groups_max_batches: 1 generation batches kept 1 groups"):
        r.iteration()
    assert len(draws) == 1
    # no limit (<= 0): generation goes on until enough groups are kept; the surplus is dropped
    r.drawer.v = dataclasses.replace(r.drawer.v, filter_max_batches=0)
    draws.clear()
    scored, metrics, _ = r.drawer.dynamic_sampling(r.state, {"timing/rollout": 0.0, "timing/reward": 0.0})
    assert len(draws) == 4 and metrics["train/num_gen_batches"] == 4.0
    assert scored.batch.groups.tolist() == [g for g in range(4) for _ in range(4)]
    assert metrics["dynamic_sampling/kept_fraction"] == 4 / 16


def test_overlong_shaping_lowers_the_reward_of_long_responses(cache_dir, tmp_path, default):
    rows = run(
        cache_dir,
        tmp_path,
        "rl_config.overlong_buffer_enable=true",
        "rl_config.overlong_buffer=8",
        "rl_config.overlong_buffer_penalty_factor=1.0",
        "rl_config.rollout_max_tokens=16",
    )
    first, base = rows[0], default[0]
    # the same responses (the first rollout precedes any update) ...
    for key in ("response_length/mean", "acc_rewards/mean", "strict_format_rewards/mean"):
        assert first[key] == base[key]
    # ... with the penalty in the reward, so in the advantages and the update
    assert first["overlong_penalty/mean"] < 0
    assert first["grpo/score/mean"] == pytest.approx(base["grpo/score/mean"] + first["overlong_penalty/mean"], abs=1e-6)
    assert any(first[k] != base[k] for k in ACTOR)
    assert "overlong_penalty/mean" not in base


def test_kl_in_reward_replaces_the_kl_loss(cache_dir, tmp_path, default):
    rows = run(cache_dir, tmp_path, "rl_config.use_kl_in_reward=true", "rl_config.init_kl_coef=0.05")
    assert all("actor/kl_loss" in r for r in default)
    for r in rows:
        assert "actor/kl_loss" not in r and r["actor/reward_kl_penalty_coeff"] == 0.05
    assert rows[0]["grpo/score/mean"] == default[0]["grpo/score/mean"]  # the verifier scores are unchanged
    assert rows[0]["actor/reward_kl_penalty"] == pytest.approx(0.0, abs=1e-4)  # the policy is the reference
    assert rows[1]["actor/reward_kl_penalty"] > 1e-4  # then it has moved: the penalty bites
    assert any(rows[i][k] != default[i][k] for i in range(3) for k in ACTOR)


def test_kl_in_reward_drives_the_adaptive_controller(cache_dir, tmp_path):
    rows = run(
        cache_dir,
        tmp_path,
        "rl_config.use_kl_in_reward=true",
        "rl_config.kl_ctrl_type=adaptive",
        "rl_config.kl_target=1e-6",
        "rl_config.kl_horizon=16",
    )
    coef = [r["actor/reward_kl_penalty_coeff"] for r in rows]
    # iteration 1's KL is ~0 (the policy is the reference); then far above the target: +20 % x 16/16
    assert coef[0] == 0.01 and coef[2] == pytest.approx(coef[1] * 1.2)


def test_dropout_changes_the_update_not_the_rollout(cache_dir, tmp_path, default):
    rows = run(cache_dir, tmp_path, "megatron_training.hidden_dropout=0.1", "megatron_training.attention_dropout=0.1")
    first, base = rows[0], default[0]
    for key in ("grpo/score/mean", "response_length/mean", "acc_rewards/mean"):
        assert first[key] == base[key]  # sampling has no dropout
    for key in ACTOR:
        assert first[key] != base[key]


def test_dropout_fully_on_policy_takes_old_logprobs_from_the_update_as_mindspeed(cache_dir, tmp_path):
    """One optimizer step per iteration: MindSpeed-RL skips the old log-prob pass (set_actor_log_prob_skip_flag),
    so the ratio is exactly 1 even with dropout; the sampler's dropout-free log-probs would not give that."""
    rows = run(
        cache_dir,
        tmp_path,
        "megatron_training.hidden_dropout=0.2",
        "rl_config.mini_batch_size=4",
        "rl_config.epochs=1",
        "megatron_training.train_iters=1",
    )
    assert rows[0]["actor/pg_clipfrac"] == 0.0 and rows[0]["actor/ppo_kl"] == 0.0
    assert math.isfinite(rows[0]["actor/pg_loss"])


def test_resume_with_every_variant_on_equals_the_uninterrupted_run(cache_dir, tmp_path):
    """Dropout masks (torch's generator), the prompts dynamic sampling consumed and the KL-in-reward
    controller's coefficient all come back from the checkpoint: iteration 3 reruns exactly."""
    variants = [
        "megatron_training.hidden_dropout=0.1",
        "rl_config.filter_groups_enable=true",
        "rl_config.filter_groups_train_batch_size=2",
        "rl_config.filter_groups_max_batches=16",
        "rl_config.overlong_buffer_enable=true",
        "rl_config.overlong_buffer=8",
        "rl_config.rollout_max_tokens=16",
        "rl_config.use_kl_in_reward=true",
        "rl_config.kl_ctrl_type=adaptive",
        "rl_config.kl_target=1e-6",
        "rl_config.kl_horizon=16",
        "megatron_training.save_interval=1",
        "actor_config.no_load_optim=false",
        "actor_config.no_load_rng=false",
    ]

    def overrides(name: str) -> list[str]:
        return small(cache_dir, *variants, f"actor_config.save={tmp_path / name}")

    expected = run(cache_dir, tmp_path / "whole", *variants, f"actor_config.save={tmp_path / 'ckpt-whole'}")
    stopped = train(load_config("grpo_trainer_tiny_cpu", overrides("ckpt")), tmp_path / "run", lambda it, m: it == 2)
    assert stopped["iterations"] == 2
    resumed = [*overrides("ckpt"), f"actor_config.load={tmp_path / 'ckpt'}", "actor_config.finetune=false"]
    train(load_config("grpo_trainer_tiny_cpu", resumed), tmp_path / "run")
    rows = read_jsonl(tmp_path / "run" / "metrics.jsonl")

    def comparable(rs):
        return [{k: v for k, v in r.items() if not (k.startswith("timing/") or k.endswith("_tps"))} for r in rs]

    assert [r["iteration"] for r in rows] == [1, 2, 3]
    assert comparable(rows) == comparable(expected)
