"""Crash safety with real processes: SIGKILL the driver mid-study and rerun; two drivers on one study."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from optuna.trial import TrialState

from grpo.report.trial_config import recorded_config
from pg_server import postgres_bin, postgres_server
from sweep_helpers import cli_env, count_lines, load, run_cli, start_cli, states, wait_for, write_spec


def _kill_group(proc: subprocess.Popen) -> None:
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)


def test_sigkilled_driver_resumes_from_checkpoint_without_rerunning_finished_trials(tmp_path):
    spec = write_spec(tmp_path, trials=3, concurrency=1,
                      overrides=["megatron_training.train_iters=20", "megatron_training.save_interval=5"],
                      search={"rl_config.clip_ratio": "choice(0.1, 0.2, 0.3)"}, sampler={"name": "grid"},
                      backend="sweep_test_backends:SlowCurveBackend")
    proc = start_cli(["run", str(spec), "--quiet", "--no-report"], cwd=tmp_path)
    second = tmp_path / "studies" / "s" / "trials" / "1" / "metrics.jsonl"
    wait_for(lambda: count_lines(second) >= 8 or proc.poll() is not None, 120, "trial 1 to pass its first checkpoint")
    assert proc.poll() is None, proc.stdout.read()
    _kill_group(proc)

    interrupted = load(tmp_path)
    assert states(interrupted) == {"COMPLETE": 1, "RUNNING": 1}

    done = run_cli(["run", str(spec), "--quiet", "--no-report"], cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    study = load(tmp_path)
    complete = [t for t in study.trials if t.state == TrialState.COMPLETE]
    assert len(complete) == 3
    assert len({t.params["rl_config.clip_ratio"] for t in complete}) == 3  # no parameter set ran twice
    (dead,) = [t for t in study.trials if t.state == TrialState.FAIL]
    assert dead.number == 1 and "driver died" in dead.user_attrs["failure_reason"]
    (retry,) = [t for t in complete if t.user_attrs.get("retry_of") == 1]
    assert retry.params == dead.params
    assert retry.user_attrs["attempt"] == 1  # the driver's death did not use up one of the trial's retries
    resumed_at = retry.user_attrs["resumed_at_iteration"]
    assert list(resumed_at.values())[0] >= 5  # continued from the checkpoint, not from iteration 1
    config = recorded_config(retry, study).config  # the trial folder's config.yaml
    assert config["actor_config"]["load"].startswith(str(tmp_path / "studies" / "s" / "trials" / "1"))
    rows = [json.loads(line) for line in open(Path(retry.user_attrs["trial_dir"]) / "metrics.jsonl")]
    assert [r["iteration"] for r in rows] == list(range(1, 21))
    assert sorted(retry.intermediate_values) == list(range(1, 21))


def _run_two_drivers(tmp_path, spec):
    procs = [start_cli(["run", str(spec), "--quiet", "--no-report"], cwd=tmp_path) for _ in range(2)]
    for p in procs:
        out, _ = p.communicate(timeout=300)
        assert p.returncode == 0, out


def _assert_shared_budget(study, trials):
    numbers = [t.number for t in study.trials]
    assert len(numbers) == len(set(numbers))
    assert states(study).get("COMPLETE") == trials
    assert all(t.state != TrialState.RUNNING for t in study.trials)
    drivers = {t.user_attrs["driver"]["pid"] for t in study.trials if t.state == TrialState.COMPLETE}
    assert len(drivers) == 2  # both drivers really ran trials


def test_two_drivers_on_one_journal_share_the_budget(tmp_path):
    spec = write_spec(tmp_path, trials=6, concurrency=1, overrides=["megatron_training.train_iters=10"],
                      backend="sweep_test_backends:SlowCurveBackend")
    _run_two_drivers(tmp_path, spec)
    _assert_shared_budget(load(tmp_path), 6)


@pytest.fixture
def postgres_url():
    bindir = postgres_bin()
    if bindir is None:
        pytest.skip("PostgreSQL server binaries not installed (Debian package postgresql; .ci/setup installs it)")
    with postgres_server(bindir) as url:
        yield url


@pytest.mark.postgres
def test_two_drivers_on_postgresql_share_the_budget(tmp_path, postgres_url):
    spec = write_spec(tmp_path, trials=6, concurrency=1, overrides=["megatron_training.train_iters=10"],
                      storage=postgres_url, backend="sweep_test_backends:SlowCurveBackend")
    _run_two_drivers(tmp_path, spec)
    _assert_shared_budget(load(tmp_path, storage=postgres_url), 6)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_ctrl_c_stops_sampling_lets_trials_stop_and_leaves_a_resumable_study(tmp_path, sig):
    """SIGTERM (what `kill` and job schedulers send) behaves as the first Ctrl-C."""
    spec = write_spec(tmp_path, trials=3, concurrency=1,
                      overrides=["megatron_training.train_iters=30", "megatron_training.save_interval=5"],
                      search={"rl_config.clip_ratio": "choice(0.1, 0.2, 0.3)"}, sampler={"name": "grid"},
                      backend="sweep_test_backends:SlowCurveBackend")
    proc = start_cli(["run", str(spec), "--no-report"], cwd=tmp_path)
    first = tmp_path / "studies" / "s" / "trials" / "0" / "metrics.jsonl"
    wait_for(lambda: count_lines(first) >= 7 or proc.poll() is not None, 120, "trial 0 to checkpoint")
    proc.send_signal(sig)  # the driver only, as a terminal's Ctrl-C reaches the foreground job
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 130, out
    assert "rerun the same command to resume" in out
    study = load(tmp_path)
    # No new trial was sampled; the running one stopped and its retry waits for the next run.
    assert states(study) == {"FAIL": 1, "WAITING": 1}
    (stopped,) = [t for t in study.trials if t.state == TrialState.FAIL]
    assert "interrupted" in stopped.user_attrs["failure_reason"] and stopped.user_attrs["retried"]
    assert stopped.last_step < 30

    done = run_cli(["run", str(spec), "--quiet", "--no-report"], cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    study = load(tmp_path)
    assert states(study) == {"FAIL": 1, "COMPLETE": 3}
    (retry,) = [t for t in study.trials if t.user_attrs.get("retry_of") == 0]
    assert retry.user_attrs["attempt"] == 1  # an interruption does not use up a retry
    assert list(retry.user_attrs["resumed_at_iteration"].values())[0] >= 5


def _until_a_trial_starts(proc: subprocess.Popen) -> bool:
    """Read the driver's lines until a trial starts (True) or it exits (False), whatever its start-up time."""
    return any(" started" in line for line in proc.stdout)


