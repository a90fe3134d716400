"""A user's own run end to end (issue 41 item 3): a Hugging Face Qwen2 folder, a GSM8K-style training file, a
held-out file and a user file with a TRL-style and a verl-style reward, swept on the embedded engine through the
real driver and run as a real TRL trial: each user function's ``<name>_rewards/mean`` is what it returns, the
objective can be one, and evaluation scores the held-out file's prompts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from hf_folder import make_qwen2_folder
from optuna.trial import TrialState
from sweep_helpers import load, run_cli

from grpo.config import load_config

REWARDS = """
def const_reward(prompts, completions, answer, **kwargs):
    assert all("####" in a for a in answer)  # the dataset's own column, by name, as TRL passes it
    return [0.25 for _ in completions]

def picky(prompts, completions, **kwargs):  # fine at validate (its completions answer), fails in a trial
    return [1.0 if "boxed" in c else {}["no boxed answer"] for c in completions]

def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    assert ground_truth.isdigit()  # the label after '####', never the whole solution
    return {"score": 0.5, "calls": 1.0}
"""
HELD_OUT = 3


def _own_run(folder: Path, rewards_in: Path) -> list[str]:
    make_qwen2_folder(folder / "model")
    rows = [
        {
            "question": f"Raj has {a} coins and finds {a + 1} more. How many?",
            "answer": f"{a} + {a + 1}\n#### {2 * a + 1}",
        }
        for a in range(10, 18 + HELD_OUT)
    ]
    (folder / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[:8]))
    (folder / "test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[8:]))
    rewards_in.mkdir(exist_ok=True)
    (rewards_in / "rewards.py").write_text(REWARDS)
    return [
        "engine.task=dataset",
        f"megatron_training.data_path={folder / 'train.jsonl'}",
        f"engine.eval_data_path={folder / 'test.jsonl'}",
        f"actor_config.load={folder / 'model'}",
        "rl_config.verifier_function=[acc,'rewards.py:const_reward','rewards.py:compute_score']",
        "rl_config.verifier_weight=[1,1,1]",
        "megatron_training.train_iters=2", "megatron_training.global_batch_size=4", "rl_config.mini_batch_size=4",
        "rl_config.n_samples_per_prompt=2", "actor_config.micro_batch_size=8", "engine.eval_every=1",
        "generate_config.sampling_config.max_tokens=8", "engine.device=cpu",
    ]  # fmt: skip


def test_an_embedded_sweep_scores_with_the_users_functions_and_evaluates_on_the_held_out_file(tmp_path):
    spec = tmp_path / "sweeps" / "own.yaml"  # rewards.py beside it: relative to the spec's folder, not the cwd
    overrides = _own_run(tmp_path, spec.parent)
    spec.write_text(
        yaml.safe_dump(
            {
                "study": "own",
                "base": "grpo_trainer_tiny_cpu",
                "backend": "embedded",
                "overrides": overrides,
                "search": {"rl_config.clip_ratio": "choice(0.2, 0.3)"},
                "sampler": {"name": "grid", "seed": 0},
                "objective": {"metric": "const_reward_rewards/mean", "direction": "maximize", "reduce": "last"},
                "trials": 2,
                "concurrency": 1,
                "pruner": {"name": "none"},
            }
        )
    )
    done = run_cli(["run", str(spec), "--quiet"], cwd=tmp_path, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    trials = load(tmp_path, "own").trials
    assert [t.state for t in trials] == [TrialState.COMPLETE] * 2
    for t in trials:
        assert t.value == 0.25  # the objective: the user function's mean
        rows = [
            json.loads(line) for line in (Path(t.user_attrs["trial_dir"]) / "metrics.jsonl").read_text().splitlines()
        ]
        trained = [r for r in rows if r["iteration"] > 0]
        assert [r["const_reward_rewards/mean"] for r in trained] == [0.25, 0.25]
        assert [r["compute_score_rewards/mean"] for r in trained] == [0.5, 0.5]
        assert all(r["compute_score/calls"] == 1.0 and r["eval/prompts"] == HELD_OUT for r in trained)


def test_a_trl_trial_scores_with_the_users_functions_unchanged(tmp_path, monkeypatch):
    pytest.importorskip("trl")
    from grpo.sweep.backends.trl.backend import TrlBackend

    overrides = _own_run(tmp_path, tmp_path)
    monkeypatch.chdir(tmp_path)  # outside a sweep a relative reward file is relative to the working directory
    cfg = load_config("grpo_trainer_tiny_cpu", [*overrides, "engine.keep_checkpoints=null"])
    reported: list[tuple[int, dict[str, float]]] = []
    TrlBackend().run(cfg, tmp_path / "run", lambda i, m: reported.append((i, m)) or False, False)
    trained = [m for i, m in reported if i > 0]
    assert len(trained) == 2
    assert all(m["const_reward_rewards/mean"] == 0.25 and m["compute_score_rewards/mean"] == 0.5 for m in trained)
    assert all(m["compute_score/calls"] == 1.0 for m in trained)  # a dict's other keys, named as on the engine
    assert all(m["eval/prompts"] == HELD_OUT for m in trained)


def test_a_reward_function_that_raises_in_a_trial_fails_it_with_its_line_and_no_retry(tmp_path, monkeypatch):
    from grpo.errors import UserCodeError, is_user_code_failure
    from grpo.sweep.backends.embedded import EmbeddedBackend

    overrides = [o for o in _own_run(tmp_path, tmp_path) if not o.startswith("rl_config.verifier_")]
    overrides += ["rl_config.verifier_function=[acc,'rewards.py:picky']", "rl_config.verifier_weight=[1,1]"]
    monkeypatch.chdir(tmp_path)
    cfg = load_config("grpo_trainer_tiny_cpu", overrides)
    with pytest.raises(UserCodeError) as err:  # the worker records f"{type}: {message}" as the trial's reason
        EmbeddedBackend().run(cfg, tmp_path / "run", lambda i, m: False, False)
    reason = f"{type(err.value).__name__}: {err.value}"
    assert "reward function rewards.py:picky: KeyError: 'no boxed answer' (rewards.py line 7:" in reason
    assert is_user_code_failure(reason)  # record.py: no retry
