"""`grpo-sweep validate CONFIG [OVERRIDE ...]`: exit 0 with the config and derived layout, exit 2 with error lines."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from grpo.cli import sweep_main

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def _in_repo(monkeypatch):
    monkeypatch.chdir(REPO)


def test_validate_7b_by_path(capsys):
    assert sweep_main(["validate", "configs/grpo_trainer_qwen25_7b_A3.yaml"]) == 0
    out = capsys.readouterr().out
    assert "configs/grpo_trainer_qwen25_7b_A3.yaml: valid" in out
    assert "num_attention_heads: 28" in out and "tensor_model_parallel_size: 4" in out
    assert "train_dp" in out and "generation_dp" in out and "optimizer_steps_per_iteration" in out


def test_validate_tiny_by_name_with_section_and_override(capsys):
    assert sweep_main(["validate", "grpo_trainer_tiny_cpu", "rl_config.clip_ratio=0.3", "--section", "rl_config"]) == 0
    out = capsys.readouterr().out
    body = out.split("\n", 1)[1].split("derived layout")[0]
    section = yaml.safe_load(body)
    assert section["clip_ratio"] == 0.3 and "megatron_training" not in section
    assert "derived layout: tp1_pp1_cpu, model tiny_qwen" in out
    rows = {line.split("│")[1].strip(): line.split("│")[2].strip() for line in out.splitlines()
            if line.startswith("│") and line.split("│")[1].strip()}
    assert rows["rollouts_per_iteration"] == "256" and rows["optimizer_steps_per_iteration"] == "4"
    assert rows["train_dp"] == "1" and rows["mini_batch_responses"] == "128"


def test_validate_layout_override_changes_the_table(capsys):
    assert sweep_main(["validate", "grpo_trainer_qwen25_7b_A3", "layout=tp2_pp2",
                       "--section", "generate_config.sampling_config"]) == 0
    out = capsys.readouterr().out
    assert "derived layout: tp2_pp2" in out and "temperature: 1.0" in out


@pytest.mark.parametrize("argv, expected", [
    (["validate", "grpo_trainer_tiny_cpu", "rl_config.clip_rato=0.3"],
     ["error: configs/grpo_trainer_tiny_cpu.yaml: rl_config.clip_rato: unknown key; did you mean rl_config.clip_ratio?"]),
    (["validate", "configs/missing.yaml"], ["error: configs/missing.yaml: no such config file"]),
    (["validate", "grpo_trainer_qwen25_7b_A3", "layout=tp8_pp1"],
     ["error: configs/grpo_trainer_qwen25_7b_A3.yaml: model.qwen25_7b.num_attention_heads=28 is not divisible by "
      "actor_config.tensor_model_parallel_size=8"]),
    (["validate", "grpo_trainer_tiny_cpu", "rl_config.clip_ratio=1.5", "generate_config.sampling_config.top_p=0"],
     ["error: configs/grpo_trainer_tiny_cpu.yaml: rl_config.clip_ratio: must be <= 1 (got 1.5)",
      "error: configs/grpo_trainer_tiny_cpu.yaml: generate_config.sampling_config.top_p: must be > 0 (got 0)"]),
    (["validate", "grpo_trainer_tiny_cpu", "--section", "rl_confg"],
     ["error: --section rl_confg: no section 'rl_confg' in the config (available: model, megatron_training, "
      "actor_config, rl_config, generate_config, engine, layout, algorithm, verl, trl)"]),
])
def test_validate_errors_exit_2_one_line_each(capsys, argv, expected):
    assert sweep_main(argv) == 2
    captured = capsys.readouterr()
    assert captured.err.splitlines() == expected
    assert "Traceback" not in captured.err and captured.out == ""


def test_validate_yaml_syntax_error(tmp_path, capsys):
    bad = tmp_path / "grpo_trainer_bad.yaml"
    bad.write_text("rl_config:\n  clip_ratio: 0.2\n    gamma: 1.0\n")
    assert sweep_main(["validate", str(bad)]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"error: {bad}:3: YAML syntax error")
