"""backend: trl through the driver and a local Ray: a 2-trial study of real TRL GRPOTrainer runs of the tiny
Qwen2 (journal storage), the metrics under the project's names in the study, and the report written."""

from __future__ import annotations

import pytest
from optuna.trial import TrialState
from sweep_helpers import load, run_cli, write_spec

pytest.importorskip("trl", reason="trl not installed (pip install -e .[trl])")

TINY = [
    "megatron_training.train_iters=3", "megatron_training.save_interval=3", "megatron_training.global_batch_size=4",
    "rl_config.mini_batch_size=4", "rl_config.n_samples_per_prompt=4", "actor_config.micro_batch_size=16",
    "rl_config.epochs=1", "generate_config.sampling_config.max_tokens=16", "engine.eval_every=3",
    "engine.eval_size=16", "engine.device=cpu",
]  # fmt: skip


@pytest.mark.slow
def test_a_trl_study_runs_real_trials_through_the_driver_and_writes_the_report(tmp_path):
    spec = write_spec(
        tmp_path, name="trl", trials=2, concurrency=2, backend="trl", overrides=TINY,
        search={"actor_config.lr": "choice(1e-5, 1e-4)"}, sampler={"name": "grid", "seed": 0},
        objective={"metric": "eval/acc_greedy", "direction": "maximize", "reduce": "last"},
    )  # fmt: skip
    done = run_cli(["run", str(spec), "--quiet"], cwd=tmp_path, timeout=400)
    assert done.returncode == 0, done.stdout + done.stderr
    study = load(tmp_path, "trl")
    complete = [t for t in study.trials if t.state == TrialState.COMPLETE]
    assert len(complete) == 2 and {t.params["actor_config.lr"] for t in complete} == {1e-5, 1e-4}
    assert all(3 in t.intermediate_values for t in complete)  # the objective reported at the last iteration
    assert (tmp_path / "reports" / "trl" / "index.html").is_file()
