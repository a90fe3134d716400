"""A study on a real PostgreSQL server (tests/pg_server.py) that is restarted while its trials run: the driver
waits the outage out and completes the study itself; an outage longer than ``storage_retry_timeout`` stops
the study cleanly (one line, exit code 1) and the rerun completes it. Nothing lost, nothing repeated."""

from __future__ import annotations

import time

import pytest
from optuna.trial import TrialState

from pg_server import postgres_bin, postgres_instance
from sweep_helpers import count_lines, load, run_cli, start_cli, states, wait_for, write_spec

pytestmark = pytest.mark.postgres
TRIALS = 5


@pytest.fixture
def postgres():
    bindir = postgres_bin()
    if bindir is None:
        pytest.skip("PostgreSQL server binaries not installed (Debian package postgresql; .ci/setup installs it)")
    with postgres_instance(bindir) as server:
        yield server


def _spec(tmp_path, url, **fields):
    return write_spec(tmp_path, trials=TRIALS, concurrency=2, storage=url,
                      overrides=["megatron_training.train_iters=30", "megatron_training.save_interval=5"],
                      backend="sweep_test_backends:SlowCurveBackend", **fields)  # fmt: skip


def _until_a_trial_runs(tmp_path, proc) -> None:
    trials = tmp_path / "studies" / "s" / "trials"
    wait_for(lambda: any(count_lines(p) >= 3 for p in trials.glob("*/metrics.jsonl")) or proc.poll() is not None,
             180, "a trial to run")  # fmt: skip
    assert proc.poll() is None, proc.stdout.read()


def _assert_complete_and_distinct(study) -> None:
    complete = [t for t in study.trials if t.state == TrialState.COMPLETE]
    assert len(complete) == TRIALS
    assert len({t.params["rl_config.clip_ratio"] for t in complete}) == TRIALS  # no point ran twice
    assert len({t.number for t in study.trials}) == len(study.trials)
    assert not [t for t in study.trials if t.state == TrialState.RUNNING]


def test_a_database_restart_mid_study_is_survived_by_the_same_driver(tmp_path, postgres):
    spec = _spec(tmp_path, postgres.url)
    proc = start_cli(["run", str(spec), "--quiet", "--no-report"], cwd=tmp_path)
    _until_a_trial_runs(tmp_path, proc)
    postgres.stop()  # a fast shutdown: the driver's connections are cut
    time.sleep(5)
    postgres.start()
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, out
    assert "Traceback" not in out
    (down,) = [line for line in out.splitlines() if "unreachable since" in line]
    assert down.startswith(f"warning: storage {postgres.url} unreachable since ")
    assert any(f"storage {postgres.url} reachable again after" in line for line in out.splitlines())
    study = load(tmp_path, storage=postgres.url)
    assert states(study) == {"COMPLETE": TRIALS}  # the same driver finished them: no trial failed or was retried
    _assert_complete_and_distinct(study)


def test_an_outage_past_the_bound_stops_cleanly_and_the_rerun_completes(tmp_path, postgres):
    spec = _spec(tmp_path, postgres.url, storage_retry_timeout=3)
    proc = start_cli(["run", str(spec), "--quiet", "--no-report"], cwd=tmp_path)
    _until_a_trial_runs(tmp_path, proc)
    postgres.stop()
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 1, out
    assert "Traceback" not in out
    last = out.strip().splitlines()[-1]
    assert last.startswith(f"error: storage {postgres.url} unreachable since "), out
    assert last.endswith(f"resume when you run: grpo-sweep run {spec}"), out

    postgres.start()
    done = run_cli(["run", str(spec), "--quiet", "--no-report"], cwd=tmp_path, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    study = load(tmp_path, storage=postgres.url)
    _assert_complete_and_distinct(study)
    for failed in [t for t in study.trials if t.state == TrialState.FAIL]:  # what the outage stopped: resumed
        assert "driver" in failed.user_attrs["failure_reason"]
        (retry,) = [t for t in study.trials if t.user_attrs.get("retry_of") == failed.number]
        assert retry.state == TrialState.COMPLETE and retry.params == failed.params
