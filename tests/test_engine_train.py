"""Real GRPO runs on the tiny model: metrics, resume after an interruption (and after SIGKILL), bad input,
atomic checkpoints, NaN, loading HF folders and user datasets, and a short learning run."""

import dataclasses
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch

from grpo._fs import CHECKPOINT_TRACKER
from grpo._fs import read_jsonl as read_metrics
from grpo.config import load_config
from grpo.engine import TrainingDiverged, train
from grpo.engine import checkpoint as ckpt
from grpo.engine.metrics import close_logger
from grpo.engine.rollout import generate, response_logprobs
from grpo.engine.trainer import Run
from grpo.errors import UserError
from engine_helpers import comparable, small

REQUIRED = [
    "grpo/score/mean",
    "grpo/score/max",
    "grpo/score/min",
    "acc_rewards/mean",
    "strict_format_rewards/mean",
    "actor/pg_loss",
    "actor/pg_clipfrac",
    "actor/kl_loss",
    "actor/entropy",
    "actor/grad_norm",
    "actor/lr",
    "actor/kl_coef",
    "response_length/mean",
    "response_length/max",
    "response_length/min",
    "prompt_length/mean",
    "timing/all",
    "timing/rollout",
    "timing/update",
    "e2e_tps",
]


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("grpo-cache")


