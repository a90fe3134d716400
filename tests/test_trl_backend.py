"""backend: trl in the worker, without the driver: the rendered GRPOConfig (built by trl itself, so TRL's own
validation runs), the key table, the refusals, the verifiers as reward functions, and real GRPOTrainer runs of
the tiny Qwen2 on the CPU: metrics under the project's names, held-out evaluation, checkpoint-N with the driver's
tracker, a resume from it that keeps its own learning rate, and a pruned run that stops at once."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from grpo._fs import checkpoint_iteration
from grpo.config import load_config
from grpo.engine import rewards
from grpo.engine.coverage import TABLE
from grpo.sweep.backends import backend_class
from grpo.sweep.backends.trl import coverage
from grpo.sweep.backends.trl.backend import TrlBackend, render

trl = pytest.importorskip("trl", reason="trl not installed (pip install -e .[trl])")

REPO = Path(__file__).resolve().parents[1]
# 4 prompts x 4 samples, 16-token completions, one optimizer step per iteration: a real run in a few seconds.
TINY = [
    "megatron_training.global_batch_size=4", "rl_config.mini_batch_size=4", "rl_config.n_samples_per_prompt=4",
    "actor_config.micro_batch_size=16", "rl_config.epochs=1", "generate_config.sampling_config.max_tokens=16",
    "engine.eval_every=2", "engine.eval_size=16", "engine.device=cpu", "engine.keep_checkpoints=null",
]  # fmt: skip


def cfg_of(*overrides: str):
    return load_config("grpo_trainer_tiny_cpu", [*TINY, *overrides])


def test_batch_units_convert_prompts_to_completions_and_trl_accepts_the_config(tmp_path):
    # MindSpeed-RL's global/mini batch sizes count prompts; TRL's per-device batch counts completions.
    cfg = cfg_of("megatron_training.global_batch_size=8", "rl_config.mini_batch_size=4",
                 "actor_config.micro_batch_size=8", "rl_config.epochs=2", "rl_config.clip_ratio=0.15",
                 "actor_config.lr=3e-5")  # fmt: skip
    kwargs, steps = render(cfg, tmp_path)
    args = trl.GRPOConfig(**kwargs)  # trl's own __post_init__ checks the batch arithmetic
    assert args.generation_batch_size == 8 * 4  # one generation = global_batch_size prompts x n samples
    assert args.gradient_accumulation_steps == 2  # a mini batch of 4 prompts = 16 completions = 2 micro batches
    assert steps == 2 * 2  # (8 / 4 mini batches) x 2 epochs optimizer steps per iteration, as MindSpeed-RL
    assert (args.epsilon, args.learning_rate, args.num_iterations, args.num_generations) == (0.15, 3e-5, 2, 4)
    assert args.reward_weights == [1.0, 0.1] and args.loss_type == "dapo"  # token_level_loss: the token mean


def test_every_key_is_classified_and_the_doc_is_current():
    table = coverage.KEYS.table()
    assert set(table) == set(TABLE)  # the engine's table holds every manifest and schema key
    doc = (REPO / "docs" / "backend_trl.md").read_text()
    run = "run: python -m grpo.sweep.backends.trl.coverage --write docs/backend_trl.md"
    assert doc.endswith(coverage.KEYS.key_table()) and doc.count(coverage.KEYS.heading) == 1, run


def test_refused_keys_are_one_line_naming_key_and_backend():
    backend = backend_class("trl")()
    assert backend.check(cfg_of()) == []
    assert backend.check(cfg_of("rl_config.entropy_coeff=0.1")) == []  # TRL's entropy_coef (issue 40)
    problems = backend.check(cfg_of("rl_config.use_kl_in_reward=true", "rl_config.kl_ctrl_type=adaptive"))
    assert any("rl_config.use_kl_in_reward: True: backend trl refuses it" in p for p in problems)
    assert any("rl_config.kl_ctrl_type: 'adaptive': backend trl runs only 'fixed'" in p for p in problems)
    assert all("\n" not in p for p in problems)
    keys = ["actor_config.lr", "rl_config.use_kl_in_reward", "rl_config.ref_forward_micro_batch_size"]
    searched = backend.check_search(keys, "s.yaml")
    assert [p.split(":")[1].strip() for p in searched] == [f"search.{k}" for k in keys[1:]]


def test_verifiers_are_trl_reward_functions_with_their_weights():
    from grpo.sweep.backends.trl.model import LABEL_COLUMN, PROMPT_COLUMN, reward_functions

    funcs, weights = reward_functions(cfg_of())
    assert [f.__name__ for f in funcs] == ["verifier_acc", "verifier_strict_format"] and weights == [1.0, 0.1]
    texts, labels = ["<think>x</think><answer>7</answer>", "7"], ["7", "7"]
    _, per = rewards.score(texts, labels, ["acc", "strict_format"], [1.0, 0.1])
    # TRL hands a reward function every dataset column by name: here dataset_rows' own two
    columns = {LABEL_COLUMN: labels, PROMPT_COLUMN: ['"p"', '"p"']}
    got = [f(prompts=["p", "p"], completions=texts, **columns) for f in funcs]
    assert got == [per["acc"], per["strict_format"]]


def rows(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_a_real_run_streams_evaluates_checkpoints_and_a_resume_keeps_its_own_lr(tmp_path):
    first, reported = tmp_path / "a", []
    cfg = cfg_of("megatron_training.train_iters=3", "megatron_training.save_interval=2",
                 f"actor_config.save={first}/ckpt")  # fmt: skip
    summary = TrlBackend().run(cfg, first, lambda i, m: reported.append((i, m)) or False, False)
    assert [i for i, _ in reported] == [0, 1, 2, 3] and summary["iterations"] == 3
    base, one, two = reported[0][1], reported[1][1], reported[2][1]
    assert set(base) == {"eval/acc", "eval/acc_greedy", "eval/strict_format", "eval/prompts"}  # the base policy
    names = ("grpo/score/mean", "actor/kl_loss", "actor/entropy", "actor/pg_loss", "actor/lr", "response_length/mean")
    assert [n for n in names if n not in one] == []  # the embedded engine's names
    assert "eval/acc_greedy" in two and "eval/acc_greedy" not in one  # engine.eval_every=2
    assert checkpoint_iteration(first / "ckpt") == 3 and (first / "ckpt" / "checkpoint-2").is_dir()
    assert [r["iteration"] for r in rows(first)] == [0, 1, 2, 3]

    # A retry or branch: actor_config.load names the save dir; the run continues at iteration 4 with its own lr.
    second, again = tmp_path / "b", []
    cfg = cfg_of("megatron_training.train_iters=5", "megatron_training.save_interval=5", "actor_config.lr=7e-5",
                 f"actor_config.load={first}/ckpt", "actor_config.finetune=false",
                 f"actor_config.save={second}/ckpt")  # fmt: skip
    summary = TrlBackend().run(cfg, second, lambda i, m: again.append((i, m)) or False, True)
    assert [i for i, _ in again] == [4, 5] and summary["start_iteration"] == 3
    assert all(m["actor/lr"] == pytest.approx(7e-5) for _, m in again)  # not the parent's scheduler's 1e-5 etc.
    assert "resume from" in (second / "train.log").read_text() and checkpoint_iteration(second / "ckpt") == 5


def test_a_pruned_run_stops_at_once(tmp_path):
    cfg = cfg_of("megatron_training.train_iters=50", "engine.eval_every=null", f"actor_config.save={tmp_path}/ckpt")
    summary = TrlBackend().run(cfg, tmp_path, lambda i, m: i >= 1, False)  # the driver says stop after iteration 1
    assert summary["stopped_early"] and summary["iterations"] == 1
    assert [r["iteration"] for r in rows(tmp_path)] == [1]


def test_a_schedule_may_change_a_value_only_where_a_pbt_segment_starts():
    backend = backend_class("trl")()
    cfg = cfg_of("actor_config.lr_warmup_fraction=0", "engine.exit_interval=2")
    cfg.schedule = {"actor_config.lr": {0: 1e-5, 2: 3e-5}}  # a segment's lineage: changed at a segment start
    assert backend.check(cfg) == []
    cfg.schedule = {"actor_config.lr": {0: 1e-5, 3: 3e-5}}  # inside the segment [2, 4)
    (problem,) = backend.check(cfg)
    assert "schedule.actor_config.lr: backend trl cannot change a value during a run (iteration 3)" in problem
    plain = cfg_of()
    plain.schedule = {"actor_config.lr": {0: 1e-5, 2: 3e-5}}  # no segments: one run would need the change
    assert len(backend.check(plain)) == 1
