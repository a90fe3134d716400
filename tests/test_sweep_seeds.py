"""Seeds as parallel jobs of one trial, pruning on their mean curve, intervals, and the confirmation stage.

The real driver, Ray scheduler and Optuna journal storage on the cheap backends of
tests/sweep_test_backends.py (SeedCurveBackend gives each seed its own curve and pace)."""

from __future__ import annotations

import argparse
import io
import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest
import ray
from optuna.trial import TrialState
from rich.console import Console
from sweep_helpers import REPO, TESTS, count_lines, load, run_cli, start_cli, states, wait_for, write_spec
from sweep_test_backends import BASE_SEED

from grpo.errors import UserError
from grpo.report.trial_config import recorded_config
from grpo.report.stats import trial_interval
from grpo.sweep.commands import handlers as commands
from grpo.sweep.run.driver import run_study
from grpo.sweep.spec.load import load_spec
from grpo.sweep.spec.objectives import get_reducer
from grpo.sweep.study.retry import counts_toward_budget

CPUS = 4


@pytest.fixture(scope="module", autouse=True)
def local_ray():
    """One local Ray for the module (4 CPUs); the scheduler reuses it and leaves it running."""
    ray.init(num_cpus=CPUS, include_dashboard=False, log_to_driver=False, configure_logging=False,
             runtime_env={"env_vars": {"PYTHONPATH": str(TESTS)}})
    yield
    ray.shutdown()


def _spec(tmp_path, monkeypatch, **fields):
    monkeypatch.chdir(tmp_path)
    return load_spec(str(write_spec(tmp_path, **fields)))


def _rows(trial) -> dict[int, list[dict]]:
    """The trial's metrics.jsonl rows by seed."""
    out: dict[int, list[dict]] = {}
    for line in open(Path(trial.user_attrs["trial_dir"]) / "metrics.jsonl"):
        row = json.loads(line)
        out.setdefault(row["seed"], []).append(row)
    return out


def _timings(trial) -> list[dict]:
    runs = Path(trial.user_attrs["trial_dir"]) / "runs"
    return [json.loads((runs / f"seed{k}" / "timing.json").read_text()) for k in range(len(trial.user_attrs["seeds"]))]


# -- seeds run at once, trials are admitted whole ----------------------------------------------------------
def _overlap(trial) -> bool:
    spans = _timings(trial)
    return max(s["start"] for s in spans) < min(s["end"] for s in spans)


def test_the_seeds_of_a_trial_run_at_once(tmp_path, monkeypatch):
    calls = []
    spec = _spec(tmp_path, monkeypatch, trials=2, concurrency=1, seeds=3, backend="sweep_test_backends:TimedBackend",
                 overrides=["megatron_training.train_iters=10", "megatron_training.save_interval=5"])
    study = run_study(spec, on_trial_finished=lambda s: calls.append(len(s.trials))).study
    assert states(study) == {"COMPLETE": 2}
    first, second = sorted(study.trials, key=lambda t: t.number)
    for t in (first, second):
        assert t.user_attrs["seeds"] == [BASE_SEED, BASE_SEED + 1, BASE_SEED + 2]
        assert len(t.user_attrs["values_per_seed"][0]) == 3
    # The first trial's three workers start as new processes, one by one on a busy machine; the second
    # reuses them: its three seeds run at the same time.
    assert _overlap(second)
    assert len(calls) == 2  # the finished-trial callback ran once per trial


def test_a_trial_starts_only_when_all_its_seeds_fit(tmp_path, monkeypatch):
    # 4 CPUs, 2 seeds x 2 CPUs: one trial fills the cluster, though concurrency asks for two. Admitting one
    # seed at a time, the second trial would start a seed as soon as the first trial's first seed ended, and
    # half-started trials would wait on each other's workers for ever (the time limit turns that into a FAIL).
    spec = _spec(tmp_path, monkeypatch, trials=3, concurrency=2, seeds=2, backend="sweep_test_backends:TimedBackend",
                 timeout_per_trial=30, retries=0,
                 overrides=["megatron_training.train_iters=10", "megatron_training.save_interval=5",
                            "engine.num_threads=2"])
    study = run_study(spec).study
    assert states(study) == {"COMPLETE": 3}
    assert all(t.user_attrs["resources"] == {"num_cpus": 2} for t in study.trials)
    ordered = sorted(study.trials, key=lambda t: min(r["start"] for r in _timings(t)))
    for before, after in zip(ordered, ordered[1:]):
        assert min(s["start"] for s in _timings(after)) >= max(s["end"] for s in _timings(before))
        assert _overlap(after)  # admitted whole: both seeds start together on the freed workers


