"""The driver with the real Ray scheduler and real Optuna journal storage, on cheap curve backends
(tests/sweep_test_backends.py), so scheduling, pruning, faults, retries and budgets are tested fast."""

from __future__ import annotations

import json
import math
import re

import pytest
import ray
from optuna.trial import TrialState

from grpo.errors import UserError
from grpo.sweep.driver import forked as fork
from grpo.sweep.driver import run_study
from grpo.sweep.load import load_spec
from optuna.storages import RetryHeartbeatStaleTrialCallback
from sweep_helpers import TESTS, load, states, write_spec


@pytest.fixture(scope="module", autouse=True)
def local_ray():
    """One local Ray for the module; the scheduler reuses an initialised Ray and leaves it running."""
    ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False, configure_logging=False,
             runtime_env={"env_vars": {"PYTHONPATH": str(TESTS)}})
    yield
    ray.shutdown()


def _run(tmp_path, monkeypatch, **fields):
    monkeypatch.chdir(tmp_path)
    spec = load_spec(str(write_spec(tmp_path, **fields)))
    return run_study(spec).study


def test_study_completes_trials_with_curve_objectives_in_storage(tmp_path, monkeypatch):
    _run(tmp_path, monkeypatch, trials=4, objective={"metric": "grpo/score/mean", "reduce": "auc"})
    reloaded = load(tmp_path)
    assert states(reloaded) == {"COMPLETE": 4}
    for t in reloaded.trials:
        rows = [json.loads(line) for line in open(t.user_attrs["trial_dir"] + "/metrics.jsonl")]
        assert [r["iteration"] for r in rows] == list(range(1, 13))
        curve = [r["grpo/score/mean"] for r in rows]
        expected = sum((a + b) / 2 for a, b in zip(curve, curve[1:])) / (len(curve) - 1)
        assert t.value == pytest.approx(expected, rel=1e-6)
        assert t.user_attrs["config"]["rl_config"]["clip_ratio"] == pytest.approx(t.params["rl_config.clip_ratio"])
        assert t.user_attrs["wall_s"] > 0 and t.user_attrs["node"]
        assert t.intermediate_values  # reported per iteration for the pruner
    best = max(reloaded.trials, key=lambda t: t.value)
    assert best.params["rl_config.clip_ratio"] == max(t.params["rl_config.clip_ratio"] for t in reloaded.trials)


def test_median_pruner_stops_a_slow_learner_on_its_curve(tmp_path, monkeypatch):
    study = _run(
        tmp_path, monkeypatch, trials=5, concurrency=1,
        overrides=["megatron_training.train_iters=20"],
        search={"rl_config.clip_ratio": "choice(0.3, 0.29, 0.28, 0.0, 0.01)"},
        sampler={"name": "grid"},
        pruner={"name": "median", "warmup_steps": 3, "options": {"n_startup_trials": 2}},
        backend="sweep_test_backends:SlowCurveBackend",
    )
    pruned = [t for t in study.trials if t.state == TrialState.PRUNED]
    assert pruned, states(study)
    for t in pruned:
        assert t.params["rl_config.clip_ratio"] <= 0.01
        assert "pruner" in t.user_attrs["pruned_reason"]
        assert t.last_step < 20
        # The reason names the iteration the pruner decided at (the run may report one more before it
        # stops) and the value the trial had there.
        reason = t.user_attrs["pruned_reason"]
        found = re.fullmatch(r"pruned by the median pruner at iteration (\d+) of 20: grpo/score/mean \(last\) so far (.+)",
                             reason)
        assert found, reason
        at = int(found.group(1))
        assert 3 <= at <= t.last_step and found.group(2) == f"{t.intermediate_values[at]:.4g}"
    assert states(study)["COMPLETE"] >= 3


@pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")  # retried_trial_number is experimental
def test_faults_fail_with_reasons_are_retried_and_the_study_finishes(tmp_path, monkeypatch):
    study = _run(
        tmp_path, monkeypatch, trials=4, retries=1,
        search={"rl_config.entropy_coeff": "choice(0.0, 0.1, 0.2, 0.3)"},
        sampler={"name": "grid"},
        backend="sweep_test_backends:FaultBackend",
    )
    failed = {round(t.params["rl_config.entropy_coeff"], 2): t for t in study.trials if t.state == TrialState.FAIL}
    assert sorted(failed) == [0.1, 0.2, 0.3]
    assert "injected failure" in failed[0.1].user_attrs["failure_reason"]
    assert failed[0.1].user_attrs["last_log_lines"][-1] == "Traceback: injected"
    assert "not finite" in failed[0.2].user_attrs["failure_reason"]
    assert "worker process died" in failed[0.3].user_attrs["failure_reason"]
    assert all(t.user_attrs["retried"] for t in failed.values())
    complete = [t for t in study.trials if t.state == TrialState.COMPLETE]
    assert sorted(round(t.params["rl_config.entropy_coeff"], 2) for t in complete) == [0.0, 0.1, 0.2, 0.3]
    retries = [t for t in complete if "retry_of" in t.user_attrs]
    assert {t.user_attrs["retry_of"] for t in retries} == {t.number for t in failed.values()}
    assert all(t.user_attrs["attempt"] == 2 for t in retries)
    # Optuna's own retry lineage (what RetryHeartbeatStaleTrialCallback writes and optuna-dashboard reads).
    for t in retries:
        assert RetryHeartbeatStaleTrialCallback.retried_trial_number(t) == t.user_attrs["retry_of"]
        assert RetryHeartbeatStaleTrialCallback.retry_history(t) == [t.user_attrs["retry_of"]]


def test_retries_exhausted_gives_up_and_counts(tmp_path, monkeypatch):
    study = _run(tmp_path, monkeypatch, trials=1, retries=0, timeout_per_trial=1.5,
                 overrides=["megatron_training.train_iters=200"],
                 backend="sweep_test_backends:SlowCurveBackend")
    (t,) = study.trials
    assert t.state == TrialState.FAIL and t.user_attrs["gave_up"]
    assert "timeout after 1.5 s" in t.user_attrs["failure_reason"]


def test_infeasible_points_are_pruned_before_launch_with_the_rule(tmp_path, monkeypatch):
    # n_samples_per_prompt=1 breaks group_norm's "at least 2 samples" rule; the other point is fine.
    study = _run(tmp_path, monkeypatch, trials=2, concurrency=1,
                 search={"rl_config.n_samples_per_prompt": "choice(1, 8)", "rl_config.clip_ratio": "choice(0.1, 0.2)"},
                 sampler={"name": "grid"})
    infeasible = [t for t in study.trials if t.user_attrs.get("infeasible")]
    assert infeasible and all(t.state == TrialState.PRUNED for t in infeasible)
    assert all("n_samples_per_prompt" in t.user_attrs["pruned_reason"] for t in infeasible)
    assert all(t.params["rl_config.n_samples_per_prompt"] == 1 for t in infeasible)
    assert states(study)["COMPLETE"] == 2  # infeasible points do not use the budget
    # Optuna 5's per-trial constraint, which TPE/NSGA-II/GP read: > 0 infeasible, 0 feasible.
    assert all(t.constraints == {"feasible": 1.0} for t in infeasible)
    assert all(t.constraints == {"feasible": 0.0} for t in study.trials if t.state == TrialState.COMPLETE)


def test_a_spec_with_no_feasible_point_is_refused_before_anything_is_written(tmp_path, monkeypatch):
    with pytest.raises(UserError, match="no point of the search space is feasible"):
        _run(tmp_path, monkeypatch, search={"rl_config.n_samples_per_prompt": "choice(1)"})
    assert not (tmp_path / "studies").exists()