@pytest.fixture(scope="module")
def uninterrupted(cache_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("uninterrupted")
    cfg = load_config("grpo_trainer_tiny_cpu", small(cache_dir, **{"actor_config.save": str(root / "ckpt")}))
    summary = train(cfg, root / "run")
    return summary, read_metrics(root / "run" / "metrics.jsonl")


def test_metrics_lines_have_mindspeed_names(uninterrupted):
    summary, rows = uninterrupted
    assert [r["iteration"] for r in rows] == [1, 2, 3, 4]
    for name in REQUIRED:
        assert name in rows[0], name
    assert all(r["actor/pg_clipfrac"] >= 0 for r in rows)
    assert all(r["actor/kl_loss"] >= 0 for r in rows) and rows[-1]["actor/kl_loss"] > 0  # low_var_kl >= 0
    assert summary["stopped_early"] is False and summary["iterations"] == 4
    assert Path(summary["checkpoint"]).name == "iter_0000004"


def test_resume_after_an_interruption_equals_the_uninterrupted_run(cache_dir, tmp_path, uninterrupted):
    _, expected = uninterrupted
    overrides = small(cache_dir, **{"actor_config.save": str(tmp_path / "ckpt")})
    stopped = train(
        load_config("grpo_trainer_tiny_cpu", overrides), tmp_path / "run", callback=lambda it, m: it == 3
    )  # stop after line 3; the last checkpoint is iteration 2
    assert stopped["stopped_early"] and stopped["iterations"] == 3
    assert (tmp_path / "ckpt" / CHECKPOINT_TRACKER).read_text() == "2"
    resumed = load_config(
        "grpo_trainer_tiny_cpu", overrides + [f"actor_config.load={tmp_path / 'ckpt'}", "actor_config.finetune=false"]
    )
    summary = train(resumed, tmp_path / "run")
    assert summary["start_iteration"] == 2
    rows = read_metrics(tmp_path / "run" / "metrics.jsonl")
    assert [r["iteration"] for r in rows] == [1, 2, 3, 4]  # iteration 3 rerun, not duplicated
    assert comparable(rows) == comparable(expected)


def test_resume_after_sigkill_equals_the_uninterrupted_run(cache_dir, tmp_path, uninterrupted):
    _, expected = uninterrupted
    overrides = small(cache_dir, **{"actor_config.save": str(tmp_path / "ckpt")})
    script = textwrap.dedent(f"""
        import time
        from pathlib import Path
        from grpo.config import load_config
        from grpo.engine import train
        def hang(iteration, metrics):
            if iteration == 3:
                time.sleep(600)  # the test kills us here, after checkpoint 2 and metrics line 3
        train(load_config("grpo_trainer_tiny_cpu", {overrides!r}), Path({str(tmp_path / "run")!r}), callback=hang)
    """)
    proc = subprocess.Popen([sys.executable, "-c", script])
    try:
        deadline = time.time() + 120
        while len(read_metrics(tmp_path / "run" / "metrics.jsonl")) < 3:
            assert proc.poll() is None, "the training subprocess ended early"
            assert time.time() < deadline, "the training subprocess did not reach iteration 3"
            time.sleep(0.2)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        if proc.poll() is None and proc.returncode is None:
            proc.kill()  # a failed wait above must not leave the trainer running
        proc.wait()
    assert proc.returncode == -signal.SIGKILL
    resumed = load_config(
        "grpo_trainer_tiny_cpu", overrides + [f"actor_config.load={tmp_path / 'ckpt'}", "actor_config.finetune=false"]
    )
    train(resumed, tmp_path / "run")
    rows = read_metrics(tmp_path / "run" / "metrics.jsonl")
    assert comparable(rows) == comparable(expected)
    assert sorted(p.name for p in (tmp_path / "ckpt").iterdir()) == ["iter_0000002", "iter_0000004", CHECKPOINT_TRACKER]


def test_checkpoint_is_a_loadable_hf_folder_and_honours_no_save_flags(cache_dir, tmp_path):
    cfg = load_config(
        "grpo_trainer_tiny_cpu",
        small(
            cache_dir,
            **{
                "actor_config.save": str(tmp_path / "ckpt"),
                "megatron_training.train_iters": 1,
                "actor_config.no_save_optim": True,
                "actor_config.no_save_rng": True,
            },
        ),
    )
    train(cfg, tmp_path / "run")
    folder = tmp_path / "ckpt" / "iter_0000001"
    assert sorted(p.name for p in folder.iterdir()) == [
        "config.json",
        "model.safetensors",
        "reference.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
        "trainer_state.json",
    ]
    transformers = pytest.importorskip("transformers")
    model = transformers.Qwen2ForCausalLM.from_pretrained(folder)
    assert model.config.hidden_size == cfg.model_arch.hidden_size
    # resuming from it while asking for the optimizer state it lacks is a user error
    resume = load_config(
        "grpo_trainer_tiny_cpu",
        small(
            cache_dir,
            **{
                "actor_config.load": str(tmp_path / "ckpt"),
                "actor_config.finetune": False,
                "megatron_training.train_iters": 2,
            },
        ),
    )
    with pytest.raises(UserError, match="no_load_optim: the checkpoint has no optimizer state"):
        train(resume, tmp_path / "run2")


def test_a_failed_save_leaves_nothing_half_written(cache_dir, tmp_path, monkeypatch):
    cfg = load_config(
        "grpo_trainer_tiny_cpu",
        small(
            cache_dir,
            **{
                "actor_config.save": str(tmp_path / "ckpt"),
                "megatron_training.save_interval": 1,
                "megatron_training.train_iters": 2,
            },
        ),
    )
    real_save, calls = torch.save, []

    def failing_save(obj, path, *a, **k):
        calls.append(path)
        if len(calls) == 3:  # optim.pt of the second checkpoint
            raise OSError("disk full")
        return real_save(obj, path, *a, **k)

    monkeypatch.setattr(torch, "save", failing_save)
    with pytest.raises(OSError, match="disk full"):
        train(cfg, tmp_path / "run")
    assert sorted(p.name for p in (tmp_path / "ckpt").iterdir()) == ["iter_0000001", CHECKPOINT_TRACKER]
    assert (tmp_path / "ckpt" / CHECKPOINT_TRACKER).read_text() == "1"


def test_nan_loss_raises_training_diverged(cache_dir, tmp_path):
    cfg = load_config(
        "grpo_trainer_tiny_cpu",
        small(
            cache_dir,
            **{
                "actor_config.lr": 1e30,
                "actor_config.clip_grad": 0.0,
                "actor_config.save": str(tmp_path / "ckpt"),
                "megatron_training.save_interval": 1,
                "megatron_training.train_iters": 6,
            },
        ),
    )
    with pytest.raises(TrainingDiverged, match="is (nan|inf)"):
        train(cfg, tmp_path / "run")
    leftovers = [p.name for p in (tmp_path / "ckpt").iterdir()] if (tmp_path / "ckpt").exists() else []
    assert not [n for n in leftovers if n.startswith(".tmp")]
    assert "TrainingDiverged" in (tmp_path / "run" / "train.log").read_text()


@pytest.mark.parametrize(
    "extra, message",
    [
        (
            {"actor_config.load": "/nonexistent/ckpt"},
            r"/nonexistent/ckpt: actor_config.load: no such checkpoint folder",
        ),
        ({"model.tiny_qwen.padded_vocab_size": 64}, r"model.tiny_qwen.padded_vocab_size: the tokenizer has \d+ tokens"),
        (
            {"engine.task": "dataset", "megatron_training.data_path": "/nonexistent/data"},
            r"/nonexistent/data: megatron_training.data_path: no such dataset",
        ),
        ({"rl_config.adv_estimator": "gae"}, r"rl_config.adv_estimator: gae needs a critic"),
    ],
)
def test_bad_input_is_a_user_error(cache_dir, tmp_path, extra, message):
    cfg = load_config("grpo_trainer_tiny_cpu", small(cache_dir, **extra))
    with pytest.raises(UserError, match=message):
        train(cfg, tmp_path / "run")
    assert not (tmp_path / "run" / "metrics.jsonl").exists()


def test_empty_or_malformed_dataset_is_a_user_error(cache_dir, tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    cfg = load_config(
        "grpo_trainer_tiny_cpu",
        small(cache_dir, **{"engine.task": "dataset", "megatron_training.data_path": str(empty)}),
    )
    with pytest.raises(UserError, match=f"{empty}: megatron_training.data_path: the dataset is empty"):
        train(cfg, tmp_path / "run")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "1+1=?", "label": "2"}\n{"prompt": "2+2=?"}\n')
    cfg = load_config(
        "grpo_trainer_tiny_cpu", small(cache_dir, **{"engine.task": "dataset", "megatron_training.data_path": str(bad)})
    )
    with pytest.raises(UserError, match=f"{bad}:2: megatron_training.data_path: mindspeed record: record has no label"):
        train(cfg, tmp_path / "run")


def test_user_parquet_dataset_and_a_hf_folder_as_the_policy(cache_dir, tmp_path):
    """A HF Qwen2 folder of the tiny architecture (weights + tokenizer) trains on a user parquet file."""
    pd = pytest.importorskip("pandas")
    transformers = pytest.importorskip("transformers")
    from grpo.engine.tokenizer import build_task_tokenizer

    pd.DataFrame(
        {"prompt": [f"{a}+{a}=?" for a in range(10, 26)], "label": [str(2 * a) for a in range(10, 26)]}
    ).to_parquet(tmp_path / "train.parquet")
    cfg = load_config(
        "grpo_trainer_tiny_cpu",
        small(
            cache_dir,
            **{
                "engine.task": "dataset",
                "megatron_training.data_path": str(tmp_path / "train.parquet"),
                "actor_config.load": str(tmp_path / "hf"),
                "megatron_training.train_iters": 1,
            },
        ),
    )
    arch = cfg.model_arch
    hf_model = transformers.Qwen2ForCausalLM(
        transformers.Qwen2Config(
            vocab_size=arch.padded_vocab_size,
            hidden_size=arch.hidden_size,
            intermediate_size=arch.ffn_hidden_size,
            num_hidden_layers=arch.num_layers,
            num_attention_heads=arch.num_attention_heads,
            num_key_value_heads=arch.num_query_groups,
            tie_word_embeddings=not arch.untie_embeddings_and_output_weights,
        )
    )
    hf_model.save_pretrained(tmp_path / "hf")
    build_task_tokenizer().save(tmp_path / "hf")
    summary = train(cfg, tmp_path / "run")
    assert summary["iterations"] == 1
    assert "loaded weights from" in (tmp_path / "run" / "train.log").read_text()


def test_tensorboard_events_are_written(cache_dir, tmp_path):
    cfg = load_config(
        "grpo_trainer_tiny_cpu",
        small(cache_dir, **{"rl_config.use_tensorboard": True, "megatron_training.train_iters": 1}),
    )
    train(cfg, tmp_path / "run")
    assert list((tmp_path / "run" / "tensorboard").glob("events.out.tfevents.*"))


def test_adaptive_kl_coefficient_really_moves(cache_dir, tmp_path):
    cfg = load_config(
        "grpo_trainer_tiny_cpu",
        small(
            cache_dir,
            **{
                "rl_config.kl_ctrl_type": "adaptive",
                "rl_config.init_kl_coef": 0.05,
                "rl_config.kl_target": 1.0,
                "rl_config.kl_horizon": 16,
                "megatron_training.train_iters": 3,
            },
        ),
    )
    train(cfg, tmp_path / "run")
    coefs = [r["actor/kl_coef"] for r in read_metrics(tmp_path / "run" / "metrics.jsonl")]
    # KL far below the target: the error clips at -0.2 and each iteration of 16 responses scales by 0.8
    assert coefs == pytest.approx([0.05, 0.05 * 0.8, 0.05 * 0.8 * 0.8])


def test_held_out_evaluation_metrics_and_samples(cache_dir, tmp_path):
    """The base policy is evaluated as iteration 0, then every eval_every iterations and at the end:
    accuracy greedy and sampled, with the number of prompts; a few responses go to samples.jsonl."""
    cfg = load_config(
        "grpo_trainer_tiny_cpu",
        small(
            cache_dir,
            **{"engine.eval_every": 3, "engine.eval_size": 8, "generate_config.sampling_config.max_tokens": 1},
        ),
    )
    summary = train(cfg, tmp_path / "run")
    rows = read_metrics(tmp_path / "run" / "metrics.jsonl")
    assert [r["iteration"] for r in rows] == [0, 1, 2, 3, 4]
    assert set(rows[0]) == {"iteration", "eval/acc", "eval/acc_greedy", "eval/prompts", "eval/strict_format"}
    assert [r["iteration"] for r in rows if "eval/acc_greedy" in r] == [0, 3, 4]  # every 3, and the last
    assert all(r["eval/prompts"] == 8 for r in rows if "eval/prompts" in r)
    assert summary["eval/acc_greedy_base"] == rows[0]["eval/acc_greedy"]
    trained = [r for r in rows if "grpo/score/mean" in r]
    # max_tokens 1 cuts off every response that does not stop at once; none can hold an answer (acc reads even
    # an unclosed "\boxed{8", as MindSpeed-RL does, so 2 tokens could), so every group's rewards are equal
    assert all(0 < r["response_length/truncated"] <= 1 for r in trained)
    assert all(r["grpo/zero_variance_groups"] == 1.0 for r in trained)
    # A spec's objective may name any of them without the "not a metric the embedded engine logs" warning.
    from grpo.sweep.spec.load import KNOWN_METRICS

    logged = {k for r in rows for k in r if k != "iteration" and not k.endswith("_rewards/mean")}
    assert logged <= set(KNOWN_METRICS), sorted(logged - set(KNOWN_METRICS))
    samples = read_metrics(tmp_path / "run" / "samples.jsonl")
    assert sorted({(s["iteration"], s["kind"]) for s in samples}) == [
        (i, k) for i in (0, 3, 4) for k in ("greedy", "sampled")
    ]
    assert len(samples) == 3 * 2 * 4  # 4 prompts, greedy and sampled, at each evaluation
    from grpo.engine import rewards

    for s in samples:
        assert s["correct"] == rewards.is_correct(s["response"], s["label"])
        assert s["reward"] == pytest.approx(
            rewards.score([s["response"]], [s["label"]], ["acc", "strict_format"], [1.0, 0.1])[0][0]
        )


def test_truncated_fraction_counts_responses_without_a_stop_token():
    from grpo.engine.rollout import Rollout
    from grpo.engine.trainer import truncated_fraction

    stop, pad = 9, 0
    responses = torch.tensor([[5, 9, pad], [5, 6, 7], [9, pad, pad], [5, 6, pad]])  # the last: cut at max_tokens 2
    lengths = torch.tensor([2, 3, 1, 2])
    batch = Rollout(
        responses,
        torch.ones_like(responses),
        0,
        torch.ones(4, 3),
        torch.zeros(4, 3),
        torch.zeros(4, dtype=torch.long),
        lengths,
    )
    assert truncated_fraction(batch, [stop]) == 0.5


def test_every_seed_starts_from_the_same_base_and_held_out_set(cache_dir, tmp_path):
    """engine.task_seed, not the run's seed, fixes the warm start and the split: seeds vary the RL only."""
    rows = {}
    for seed in (7, 8):
        cfg = load_config(
            "grpo_trainer_tiny_cpu",
            small(
                cache_dir,
                **{
                    "engine.eval_every": 1,
                    "engine.eval_size": 8,
                    "megatron_training.train_iters": 1,
                    "megatron_training.seed": seed,
                    "generate_config.sampling_config.seed": seed,
                },
            ),
        )
        train(cfg, tmp_path / str(seed))
        rows[seed] = read_metrics(tmp_path / str(seed) / "metrics.jsonl")
    assert rows[7][0] == rows[8][0]  # the base policy's evaluation
    assert (
        rows[7][1]["grpo/score/mean"] != rows[8][1]["grpo/score/mean"]
        or rows[7][1]["actor/pg_loss"] != rows[8][1]["actor/pg_loss"]
    )  # different batches and samples


@pytest.mark.slow
def test_grpo_raises_accuracy_on_a_fixed_prompt_set(cache_dir, tmp_path):
    """The real warm start, then GRPO on 16 prompts it answers right about a third of the time."""
    cfg = load_config(
        "grpo_trainer_tiny_cpu",
        [
            f"engine.cache_dir={cache_dir}",
            "engine.task_size=16",
            "megatron_training.global_batch_size=16",
            "rl_config.mini_batch_size=8",
            "megatron_training.train_iters=24",
            "actor_config.lr=2e-4",
            "actor_config.lr_warmup_fraction=0.05",
            "engine.eval_every=null",
        ],
    )
    train(cfg, tmp_path / "run")
    acc = [r["grpo/acc/mean"] for r in read_metrics(tmp_path / "run" / "metrics.jsonl")]
    first, last = sum(acc[:6]) / 6, sum(acc[-6:]) / 6
    assert 0.05 < first < 0.8, acc  # the warm-started base has signal and room
    assert last > first + 0.1, acc


def test_update_accumulates_the_loss_over_micro_batches_as_mindspeed(cache_dir, tmp_path):
    """Run._update on one mini batch of 16 responses cut to very different lengths, its gradient (read at
    the optimizer step) and its actor/* stats against MindSpeed-RL's GRPO loss written out in
    test_engine_math.mindspeed_micro_batch (grpo_actor_loss_func.py _compute_grpo_policy_loss), over
    consecutive micro batches (base_training_engine.py _split_batches), each divided by their number
    (Megatron schedules.py forward_step_calc_loss), stats averaged over micro batches (update() +
    metrics_post_processing). seq-mean-token-mean gives one gradient whatever the micro batch size."""
    from test_engine_math import mindspeed_micro_batch

    cfg = load_config(
        "grpo_trainer_tiny_cpu",
        small(
            cache_dir,
            **{
                "rl_config.mini_batch_size": 4,
                "rl_config.epochs": 1,
                "actor_config.clip_grad": 0,
                "rl_config.init_kl_coef": 0.05,
                "rl_config.entropy_coeff": 0.01,
            },
        ),
    )
    run = Run(cfg, tmp_path)
    try:
        rl, n = cfg.rl_config, cfg.rl_config.n_samples_per_prompt
        batch = generate(
            run.policy,
            [run.prompt_ids[e.prompt] for e in run.train_set[:4]],
            n,
            run.sampling,
            run.tokenizer.stop_ids,
            run.tokenizer.pad_id,
            run.tokenizer.vocab_size,
            run.generator,
        )
        g = torch.Generator().manual_seed(0)
        lengths = torch.minimum(batch.response_lengths, torch.tensor([1, 99, 3, 6] * 4))  # unsorted in a group
        width = batch.response_mask.shape[1]
        mask = (torch.arange(width)[None, :] < lengths[:, None]).float()
        old = (batch.logprobs + 0.3 * torch.randn(batch.logprobs.shape, generator=g)) * mask  # ratios clip
        batch = dataclasses.replace(batch, response_mask=mask, response_lengths=lengths, logprobs=old)
        ref = batch.logprobs + 0.2 * torch.randn(batch.logprobs.shape, generator=g)
        adv = torch.randn(len(lengths), generator=g)
        params = [p for p in run.policy.parameters() if p.requires_grad]
        seen: list[list[torch.Tensor]] = []
        run.optimizer.step = lambda *a, **k: seen.append([p.grad.clone() for p in params])  # the policy stays

        def update(agg: str, micro: int) -> tuple[list[torch.Tensor], dict]:
            run.cfg.engine.loss_agg_mode, run.cfg.actor_config.micro_batch_size = agg, micro
            metrics = run._update(batch, adv, ref)
            return seen[-1], metrics

        for micro in (2, 8):  # consecutive rows: length-grouped micro batches would differ
            grads, metrics = update("token-mean", micro)
            logp, ent = response_logprobs(
                run.policy, batch, run.temperature, run.tokenizer.vocab_size, with_entropy=True, entropy_grad=True
            )
            chunks = torch.arange(len(lengths)).split(micro)
            losses, stats = zip(
                *(
                    mindspeed_micro_batch(
                        logp[c],
                        old[c],
                        ref[c],
                        ent[c],
                        adv[c],
                        mask[c],
                        rl.clip_ratio,
                        rl.init_kl_coef,
                        rl.entropy_coeff,
                    )
                    for c in chunks
                ),
                strict=True,
            )
            expected = torch.autograd.grad(sum(losses) / len(chunks), params)
            for ours, theirs in zip(grads, expected, strict=True):
                torch.testing.assert_close(ours, theirs, rtol=1e-4, atol=1e-6)
            for key in stats[0]:
                assert metrics[f"actor/{key}"] == pytest.approx(sum(s[key] for s in stats) / len(stats), rel=1e-4), key
        seq = {micro: update("seq-mean-token-mean", micro)[0] for micro in (2, 16)}
        token = {micro: update("token-mean", micro)[0] for micro in (1, 16)}
        for a, b in zip(seq[2], seq[16], strict=True):
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)
        for a, b in zip(token[1], seq[16], strict=True):  # one response per micro batch: the same loss
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)
        assert not torch.allclose(token[16][0], seq[16][0], rtol=1e-2)  # a 1-token response weighs less
    finally:
        close_logger(run.log)


