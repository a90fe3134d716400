"""pruner.curve through the driver on the real engine: a 2-trial study of the tiny GRPO model (local Ray,
journal storage). The run at temperature 3.0 wrecks the answer format (score near -0.9, creeping up); once
it has enough points, the curve stopper forecasts its end under the finished trial's and stops it, and the
report shows its reason."""

from __future__ import annotations

import pytest
from optuna.trial import TrialState

from sweep_helpers import load, run_cli, write_spec


@pytest.mark.slow
def test_curve_stopper_stops_a_hopeless_run_of_the_tiny_engine_and_the_report_names_it(tmp_path):
    spec = write_spec(
        tmp_path, name="curve", trials=2, concurrency=1, backend="embedded",
        overrides=["megatron_training.train_iters=12", "megatron_training.save_interval=12", "engine.eval_every=null"],
        search={"generate_config.sampling_config.temperature": "choice(0.8, 3.0)"},
        sampler={"name": "grid", "seed": 1},  # grid order with seed 1: 0.8, then 3.0 (one at a time)
        pruner={"name": "none", "curve": {"min_points": 4, "bounds": [-1.0, 1.1]}},  # the tiny task's score range
        objective={"metric": "grpo/score/mean", "direction": "maximize", "reduce": "last"},
    )  # fmt: skip
    done = run_cli(["run", str(spec), "--quiet"], cwd=tmp_path, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr

    study = load(tmp_path, "curve")
    by_temperature = {t.params["generate_config.sampling_config.temperature"]: t for t in study.trials}
    kept, stopped = by_temperature[0.8], by_temperature[3.0]
    assert kept.state == TrialState.COMPLETE and stopped.state == TrialState.PRUNED
    reason = stopped.user_attrs["pruned_reason"]
    assert reason.startswith("curve: predicted final ") and f"< incumbent (trial {kept.number}) " in reason
    assert reason.endswith(" of 12") and stopped.last_step < 12
    html = (tmp_path / "reports" / "curve" / "index.html").read_text()
    assert "curve: predicted final" in html