def test_a_trial_that_fits_starts_while_a_larger_one_waits_for_room(tmp_path, monkeypatch):
    # Backfill (issue 16's head-of-line blocking): 4 CPUs, trials asking 1 or 4 (engine.num_threads). While the
    # 4-CPU trial 1 waits for trial 0's CPU, the 1-CPU trial 2 asked after it starts on the 3 free ones; the
    # 4-CPU trial 3 asked later still starts after trial 1 (the oldest waiting trial keeps its place).
    spec = _spec(tmp_path, monkeypatch, trials=4, concurrency=3, backend="sweep_test_backends:TimedBackend",
                 sampler={"name": "grid", "seed": 6},
                 search={"engine.num_threads": "choice(1, 4)", "rl_config.clip_ratio": "choice(0.1, 0.2)"},
                 overrides=["megatron_training.train_iters=10", "megatron_training.save_interval=5"])
    study = run_study(spec).study
    assert states(study) == {"COMPLETE": 4}
    by_number = {t.number: t for t in study.trials}
    # The grid's order with seed 6, asked one after the other (checked, so the scenario cannot go vacuous).
    assert [by_number[n].params["engine.num_threads"] for n in range(4)] == [1, 4, 1, 4]
    start = {n: _timings(t)[0]["start"] for n, t in by_number.items()}
    end = {n: _timings(t)[0]["end"] for n, t in by_number.items()}
    assert start[2] < start[1]  # backfilled while trial 1 waited
    assert start[1] >= max(end[0], end[2]) - 0.05 and start[3] >= end[1] - 0.05  # 4 CPUs each: alone
    assert start[1] < start[3]


def test_a_trial_whose_seeds_cannot_fit_together_is_pruned_before_launch(tmp_path, monkeypatch):
    # engine.num_threads is a trial's CPU request: 3 seeds x 2 CPUs never fit 4 CPUs; 3 x 1 do.
    study = run_study(_spec(
        tmp_path, monkeypatch, trials=2, concurrency=1, seeds=3, sampler={"name": "grid"},
        search={"engine.num_threads": "choice(1, 2)", "rl_config.clip_ratio": "choice(0.1, 0.2)"},
    )).study
    infeasible = [t for t in study.trials if t.user_attrs.get("infeasible")]
    assert sorted(t.params["engine.num_threads"] for t in infeasible) == [2, 2]
    for t in infeasible:
        assert t.state == TrialState.PRUNED
        assert t.user_attrs["pruned_reason"].startswith(
            "infeasible: the trial's 3 seeds (seeds) run at once, each with {'num_cpus': 2}, but the cluster has ")
        assert not (Path("studies/s/trials") / str(t.number) / "runs").exists()  # no seed of it ever started
    assert sorted(t.params["engine.num_threads"] for t in study.trials if t.state == TrialState.COMPLETE) == [1, 1]


# -- pruning on the mean curve -----------------------------------------------------------------------------
def test_the_pruner_sees_the_mean_over_seeds_at_the_step_every_seed_reached(tmp_path, monkeypatch):
    # Seed s reports the curve minus 0.3 * (s - 1234), and the seeds run at different paces.
    study = run_study(_spec(tmp_path, monkeypatch, trials=2, concurrency=1, seeds=3,
                            objective={"metric": "grpo/score/mean", "reduce": "auc"},
                            backend="sweep_test_backends:SeedCurveBackend")).study
    auc = get_reducer("auc")
    for t in study.trials:
        curves = {seed: [r["grpo/score/mean"] for r in rows] for seed, rows in _rows(t).items()}
        assert sorted(curves) == [BASE_SEED, BASE_SEED + 1, BASE_SEED + 2]
        assert len({round(c[-1], 6) for c in curves.values()}) == 3  # the seeds' curves differ
        expected = {step: sum(auc.reduce(c[:step]) for c in curves.values()) / 3 for step in range(1, 13)}
        assert t.intermediate_values == pytest.approx(expected, rel=1e-9)
        assert t.value == pytest.approx(expected[12], rel=1e-9)


