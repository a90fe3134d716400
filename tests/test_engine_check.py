"""check_config: what the embedded engine refuses, known from the config alone and without torch."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest

from grpo.config import load_config
from grpo.engine import check_config
from grpo.errors import UserError

TINY = "configs/grpo_trainer_tiny_cpu.yaml"


@pytest.fixture(autouse=True)
def _in_repo(monkeypatch):
    from pathlib import Path

    monkeypatch.chdir(Path(__file__).resolve().parents[1])  # sources are relative to the working directory


def test_a_fine_config_gives_nothing():
    assert check_config(load_config("grpo_trainer_tiny_cpu")) == []


def test_gae_is_refused():
    assert check_config(load_config("grpo_trainer_tiny_cpu", ["rl_config.adv_estimator=gae"])) == [
        f"{TINY}: rl_config.adv_estimator: gae needs a critic model, which the embedded engine does not have; "
        "use group_norm"
    ]


def test_rule_reward_false_is_refused():
    assert check_config(load_config("grpo_trainer_tiny_cpu", ["rl_config.rule_reward=false"])) == [
        f"{TINY}: rl_config.rule_reward: the embedded engine scores with rule rewards only; set rule_reward=true"
    ]


def test_every_reason_is_listed_one_line_each():
    cfg = load_config(
        "grpo_trainer_tiny_cpu",
        ["rl_config.adv_estimator=gae", "rl_config.rule_reward=false", "engine.task_size=7000",
         "rl_config.max_prompt_length=8"],
    )
    problems = check_config(cfg)
    keys = [line.split(": ")[1] for line in problems]
    assert keys == ["rl_config.adv_estimator", "rl_config.rule_reward", "rl_config.max_prompt_length",
                    "engine.task_size"]
    assert all(line.startswith(f"{TINY}: ") and "\n" not in line for line in problems)


def test_the_run_refuses_with_the_same_lines(tmp_path):
    from grpo.engine.trainer import Run

    cfg = load_config("grpo_trainer_tiny_cpu", ["rl_config.adv_estimator=gae", "rl_config.rule_reward=false"])
    with pytest.raises(UserError) as info:
        Run(cfg, tmp_path)
    assert info.value.problems == check_config(cfg) and str(info.value) == check_config(cfg)[0]


def test_check_config_does_not_import_torch():
    code = ("import sys; from grpo.config import load_config; from grpo.engine import check_config; "
            "check_config(load_config('grpo_trainer_tiny_cpu')); print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


@pytest.mark.skipif(importlib.util.find_spec("math_verify") is not None, reason="math-verify is installed here")
def test_verifiers_only_mindspeed_scores_are_accepted_by_the_schema_and_refused_by_the_engine():
    # mindspeed_rl/models/rule_verifier.py knows math_verify_reward; the embedded engine scores it only where the
    # math-verify package is installed (not a dependency), and refuses it before launch elsewhere.
    cfg = load_config("grpo_trainer_tiny_cpu", ["rl_config.verifier_function=[acc,math_verify_reward]",
                                                "rl_config.verifier_weight=[1.0,1.0]"])
    (problem,) = check_config(cfg)
    assert "rl_config.verifier_function" in problem and "math_verify_reward" in problem


@pytest.mark.parametrize("overrides, key", [
    (["model.tiny_qwen.num_experts=4", "model.tiny_qwen.moe_router_topk=2",
      "model.tiny_qwen.moe_ffn_hidden_size=64"], "num_experts"),
    (["model.tiny_qwen.qk_layernorm=true"], "qk_layernorm"),
    (["model.tiny_qwen.kv_channels=32"], "kv_channels"),  # 32 x 4 heads != hidden 64: Qwen3's head layout
    (["model.tiny_qwen.normalization=LayerNorm"], "normalization"),
])
def test_an_architecture_the_engine_does_not_build_is_refused(overrides, key):
    """A Qwen3 or DeepSeek model config must not silently train as a Qwen2 network."""
    problems = check_config(load_config("grpo_trainer_tiny_cpu", overrides))
    assert len(problems) == 1 and problems[0].startswith(f"{TINY}: model.tiny_qwen.{key}: ")
    assert "Qwen2 decoders only" in problems[0]


def test_the_shipped_qwen3_and_deepseek_models_are_refused_by_the_engine():
    for model in ("qwen3_8b", "qwen3_30b_a3b", "deepseekv3_671b"):
        cfg = load_config("grpo_trainer_qwen25_7b_A3", [f"model={model}", f"megatron_training.model={model}",
                                                         f"actor_config.model={model}"])
        assert any(f"model.{model}." in p and "Qwen2 decoders only" in p for p in check_config(cfg)), model
