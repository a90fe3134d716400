"""The driver with the real Ray scheduler and real Optuna journal storage, on cheap curve backends
(tests/sweep_test_backends.py), so scheduling, pruning, faults, retries and budgets are tested fast."""

from __future__ import annotations

import json
import math
import re
import socket
import time

import pytest
from optuna.storages import RetryHeartbeatStaleTrialCallback
from optuna.trial import TrialState
from sweep_helpers import load, module_ray, states, write_spec

from grpo.errors import UserError
from grpo.report.trial_config import recorded_config
from grpo.sweep.run.driver import forked as fork
from grpo.sweep.run.driver import run_study
from grpo.sweep.spec.load import load_spec


@pytest.fixture(scope="module", autouse=True)
def local_ray():
    with module_ray():
        yield


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
        config = recorded_config(t, reloaded).config  # the trial folder's config.yaml (issue 16)
        assert config["rl_config"]["clip_ratio"] == pytest.approx(t.params["rl_config.clip_ratio"])
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
    # Random sampling over 2 values for 4 trials: repeats are told the earlier result (not run, not counted),
    # then the space is spent.
    study = _run(tmp_path, monkeypatch, trials=4, concurrency=1,
                 search={"rl_config.clip_ratio": "choice(0.1, 0.2)"}, sampler={"name": "random", "seed": 0})
    ran = [t for t in study.trials if "repeat_of" not in t.user_attrs]
    assert sorted(t.params["rl_config.clip_ratio"] for t in ran) == [0.1, 0.2]
    assert all(t.state == TrialState.COMPLETE and t.user_attrs.get("trial_dir") for t in ran)
    repeats = [t for t in study.trials if "repeat_of" in t.user_attrs]
    assert len(repeats) >= 50  # it stopped once the sampler only proposed points that had run
    by_number = {t.number: t for t in ran}
    for t in repeats:  # COMPLETE with the earlier trial's value: the sampler learns the point is taken
        earlier = by_number[t.user_attrs["repeat_of"]]
        assert t.state == TrialState.COMPLETE and t.values == earlier.values and t.params == earlier.params
        assert not t.intermediate_values and "trial_dir" not in t.user_attrs  # never launched
    # Not results: status and the report's view of the study leave them out.
    from grpo.report._snapshot import snapshot
    from grpo.sweep.commands.handlers import _status_rows

    assert sorted(r["number"] for r in _status_rows(study)) == sorted(by_number)
    assert sorted(t.number for t in snapshot(study).get_trials()) == sorted(by_number)


def test_tpe_on_a_small_categorical_space_keeps_finding_new_points(tmp_path, monkeypatch):
    # Mirrors the stall benchmarks/search_efficiency.py measured: TPE ignores FAIL trials, so when repeats
    # were told FAIL it proposed the same point until the driver called the space spent after ~6 trials.
    # Told the earlier result, TPE moves on: 8 distinct points of the 3 x 3 grid run.
    study = _run(tmp_path, monkeypatch, trials=8, concurrency=1,
                 search={"rl_config.clip_ratio": "choice(0.1, 0.2, 0.3)",
                         "rl_config.init_kl_coef": "choice(0.0, 0.01, 0.05)"},
                 sampler={"name": "tpe", "seed": 0, "options": {"n_startup_trials": 2}})
    ran = [t for t in study.trials if "repeat_of" not in t.user_attrs]
    assert len(ran) == 8 and all(t.state == TrialState.COMPLETE for t in ran)
    assert len({tuple(sorted(t.params.items())) for t in ran}) == 8


def test_collapse_rule_stops_a_trial_below_its_base_and_the_objective_leaves_the_base_out(tmp_path, monkeypatch):
    # pruner.collapse: held-out accuracy 0.5 against a base of 0.66 (more than 0.10 below) stops the trial at
    # its first evaluation; a run just under its base (within 0.10) completes, and its objective (max) is
    # taken over the evaluations after iteration 0: the base's own 0.66 is not what the trial achieved.
    study = _run(tmp_path, monkeypatch, trials=2, concurrency=1, backend="sweep_test_backends:EvalCurveBackend",
                 search={"rl_config.clip_ratio": "choice(0.1, 0.3)"}, sampler={"name": "grid", "seed": 0},
                 objective={"metric": "eval/acc_greedy", "reduce": "max"},
                 pruner={"name": "none", "collapse": {"below_base": 0.1}})
    by_clip = {t.params["rl_config.clip_ratio"]: t for t in study.trials}
    collapsed, kept = by_clip[0.3], by_clip[0.1]
    assert collapsed.state == TrialState.PRUNED
    assert collapsed.user_attrs["pruned_reason"] == (
        "pruned by the collapse rule at iteration 2 of 12: eval/acc_greedy 0.5 is more than 0.1 below the "
        "base policy's 0.66"
    )
    assert kept.state == TrialState.COMPLETE and kept.value == pytest.approx(0.66 - 0.06 / 12)