def test_a_pruned_trial_names_the_mean_of_its_seeds(tmp_path, monkeypatch):
    study = run_study(_spec(
        tmp_path, monkeypatch, trials=3, concurrency=1, seeds=3, sampler={"name": "grid", "seed": 3},  # 0.0 last
        overrides=["megatron_training.train_iters=20"], search={"rl_config.clip_ratio": "choice(0.3, 0.29, 0.0)"},
        pruner={"name": "median", "warmup_steps": 3, "options": {"n_startup_trials": 2}},
        backend="sweep_test_backends:SlowSeedCurveBackend",
    )).study
    (pruned,) = [t for t in study.trials if t.state == TrialState.PRUNED]
    assert pruned.params["rl_config.clip_ratio"] == 0.0
    reason = pruned.user_attrs["pruned_reason"]
    found = re.fullmatch(r"pruned by the median pruner at iteration (\d+) of 20: grpo/score/mean \(last\) so far "
                         r"(.+), mean of 3 seeds", reason)
    assert found, reason
    at = int(found.group(1))
    assert found.group(2) == f"{pruned.intermediate_values[at]:.4g}"
    # No seed got past the step it was pruned at by more than what it ran before the stop reached it.
    assert all(rows[-1]["iteration"] < 20 for rows in _rows(pruned).values())


# -- a failed seed -----------------------------------------------------------------------------------------
@pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")
def test_one_failed_seed_fails_the_trial_and_the_retry_resumes_each_seed_from_its_checkpoint(tmp_path, monkeypatch):
    iters = 40
    study = run_study(_spec(tmp_path, monkeypatch, trials=1, concurrency=1, seeds=3, retries=1,
                            overrides=[f"megatron_training.train_iters={iters}", "megatron_training.save_interval=4"],
                            backend="sweep_test_backends:SeedFaultBackend")).study
    failed, retry = sorted(study.trials, key=lambda t: t.number)
    assert failed.state == TrialState.FAIL and failed.user_attrs["retried"]
    assert failed.user_attrs["failure_reason"] == f"seed {BASE_SEED + 1}: injected failure of one seed"
    assert failed.user_attrs["last_log_lines"] == ["seed log line"]
    stopped = _rows(failed)[BASE_SEED + 2][-1]["iteration"]
    assert stopped < iters  # the slow sibling was stopped, not left to finish
    assert retry.state == TrialState.COMPLETE and retry.user_attrs["retry_of"] == failed.number
    resumed = retry.user_attrs["resumed_at_iteration"]
    assert resumed[str(BASE_SEED)] == iters  # it had completed
    assert resumed[str(BASE_SEED + 1)] == 4  # it failed at 6, after its checkpoint at 4
    assert 4 <= resumed[str(BASE_SEED + 2)] <= stopped and resumed[str(BASE_SEED + 2)] % 4 == 0
    starts = [json.loads(line) for line in open(tmp_path / "studies/s/trials/starts.jsonl")]
    again = {s["seed"]: s["start"] for s in starts if s["trial"] == str(retry.number)}
    # Each seed continued after its own checkpoint; the completed one ran zero iterations.
    assert again == {seed: at + 1 for seed, at in ((int(k), v) for k, v in resumed.items())}
    assert again[BASE_SEED] == iters + 1
    for rows in _rows(retry).values():
        assert [r["iteration"] for r in rows] == list(range(1, iters + 1))
    assert sorted(retry.intermediate_values) == list(range(1, iters + 1))


