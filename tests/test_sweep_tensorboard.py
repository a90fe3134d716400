"""A sweep in TensorBoard's HParams view: one session per trial-seed run (the trial's parameters), its seeds one
group, and the trial's objective as a metric column beside them, read through TensorBoard's own HParams handler
(``hparams_session_groups``, tests/test_engine_tracking.py).

The seed runs write TensorBoard through the engine's own ``MetricsSink`` (TensorBoardCurveBackend in
tests/sweep_test_backends.py), under the real driver, Ray scheduler and Optuna journal."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from optuna.trial import TrialState
from sweep_helpers import module_ray, write_spec
from test_engine_tracking import hparams_session_groups

from grpo.sweep.run.driver import run_study
from grpo.sweep.spec.load import load_spec
from grpo.sweep.spec.objectives import get_reducer

TAG = "objective/grpo/score/mean"


@pytest.fixture(scope="module", autouse=True)
def local_ray():
    with module_ray():
        yield


def _seed_curve(trial, seed: int) -> list[float]:
    """The seed's curve as the driver recorded it (the trial's metrics.jsonl)."""
    lines = (Path(trial.user_attrs["trial_dir"]) / "metrics.jsonl").read_text().splitlines()
    rows = [json.loads(line) for line in lines]
    return [r["grpo/score/mean"] for r in sorted(rows, key=lambda r: r["iteration"]) if r["seed"] == seed]


def test_the_hparams_view_shows_each_trials_objective_beside_its_parameters(tmp_path, monkeypatch):
    # Grid order with seed 0 is 0.3, 0.0 (one trial at a time): the second learns slower and the median
    # pruner stops it on its curve; its objective so far still reaches TensorBoard.
    monkeypatch.chdir(tmp_path)
    spec = load_spec(
        str(
            write_spec(
                tmp_path,
                trials=2,
                concurrency=1,
                seeds=2,
                tracking={"tensorboard": True},
                overrides=["megatron_training.train_iters=12", "megatron_training.save_interval=4"],
                search={"rl_config.clip_ratio": "choice(0.2, 0.25, 0.3, 0.0)"},
                sampler={"name": "grid", "seed": 0},
                pruner={"name": "median", "warmup_steps": 2, "options": {"n_startup_trials": 1}},
                objective={"metric": "grpo/score/mean", "reduce": "auc"},
                backend="sweep_test_backends:SlowTensorBoardCurveBackend",
            )
        )
    )
    study = run_study(spec).study
    trials = {t.number: t for t in study.trials}
    shown = [(t.state, t.params["rl_config.clip_ratio"]) for t in trials.values()]
    assert shown == [(TrialState.COMPLETE, 0.3), (TrialState.PRUNED, 0.0)], shown

    groups = hparams_session_groups(tmp_path / "studies" / "s" / "trials")
    assert len(groups) == 2  # one row per trial, its two seeds grouped
    auc = get_reducer("auc")
    for group in groups:
        names = [re.fullmatch(r"(\d+)/runs/seed(\d)/tensorboard/trial-\1-seed\2", s.name) for s in group.sessions]
        assert all(names), [s.name for s in group.sessions]
        (number,) = {int(n.group(1)) for n in names}
        trial = trials[number]
        assert group.hparams["rl_config.clip_ratio"].number_value == pytest.approx(trial.params["rl_config.clip_ratio"])
        for session, name in zip(group.sessions, names, strict=True):
            k = int(name.group(2))
            metrics = {m.name.tag: m.value for m in session.metric_values}
            if trial.state == TrialState.COMPLETE:
                expected = trial.user_attrs["values_per_seed"][0][k]
            else:  # pruned: the objective over the curve so far
                expected = auc.reduce(_seed_curve(trial, trial.user_attrs["seeds"][k]))
            assert metrics[TAG] == pytest.approx(expected)
            assert metrics[TAG] != pytest.approx(metrics["grpo/score/mean"])  # the auc, not the last point
        if trial.state == TrialState.COMPLETE:  # the row: the mean over the seeds, the trial's value
            assert {m.name.tag: m.value for m in group.metric_values}[TAG] == pytest.approx(trial.value)
