"""The product end to end on the real engine: a 4-trial study of the tiny GRPO model through a local Ray,
Optuna journal storage, a median pruner acting on real learning curves, and the HTML report."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from optuna.trial import TrialState

from sweep_helpers import load, run_cli, write_spec


@pytest.mark.slow
def test_four_trial_study_of_the_tiny_engine_completes_prunes_and_reports(tmp_path):
    # Sampling at temperature 3.0 wrecks the answer format at once: the pruner must stop that trial
    # on its curve. Grid order with seed 0 is 0.9, 3.0, 0.8, 0.7 (one trial at a time: deterministic).
    spec = write_spec(
        tmp_path, name="e2e", trials=4, concurrency=1, backend="embedded",
        overrides=["megatron_training.train_iters=8", "megatron_training.save_interval=4", "engine.eval_every=null"],
        search={"generate_config.sampling_config.temperature": "choice(0.7, 0.8, 0.9, 3.0)"},
        sampler={"name": "grid", "seed": 0},
        pruner={"name": "median", "warmup_steps": 2, "options": {"n_startup_trials": 1}},
        objective={"metric": "grpo/score/mean", "direction": "maximize", "reduce": "auc"},
    )
    done = run_cli(["run", str(spec), "--quiet"], cwd=tmp_path, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr

    study = load(tmp_path, "e2e")
    by_state = {s: [t for t in study.trials if t.state == s] for s in (TrialState.COMPLETE, TrialState.PRUNED)}
    (pruned,) = by_state[TrialState.PRUNED]
    assert pruned.params["generate_config.sampling_config.temperature"] == 3.0
    assert pruned.last_step < 8 and "pruner" in pruned.user_attrs["pruned_reason"]
    assert len(by_state[TrialState.COMPLETE]) == 3
    best_number = max(by_state[TrialState.COMPLETE], key=lambda t: t.value).number
    for t in by_state[TrialState.COMPLETE]:
        rows = [json.loads(line) for line in open(Path(t.user_attrs["trial_dir"]) / "metrics.jsonl")]
        assert [r["iteration"] for r in rows] == list(range(1, 9))
        assert {"acc_rewards/mean", "strict_format_rewards/mean", "actor/kl_loss", "e2e_tps"} <= set(rows[0])
        curve = [r["grpo/score/mean"] for r in rows]
        auc = sum((a + b) / 2 for a, b in zip(curve, curve[1:])) / (len(curve) - 1)
        assert t.value == pytest.approx(auc, rel=1e-6)
        ckpt = Path(t.user_attrs["trial_dir"]) / "runs" / "seed0" / "ckpt"
        if t.number != best_number:  # keep_final_checkpoints: best (the default) keeps the best trial's alone
            assert not ckpt.exists()
            continue
        assert (ckpt / "latest_checkpointed_iteration.txt").exists()
        assert [p.name for p in ckpt.glob("iter_*")] == ["iter_0000008"]  # keep_checkpoints: 1 (resume needs one)
    assert max(by_state[TrialState.COMPLETE], key=lambda t: t.value).value > pruned.intermediate_values[pruned.last_step]
    html = (tmp_path / "reports" / "e2e" / "index.html").read_text()
    assert "Study e2e" in html and "Learning curves" in html
    best = run_cli(["best", str(spec), "--export", str(tmp_path / "best.yaml")], cwd=tmp_path)
    assert best.returncode == 0, best.stderr
    assert "generate_config" in (tmp_path / "best.yaml").read_text()