def test_changed_spec_is_refused_unless_forked(tmp_path, monkeypatch):
    _run(tmp_path, monkeypatch, trials=1)
    with pytest.raises(UserError, match="--fork"):
        _run(tmp_path, monkeypatch, trials=1, search={"rl_config.clip_ratio": "interval(0.1, 0.4)"})
    spec = load_spec(str(tmp_path / "s.yaml"))
    forked = run_study(fork(spec, "s2")).study
    assert forked.study_name == "s2" and states(forked) == {"COMPLETE": 1}
    assert (tmp_path / "studies" / "s2" / "journal.log").exists()


def test_rerun_of_a_finished_study_runs_nothing_more(tmp_path, monkeypatch):
    _run(tmp_path, monkeypatch, trials=2)
    again = _run(tmp_path, monkeypatch, trials=2)
    assert states(again) == {"COMPLETE": 2}
    more = _run(tmp_path, monkeypatch, trials=3)  # raising the budget continues the same study
    assert states(more) == {"COMPLETE": 3}


def test_multi_objective_study_records_both_values_and_does_not_prune(tmp_path, monkeypatch):
    study = _run(tmp_path, monkeypatch, trials=2, pruner={"name": "median"},
                 objective=[{"metric": "grpo/score/mean", "direction": "maximize", "reduce": "max"},
                            {"metric": "e2e_tps", "direction": "maximize", "reduce": "last"}])
    assert states(study) == {"COMPLETE": 2}
    for t in study.trials:
        assert len(t.values) == 2 and t.values[1] == 100.0
        assert math.isclose(t.values[0], 1 - math.exp(-(0.05 + t.params["rl_config.clip_ratio"]) * 12))


def test_a_trial_that_ran_all_its_iterations_completes_even_if_the_pruner_says_stop(tmp_path, monkeypatch):
    # Successive halving's first rung at the last iteration (min_resource = train_iters): each later, worse
    # trial loses there. Having run every iteration, it is COMPLETE, not PRUNED at its last step.
    study = _run(tmp_path, monkeypatch, trials=3, concurrency=1,
                 overrides=["megatron_training.train_iters=4"],
                 search={"rl_config.clip_ratio": "choice(0.3, 0.2, 0.1)"}, sampler={"name": "grid", "seed": 0},
                 pruner={"name": "successive_halving", "warmup_steps": 4})
    assert states(study) == {"COMPLETE": 3}
    assert all(t.last_step == 4 for t in study.trials)


def test_a_repeated_proposal_is_never_run_again(tmp_path, monkeypatch):
    # Random sampling over 2 values for 4 trials: repeats are skipped (not counted), then the space is spent.
    study = _run(tmp_path, monkeypatch, trials=4, concurrency=1,
                 search={"rl_config.clip_ratio": "choice(0.1, 0.2)"}, sampler={"name": "random", "seed": 0})
    complete = [t for t in study.trials if t.state == TrialState.COMPLETE]
    assert sorted(t.params["rl_config.clip_ratio"] for t in complete) == [0.1, 0.2]
    repeats = [t for t in study.trials if t.state == TrialState.FAIL]  # FAIL: samplers do not learn from them
    assert len(repeats) >= 50  # it stopped once the sampler only proposed points that had run
    assert all(t.user_attrs["failure_reason"].startswith("not run: the same parameters as trial ") for t in repeats)
    assert all(t.user_attrs["infeasible"] for t in repeats)  # they use none of the budget
    assert not [t for t in study.trials if t.state == TrialState.PRUNED]


def test_a_new_study_refuses_the_trial_folders_of_an_earlier_one(tmp_path, monkeypatch):
    _run(tmp_path, monkeypatch, trials=1)
    (tmp_path / "studies" / "s" / "journal.log").unlink()  # the storage is gone, its trial folders are not
    with pytest.raises(UserError, match="holds the trial folders of an earlier study"):
        _run(tmp_path, monkeypatch, trials=1)