def test_random_sigkills_of_the_driver_lose_and_repeat_nothing(tmp_path):
    """Kill the driver at 5 random moments of a 6-trial study, rerunning after each: the study ends with
    exactly 6 complete trials on 6 distinct parameter sets, none rerun after it completed, nothing RUNNING,
    and no attempt charged for the driver's deaths (seeded random sampler over 6 values: a restart must
    not replay its first proposals)."""
    import random

    spec = write_spec(tmp_path, trials=6, concurrency=2, retries=1,
                      overrides=["megatron_training.train_iters=10", "megatron_training.save_interval=3"],
                      search={"rl_config.clip_ratio": "choice(0.05, 0.1, 0.15, 0.2, 0.25, 0.3)"},
                      sampler={"name": "random", "seed": 0}, backend="sweep_test_backends:SlowCurveBackend")
    rng = random.Random(1234)
    landed = 0
    for _ in range(5):
        proc = start_cli(["run", str(spec), "--no-report"], cwd=tmp_path)
        started = _until_a_trial_starts(proc)
        time.sleep(rng.uniform(0.0, 2.5))  # after a trial started: kills land while trials run and while asking
        if proc.poll() is None:
            _kill_group(proc)
            landed += started
        proc.wait()
    assert landed >= 3, "the kills must land among running trials"
    done = run_cli(["run", str(spec), "--quiet", "--no-report"], cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    study = load(tmp_path)
    # A repeated proposal is told the earlier result without running (repeat_of): not a trial that ran.
    complete = [t for t in study.trials if t.state == TrialState.COMPLETE and "repeat_of" not in t.user_attrs]
    assert len(complete) == 6
    assert len({t.params["rl_config.clip_ratio"] for t in complete}) == 6
    assert not [t for t in study.trials if t.state == TrialState.RUNNING]
    assert all(t.user_attrs["attempt"] == 1 for t in complete)  # deaths of the driver cost no attempt
    for t in study.trials:  # a point that completed was never started again afterwards
        later = [u for u in complete if u.number > t.number and u.params == t.params]
        assert "repeat_of" not in t.user_attrs or "trial_dir" not in t.user_attrs  # repeats never launch
        assert not (t.state == TrialState.COMPLETE and later), (t.number, [u.number for u in later])


def test_a_study_with_no_complete_trial_exits_non_zero(tmp_path):
    spec = write_spec(tmp_path, trials=1, concurrency=1, retries=0,
                      search={"rl_config.entropy_coeff": "choice(0.1)"}, backend="sweep_test_backends:FaultBackend")
    done = run_cli(["run", str(spec), "--quiet", "--no-report"], cwd=tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "ended with no complete trial" in done.stderr and "Traceback" not in done.stderr
    assert states(load(tmp_path)) == {"FAIL": 1}


def test_a_journal_lock_left_by_a_killed_driver_is_released(tmp_path):
    """A driver SIGKILLed inside Optuna's journal write leaves its symlink lock behind; the next driver
    waits out the grace period (study_store.JOURNAL_LOCK_GRACE_S) and goes on. Before, with the relative
    journal path, the lock dangled and the next driver spun forever (seen in benchmarks/kill_resume.py)."""
    spec = write_spec(tmp_path, trials=1, concurrency=1)
    assert run_cli(["run", str(spec), "--quiet", "--no-report"], cwd=tmp_path).returncode == 0
    journal = (tmp_path / "studies" / "s" / "journal.log").resolve()
    os.symlink(str(journal), str(journal) + ".lock")  # what a kill inside JournalFileSymlinkLock leaves
    write_spec(tmp_path, trials=2, concurrency=1)
    started = time.monotonic()
    done = run_cli(["run", str(spec), "--quiet", "--no-report"], cwd=tmp_path, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert states(load(tmp_path)) == {"COMPLETE": 2}
    assert time.monotonic() - started < 90


def test_status_shows_the_retry_chain_and_survives_a_closed_pipe(tmp_path):
    spec = write_spec(tmp_path, trials=2, concurrency=1, retries=1, sampler={"name": "grid"},
                      search={"rl_config.entropy_coeff": "choice(0.0, 0.1)"}, backend="sweep_test_backends:FaultBackend")
    assert run_cli(["run", str(spec), "--quiet", "--no-report"], cwd=tmp_path).returncode == 0
    (failed,) = [t for t in load(tmp_path).trials if t.state == TrialState.FAIL]
    done = run_cli(["status", str(spec), "--json"], cwd=tmp_path)
    rows = json.loads(done.stdout)["trials"]
    assert [r["retry_of"] for r in rows if r["retry_of"] is not None] == [failed.number]
    # `| true` exits before the CLI writes: its output meets a closed pipe every time.
    piped = subprocess.run(f"{sys.executable} -m grpo.cli status {spec} --json | true", shell=True,
                           cwd=tmp_path, env=cli_env(), capture_output=True, text=True, timeout=120)
    assert piped.stderr == "", piped.stderr
