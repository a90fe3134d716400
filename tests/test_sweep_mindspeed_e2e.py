"""A mindspeed-backend study end to end with a STAND-IN for MindSpeed-RL's entry point
(tests/standin_mindspeed/cli/train_grpo.py prints MindSpeed-style log lines; no NPU, no MindSpeed-RL here):
real driver, real Ray with declared NPU admission slots, real Optuna storage, log parsing, failure
mapping from an injected HCCL timeout, and the report."""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from optuna.trial import TrialState

from mindspeed_helpers import STANDIN, make_weights
from sweep_helpers import load, run_cli


def test_three_trial_mindspeed_study_with_standin_entry_point(tmp_path):
    weights = make_weights(tmp_path / "weights")
    spec = {
        "study": "ms",
        "base": "grpo_trainer_qwen25_7b_A3",
        "overrides": ["megatron_training.train_iters=6", "megatron_training.save_interval=2"],
        "search": {"layout": "choice(tp2_pp2, tp4_pp1)", "rl_config.init_kl_coef": "choice(0.01, 0.05)"},
        "objective": {"metric": "grpo/score/mean", "direction": "maximize", "reduce": "last"},
        "sampler": {"name": "grid", "seed": 0},
        "pruner": "none",
        "trials": 3,
        "concurrency": 2,
        "retries": 0,
        "backend": "mindspeed",
        "cluster": {"address": "local", "resources": {"npu_slots": 32}},
        "mindspeed": {
            "path": str(STANDIN.resolve()),
            "checkpoints": {"pattern": str(weights / "qwen7b-tp{tp}-pp{pp}")},
            "env": {"GRPO_STANDIN_ITER_S": "0.05", "GRPO_STANDIN_RAY": "0",
                    "GRPO_STANDIN_FAIL": "hccl_timeout@3:rl_config.init_kl_coef=0.05"},
            "stall_timeout": 60, "kill_grace": 2,
        },
    }
    path = tmp_path / "ms.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    done = run_cli(["run", str(path), "--quiet"], cwd=tmp_path, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr

    study = load(tmp_path, "ms")
    finished = [t for t in study.trials if t.state in (TrialState.COMPLETE, TrialState.FAIL)]
    assert len(finished) == 3
    for t in finished:
        assert t.user_attrs["resources"]["resources"] == {"npu_slots": 16.0}
        assert t.user_attrs["npu_s"] > 0
    failed = [t for t in finished if t.state == TrialState.FAIL]
    complete = [t for t in finished if t.state == TrialState.COMPLETE]
    assert failed and all(t.params["rl_config.init_kl_coef"] == 0.05 for t in failed)
    assert all("HCCL" in t.user_attrs["failure_reason"] for t in failed)
    assert all(t.user_attrs["last_log_lines"] for t in failed)
    for t in complete:  # metrics parsed from the stand-in's MindSpeed-style lines
        rows = [json.loads(line) for line in open(Path(t.user_attrs["trial_dir"]) / "metrics.jsonl")]
        assert [r["iteration"] for r in rows] == list(range(1, 7))
        assert t.value == rows[-1]["grpo/score/mean"]
        assert {"e2e_tps", "actor/pg_loss", "timing/all"} <= set(rows[-1])
    assert (tmp_path / "reports" / "ms" / "index.html").exists()