# -- intervals ---------------------------------------------------------------------------------------------
def test_a_trial_stores_its_value_interval_and_status_best_and_the_summary_show_it(tmp_path, monkeypatch, capsys):
    spec = _spec(tmp_path, monkeypatch, trials=2, concurrency=1, seeds=3,
                 backend="sweep_test_backends:SeedCurveBackend")
    study = run_study(spec, quiet=False).study
    said = capsys.readouterr().out
    for t in study.trials:
        ((low, high),) = t.user_attrs["value_interval"]
        seeds = t.user_attrs["values_per_seed"][0]
        assert min(seeds) <= low < t.value < high <= max(seeds)
        stats = trial_interval(t)  # the statistics the report computes agree with what was stored
        assert (stats.low, stats.high) == pytest.approx((low, high))
        assert f"trial {t.number} complete: grpo/score/mean={stats.text()}" in said
    assert "(3 seeds, 95% CI)" in said

    commands.cmd_status(argparse.Namespace(spec=str(spec.path), json=True))
    rows = {r["number"]: r for r in json.loads(capsys.readouterr().out)["trials"]}
    for t in study.trials:
        assert rows[t.number]["value_interval"] == t.user_attrs["value_interval"]
        assert rows[t.number]["seeds"] == 3 and rows[t.number]["confirmation_of"] is None
    monkeypatch.setenv("COLUMNS", "300")  # the table unwrapped
    commands.cmd_status(argparse.Namespace(spec=str(spec.path), json=False))
    table = capsys.readouterr().out
    low, high = study.best_trial.user_attrs["value_interval"][0]
    assert f"{study.best_trial.value:.4g} [{low:.4g}, {high:.4g}]" in table

    commands.cmd_best(argparse.Namespace(spec=str(spec.path), export=None))
    best = json.loads(capsys.readouterr().out)
    assert best["number"] == study.best_trial.number and best["interval"] == [low, high] and best["seeds"] == 3
    out = io.StringIO()
    commands._print_summary(Console(file=out, width=300), spec, study)
    assert f"best: trial {best['number']} grpo/score/mean={trial_interval(study.best_trial).text()}" in out.getvalue()


def test_a_one_seed_trial_has_no_interval(tmp_path, monkeypatch):
    study = run_study(_spec(tmp_path, monkeypatch, trials=1)).study
    (t,) = study.trials
    assert t.user_attrs["value_interval"] == [None] and t.user_attrs["seeds"] == [BASE_SEED]


# -- the report refresh and the environment record -------------------------------------------------------
def test_the_report_is_refreshed_at_most_every_two_seconds_and_a_failure_is_one_warning(capsys):
    now = [0.0]
    written = []

    def write(study):
        written.append(now[0])
        if study == "broken":
            raise RuntimeError("disk full\nsecond line")

    refresh = commands.ThrottledReport(write, clock=lambda: now[0])
    for t in (0.0, 0.5, 1.9, 2.0, 2.1, 4.5):
        now[0] = t
        refresh("study")
    assert written == [0.0, 2.0, 4.5]
    for t in (10.0, 20.0):
        now[0] = t
        refresh("broken")  # never raises
    err = capsys.readouterr().err
    assert err == "warning: the report was not refreshed: RuntimeError: disk full\n"  # one line, once


def test_a_report_failure_with_an_empty_message_is_one_warning_naming_its_class(capsys):
    """A bare ``assert`` in the report has no message: the warning names the error (it used to be an
    IndexError from the warning's own formatting, which hid the real error and skipped the deduplication)."""

    def write(study):
        raise AssertionError()

    refresh = commands.ThrottledReport(write, clock=lambda: 0.0)
    refresh("study")
    assert capsys.readouterr().err == "warning: the report was not refreshed: AssertionError\n"


def test_a_new_study_records_its_environment(tmp_path, monkeypatch):
    study = run_study(_spec(tmp_path, monkeypatch, trials=1)).study
    env = study.user_attrs["environment"]
    assert set(env) == {"python", "packages", "commit", "platform"}
    assert set(env["packages"]) == {"torch", "optuna", "ray", "hydra-core", "pydantic", "plotly", "pandas"}
    import optuna

    assert env["packages"]["optuna"] == optuna.__version__
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True)
    assert env["commit"] == (head.stdout.strip() if head.returncode == 0 else None)


# -- the confirmation stage --------------------------------------------------------------------------------
CONFIRM = dict(trials=3, concurrency=1, seeds=1, sampler={"name": "grid"},
               search={"rl_config.clip_ratio": "choice(0.1, 0.2, 0.3)"},
               pruner={"name": "median", "options": {"n_startup_trials": 3}},  # prunes from the 4th trial on
               confirm={"top_k": 2, "seeds": 3})


