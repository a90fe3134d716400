"""The shipped tiny config's warm start (grpo/_data/warm_start): the same bytes on every machine.

Issue 31: the warm start built on each machine scored 0.656 held-out greedy on one and 0.719 on another, so
the quickstart's figures moved with the machine. The tiny config's base policy is package data now, its
sha256 recorded; these tests fail when the key drifts from the shipped file (rerun tools/ship_warm_start.py),
when the bytes are not the recorded ones, and when the engine would build instead of loading it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from grpo.config import load_config
from grpo.engine import data
from grpo.engine import warm_start as ws
from grpo.engine.build import tokenizer_for
from grpo.engine.model import ModelArgs

ROOT = Path(__file__).resolve().parent.parent


def test_the_tiny_configs_warm_start_is_shipped_intact():
    done = subprocess.run(
        [sys.executable, "tools/ship_warm_start.py", "--check"], cwd=ROOT, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert "shipped intact" in done.stdout


def test_a_fresh_run_loads_the_shipped_bytes_and_builds_nothing(tmp_path):
    cfg = load_config("grpo_trainer_tiny_cpu")
    eng = cfg.engine
    lines: list[str] = []
    _, file = ws.warm_started_policy(
        ModelArgs.from_model_config(cfg.model_arch), tokenizer_for(cfg), data.get_task(eng.task), eng.task_seed,
        eng.warm_start_steps, cfg.megatron_training.init_method_std, tmp_path, log=lines.append,
    )  # fmt: skip
    assert file is not None and file.parent == ws.SHIPPED
    assert any("shipped" in line for line in lines) and not any("supervised steps" in line for line in lines)
    assert not (tmp_path / "warm_start").exists()  # nothing written to the cache


def test_a_shipped_file_whose_bytes_changed_is_refused(tmp_path):
    (tmp_path / "k.safetensors").write_bytes(b"not the weights")
    (tmp_path / ws.SUMS).write_text(f"{'0' * 64}  k.safetensors\n")
    with pytest.raises(RuntimeError, match=r"sha256 .* reinstall"):
        ws.shipped_file("k", tmp_path)
    assert ws.shipped_file("other", tmp_path) is None
