"""benchmarks/pbt_vs_search.py --smoke, random arm only: a real 2-run x 6-iteration study through the CLI, its
winner retrained on a fresh seed and scored on test prompts; checks the results file's structure and that a
rerun skips the search already in it (resumable)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow


def _run(tmp_path: Path) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, str(REPO / "benchmarks" / "pbt_vs_search.py"), "--smoke", "--arms", "random",
           "--table-replays", "0", "--work", str(tmp_path / "work"), "--out", str(tmp_path / "out.json")]  # fmt: skip
    return subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=900)


def test_smoke_random_arm_writes_its_results_and_resumes(tmp_path):
    done = _run(tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    res = json.loads((tmp_path / "out.json").read_text())
    assert res["settings"]["runs"] == 2 and res["settings"]["iters"] == 6
    rec = res["searches"]["random"]["0"]
    assert rec["compute"] == 12 and rec["trials"] == 2 and rec["pruned"] == 0  # random: 2 full runs
    # the rliable part of the summary file, next to --out (never the shipped benchmarks/results/ one)
    real = json.loads((tmp_path / "search_summary.json").read_text())["real"]
    assert real["random"]["searches"] == 1 and real["random"]["iqm"][0] == rec["test_acc_greedy"]
    assert rec["winner"] is not None and set(rec["params"]) == {"actor_config.lr", "rl_config.clip_ratio"}
    assert [j["seed"] for j in rec["judge"]] == [9000]  # a fresh seed, not the search's 1234
    assert 0.0 <= rec["test_acc_greedy"] <= 1.0 and rec["test_acc_greedy"] == rec["judge"][0]["test_acc_greedy"]
    assert 0.0 < res["base_test_acc_greedy"] <= 1.0
    mean, low, high = res["summary"]["random"]["test_acc_greedy"]
    assert low <= mean <= high and res["summary"]["random"]["searches"] == 1
    assert "| random | 1 |" in done.stdout

    again = _run(tmp_path)  # resumable: the search in the file is not run again
    assert again.returncode == 0, again.stderr[-3000:]
    assert "random s0: in" in again.stderr and "skipped" in again.stderr
    assert json.loads((tmp_path / "out.json").read_text())["searches"]["random"]["0"] == rec


def test_test_prompts_are_disjoint_from_demonstrations_training_and_validation():
    sys.path.insert(0, str(REPO / "benchmarks"))
    import pbt_vs_search as bench

    from grpo.config import load_config
    from grpo.engine.data import get_task

    cfg = load_config("grpo_trainer_tiny_cpu")
    task, seed = get_task("arithmetic"), cfg.engine.task_seed
    test = bench.test_examples(cfg, 512)
    train, held_out = task.split(cfg.engine.task_size, cfg.engine.eval_size, seed)
    pairs = {task.operands(e) for e in test}
    assert len(pairs) == 512
    for other in (task.demonstrations(seed), train, held_out):
        assert not pairs & {task.operands(e) for e in other}