def _confirmations(study):
    return [t for t in study.trials if t.user_attrs.get("confirmation_of") is not None]


def test_the_confirmation_stage_reruns_the_top_trials_on_fresh_seeds_outside_the_budget(tmp_path, monkeypatch, capsys):
    spec = _spec(tmp_path, monkeypatch, backend="sweep_test_backends:SlowSeedCurveBackend", **CONFIRM)
    study = run_study(spec, quiet=False).study
    said = capsys.readouterr().out
    search = [t for t in study.trials if t.user_attrs.get("confirmation_of") is None]
    assert len(search) == 3 and all(t.state == TrialState.COMPLETE for t in search)
    top = sorted(search, key=lambda t: -t.value)[:2]
    confirmations = _confirmations(study)
    assert sorted(t.user_attrs["confirmation_of"] for t in confirmations) == sorted(t.number for t in top)
    fresh = [BASE_SEED + 1, BASE_SEED + 2, BASE_SEED + 3]  # after the search's one seed, the same for both
    for t in confirmations:
        source = next(s for s in search if s.number == t.user_attrs["confirmation_of"])
        assert t.params == source.params and t.user_attrs["seeds"] == fresh
        # Never pruned, though their fresh seeds learn worse than every search trial at every step
        # (the median pruner, past its three start-up trials, would have stopped them).
        assert t.state == TrialState.COMPLETE and len(t.user_attrs["values_per_seed"][0]) == 3
        assert all(v < min(s.intermediate_values[step] for s in search) for step, v in t.intermediate_values.items())
        assert not counts_toward_budget(t)
    assert "confirmation stage: trial(s)" in said
    assert re.search(r"best: trial \d+, .* \(3 seeds, 95% CI\) \(confirmation stage\); runner-up: trial \d+", said)

    before = len(study.trials)
    again = run_study(spec).study  # a rerun of the finished study adds nothing
    assert len(again.trials) == before
    # Two drivers reaching the stage at once may both enqueue a confirmation: only the first one runs.
    source = confirmations[0].user_attrs["confirmation_of"]
    again.enqueue_trial(confirmations[0].params, user_attrs={"confirmation_of": source, "attempt": 1, "seeds": fresh})
    (double,) = run_study(spec).study.trials[before:]
    assert double.state == TrialState.FAIL and not counts_toward_budget(double)
    assert double.user_attrs["failure_reason"] == (
        f"not run: trial {min(t.number for t in confirmations if t.user_attrs['confirmation_of'] == source)} "
        f"already confirms trial {source}")
    commands.cmd_status(argparse.Namespace(spec=str(spec.path), json=True))
    rows = json.loads(capsys.readouterr().out)["trials"]
    marked = [r["confirmation_of"] for r in rows if r["confirmation_of"] is not None and r["state"] == "COMPLETE"]
    assert sorted(marked) == sorted(t.number for t in top)