def test_recomputed_old_logprobs_match_the_samplers_own(cache_dir, tmp_path):
    """MindSpeed-RL recomputes old log-probs (skipping the first mini batch); reusing the sampler's is the
    same quantity, so the first iteration's losses agree to float error."""
    runs = []
    for recompute in (False, True):
        cfg = load_config(
            "grpo_trainer_tiny_cpu",
            small(cache_dir, **{"engine.recompute_old_logprobs": recompute, "megatron_training.train_iters": 1}),
        )
        train(cfg, tmp_path / str(recompute))
        runs.append(read_metrics(tmp_path / str(recompute) / "metrics.jsonl")[0])
    reuse, recompute = runs
    assert reuse["grpo/score/mean"] == recompute["grpo/score/mean"]
    for key in ("actor/pg_loss", "actor/kl_loss", "actor/entropy", "actor/grad_norm"):
        assert reuse[key] == pytest.approx(recompute[key], rel=1e-3, abs=1e-5), key


@pytest.mark.parametrize(("keep", "left"), [(1, ["iter_0000004"]), (None, ["iter_0000002", "iter_0000004"])])
def test_only_the_newest_checkpoints_are_kept(cache_dir, tmp_path, keep, left):
    """Resuming needs the newest checkpoint only (engine.keep_checkpoints; a sweep sets 1 by default)."""
    cfg = load_config(
        "grpo_trainer_tiny_cpu",
        small(cache_dir, **{"actor_config.save": str(tmp_path / "ckpt"), "engine.keep_checkpoints": keep}),
    )
    train(cfg, tmp_path / "run")
    assert sorted(p.name for p in (tmp_path / "ckpt").glob("iter_*")) == left
    assert (tmp_path / "ckpt" / "latest_checkpointed_iteration.txt").read_text() == "4"