def test_a_full_disk_in_the_driver_stops_the_study_cleanly_and_it_resumes(tmp_path, monkeypatch):
    # ENOSPC when the driver appends a trial's metrics (fault injected at the driver's own write): one line,
    # the running trials stop as on Ctrl-C (no attempt used, nothing left RUNNING), and the rerun finishes.
    import errno

    from grpo.errors import StudyStopped
    from grpo.sweep.run.live import LiveTrial

    real_record, calls = LiveTrial.record, []

    def record(self, seed, iteration, metrics):
        calls.append(iteration)
        if len(calls) == 8:
            raise OSError(errno.ENOSPC, "No space left on device", str(self.trial_dir / "metrics.jsonl"))
        return real_record(self, seed, iteration, metrics)

    monkeypatch.setattr(LiveTrial, "record", record)
    fields = dict(trials=3, concurrency=2, backend="sweep_test_backends:SlowCurveBackend")
    with pytest.raises(StudyStopped, match=r"metrics.jsonl: No space left on device: the driver stopped the study"):
        _run(tmp_path, monkeypatch, **fields)
    stopped = load(tmp_path)
    assert not [t for t in stopped.trials if t.state == TrialState.RUNNING]
    assert all(not t.user_attrs.get("gave_up") for t in stopped.trials)
    monkeypatch.setattr(LiveTrial, "record", real_record)
    again = _run(tmp_path, monkeypatch, **fields)
    complete = [t for t in again.trials if t.state == TrialState.COMPLETE]
    assert len(complete) == 3 and all(t.user_attrs["attempt"] == 1 for t in complete)


def test_optunas_own_tools_open_the_study_by_the_storage_we_print(tmp_path, monkeypatch):
    # optuna-dashboard (optuna_dashboard/_storage_url.py guess_storage_from_url) and the optuna CLI
    # (optuna/cli.py _get_storage) read a path that is a file as a journal; our `journal:` spelling they reject.
    import urllib.request

    from optuna.cli import _get_storage
    from optuna_dashboard._storage_url import guess_storage_from_url
    from sweep_helpers import start_cli

    _run(tmp_path, monkeypatch, trials=1)
    spec = load_spec(str(tmp_path / "s.yaml"))
    assert spec.tool_storage() == spec.storage_url()[len("journal:"):]
    for storage in (guess_storage_from_url(spec.tool_storage()), _get_storage(spec.tool_storage(), None)):
        assert [s.study_name for s in storage.get_all_studies()] == ["s"]
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    proc = start_cli(["dashboard", "s.yaml", "--port", str(port)], cwd=tmp_path)
    try:
        deadline, body = time.monotonic() + 60, ""
        while time.monotonic() < deadline and '"study_name": "s"' not in body:
            try:
                body = urllib.request.urlopen(f"http://127.0.0.1:{port}/api/studies", timeout=2).read().decode()
            except OSError:
                time.sleep(0.5)
        assert '"study_name": "s"' in body
        # The values' names (Study.set_metric_names), as the dashboard serves them (optuna_dashboard/
        # _serializer.py serialize_study_detail: "objective_names" from the study's system attrs).
        detail = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/api/studies/0", timeout=10).read())
        assert detail["objective_names"] == ["grpo/score/mean (last)"]
    finally:
        proc.kill()
        proc.wait()


def test_a_new_study_refuses_the_trial_folders_of_an_earlier_one(tmp_path, monkeypatch):
    _run(tmp_path, monkeypatch, trials=1)
    (tmp_path / "studies" / "s" / "journal.log").unlink()  # the storage is gone, its trial folders are not
    with pytest.raises(UserError, match="holds the trial folders of an earlier study"):
        _run(tmp_path, monkeypatch, trials=1)