def test_a_driver_killed_during_the_confirmation_stage_finishes_only_what_is_missing(tmp_path):
    spec = write_spec(tmp_path, backend="sweep_test_backends:SlowSeedCurveBackend", cluster={"num_cpus": CPUS},
                      overrides=["megatron_training.train_iters=20", "megatron_training.save_interval=5"], **CONFIRM)
    proc = start_cli(["run", str(spec), "--quiet", "--no-report"], cwd=tmp_path)
    # Trials 0-2 search, 3 and 4 confirm: kill while trial 4 runs, its three seeds past a checkpoint.
    second = tmp_path / "studies" / "s" / "trials" / "4" / "metrics.jsonl"
    wait_for(lambda: count_lines(second) >= 3 * 7 or proc.poll() is not None, 240, "trial 4 to pass a checkpoint")
    assert proc.poll() is None, proc.stdout.read()
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    killed = load(tmp_path)
    assert [t.state for t in _confirmations(killed)] == [TrialState.COMPLETE, TrialState.RUNNING]

    done = run_cli(["run", str(spec), "--quiet", "--no-report"], cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    study = load(tmp_path)
    confirmations = _confirmations(study)
    complete = [t for t in confirmations if t.state == TrialState.COMPLETE]
    assert len(complete) == 2 and len({t.user_attrs["confirmation_of"] for t in complete}) == 2
    first = next(t for t in confirmations if t.number == 3)
    assert first.state == TrialState.COMPLETE  # finished before the kill: not repeated
    assert sum(1 for t in confirmations if t.user_attrs["confirmation_of"] == first.user_attrs["confirmation_of"]) == 1
    (dead,) = [t for t in confirmations if t.state == TrialState.FAIL]
    assert dead.number == 4 and "driver died" in dead.user_attrs["failure_reason"]
    (retry,) = [t for t in complete if t.user_attrs.get("retry_of") == 4]
    assert retry.user_attrs["confirmation_of"] == dead.user_attrs["confirmation_of"]
    assert retry.user_attrs["seeds"] == dead.user_attrs["seeds"] == [BASE_SEED + 1, BASE_SEED + 2, BASE_SEED + 3]
    assert retry.user_attrs["attempt"] == 1  # the driver's death cost no attempt
    assert all(at >= 5 for at in retry.user_attrs["resumed_at_iteration"].values())  # each seed resumed
    assert len([t for t in study.trials if counts_toward_budget(t)]) == 3  # the search was not rerun


def test_validate_prints_what_the_confirmation_stage_costs(tmp_path, monkeypatch, capsys):
    spec = write_spec(tmp_path, seeds=2, trials=4, confirm={"top_k": 3, "seeds": 5})
    monkeypatch.chdir(tmp_path)
    assert commands.validate_spec(argparse.Namespace(target=str(spec))) == 0
    out = capsys.readouterr().out
    assert "confirmation stage: the top 3 trial(s) again on 5 fresh seeds each (run at once) ~ 180 more GRPO " \
           "iterations (+188% of the search)" in " ".join(out.split())


def test_promotion_reruns_the_top_trials_on_another_base_with_its_own_overrides(tmp_path, monkeypatch):
    # confirm.base: the confirmation trials compose that config with confirm.overrides (the spec's overrides
    # belong to the small base) and the sampled values; their attrs name the base the report ranks them on.
    promoted = tmp_path / "big.yaml"
    promoted.write_text("defaults:\n  - grpo_trainer_tiny_cpu\n  - _self_\nmegatron_training:\n  train_iters: 9\n")
    fields = {**CONFIRM, "pruner": "none"}
    fields["confirm"] = {"top_k": 2, "seeds": 2, "base": "big.yaml",
                         "overrides": ["megatron_training.save_interval=3", "rl_config.entropy_coeff=0.001"]}
    spec = _spec(tmp_path, monkeypatch, backend="sweep_test_backends:SeedCurveBackend", **fields)
    assert spec.confirm is not None and spec.confirm.base == str(promoted.resolve())
    study = run_study(spec).study
    confirmations = _confirmations(study)
    assert len(confirmations) == 2
    for t in confirmations:
        assert t.user_attrs["promoted_base"] == str(promoted.resolve())
        config = recorded_config(t, study).config
        assert config["megatron_training"]["train_iters"] == 9  # the promoted base's, not the spec's 12
        assert config["rl_config"]["entropy_coeff"] == 0.001 and config["megatron_training"]["save_interval"] == 3
        source = study.trials[t.user_attrs["confirmation_of"]]
        assert config["rl_config"]["clip_ratio"] == source.params["rl_config.clip_ratio"]
        assert sorted({r["iteration"] for rows in _rows(t).values() for r in rows}) == list(range(1, 10))
    search = [t for t in study.trials if t.user_attrs.get("confirmation_of") is None]
    assert all(recorded_config(t, study).config["megatron_training"]["train_iters"] == 12 for t in search)


def test_a_promotion_base_that_does_not_compose_is_refused_before_anything_runs(tmp_path, monkeypatch):
    fields = {**CONFIRM, "confirm": {"top_k": 2, "seeds": 2, "base": "grpo_trainer_tiny_cpu",
                                     "overrides": ["rl_config.clip_ratio=7"]}}
    spec = _spec(tmp_path, monkeypatch, backend="sweep_test_backends:SeedCurveBackend", **fields)
    with pytest.raises(UserError) as err:
        run_study(spec)
    assert str(err.value).startswith(f"{spec.source}: confirm.base: grpo_trainer_tiny_cpu: ")
    assert not (tmp_path / "studies").exists()
