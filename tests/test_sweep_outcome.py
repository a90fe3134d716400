"""The outcome of a finished trial, decided without Ray or Optuna (grpo.sweep.run.outcome.trial_outcome)."""

import math

import pytest

from grpo.sweep.run.outcome import Complete, Failed, Interrupted, Pruned, SeedEnd, trial_outcome

LOG = ["line 1", "line 2"]
DONE = {"status": "complete"}


def outcome(result=DONE, worker_error=None, **kw):
    args = dict(seeds=[SeedEnd(1234, worker_error, result if worker_error is None else {})], stop_reason=None,
                timeout_s=60.0, objectives=["grpo/score/mean"], seed_values=[[0.5]], reported=["grpo/score/mean"],
                log_lines=LOG)
    args.update(kw)
    return trial_outcome(**args)


def test_a_complete_trial_averages_its_seeds_and_keeps_their_spread_and_interval():
    two = [SeedEnd(1, None, DONE), SeedEnd(2, None, DONE)]
    got = outcome(seeds=two, objectives=["a", "b"], seed_values=[[0.2, 0.4], [1.0, 3.0]], reported=["a", "b"])
    assert isinstance(got, Complete)
    assert got.values == pytest.approx([0.3, 2.0])
    assert got.per_seed == [[0.2, 0.4], [1.0, 3.0]]
    assert got.spreads == pytest.approx([0.1, 1.0])
    # 95 % bootstrap interval of the mean, per objective: inside the seeds' range, around the mean.
    (a_low, a_high), (b_low, b_high) = got.intervals
    assert 0.2 <= a_low <= 0.3 <= a_high <= 0.4 and 1.0 <= b_low <= 2.0 <= b_high <= 3.0
    assert outcome().spreads == [0.0]  # one seed: no spread
    assert outcome().intervals == [None]  # ... and no interval


def test_a_dead_worker_fails_and_a_killed_timeout_says_so():
    assert outcome(worker_error="worker process died (RayActorError): killed") == Failed(
        "worker process died (RayActorError): killed", LOG)
    assert outcome(worker_error="died", stop_reason="timeout").reason == "timeout after 60.0 s (killed)"


def test_a_failed_run_keeps_its_own_reason_and_log_lines():
    got = outcome(result={"status": "failed", "reason": "NPU out of memory", "last_log_lines": ["oom"]})
    assert got == Failed("NPU out of memory", ["oom"])
    assert outcome(result={"status": "failed"}) == Failed("failed", LOG)


def test_stops_are_pruned_timed_out_or_interrupted():
    assert isinstance(outcome(result={"status": "stopped", "stop_reason": "pruned"}), Pruned)
    assert isinstance(outcome(stop_reason="pruned"), Pruned)  # the run ended before it saw the stop
    assert outcome(result={"status": "stopped"}, stop_reason="timeout") == Failed("timeout after 60.0 s", LOG)
    interrupted = outcome(result={"status": "stopped", "stop_reason": "interrupted"})
    assert isinstance(interrupted, Interrupted) and interrupted.log_lines == LOG
    assert isinstance(outcome(result={"status": "stopped", "stop_reason": "driver died"}), Interrupted)


def test_an_objective_never_reported_or_not_finite_fails():
    missing = outcome(objectives=["acc_rewards/mean"], seed_values=[[None]], reported=["b", "a"])
    assert missing == Failed("objective metric 'acc_rewards/mean' was never reported; reported: a, b", LOG)
    two = [SeedEnd(1, None, DONE), SeedEnd(2, None, DONE)]
    assert isinstance(outcome(seeds=two, seed_values=[[0.5, None]]), Failed)  # one seed without it is enough
    nan = outcome(seed_values=[[math.nan]])
    assert isinstance(nan, Failed) and "not finite" in nan.reason


def test_a_worker_killed_by_a_second_ctrl_c_is_interrupted_not_failed():
    got = outcome(worker_error="worker process died (RayActorError): killed", stop_reason="interrupted")
    assert isinstance(got, Interrupted)  # a retry that keeps its attempt


def test_one_failed_seed_fails_the_trial_naming_that_seed_not_its_stopped_siblings():
    stopped = {"status": "stopped", "stop_reason": "failed"}
    ends = [SeedEnd(1235, None, {"status": "failed", "reason": "NaN loss", "last_log_lines": ["nan"]}),
            SeedEnd(1234, None, stopped), SeedEnd(1236, None, DONE)]
    got = outcome(seeds=ends, stop_reason="failed", seed_values=[[0.1, 0.2, 0.3]])
    assert got == Failed("seed 1235: NaN loss", ["nan"])
    died = [SeedEnd(1236, "worker process died (RayActorError): OOM", {}), SeedEnd(1234, None, stopped)]
    assert outcome(seeds=died, stop_reason="failed").reason == "seed 1236: worker process died (RayActorError): OOM"


def test_seeds_stopped_together_give_the_trial_one_outcome():
    pruned = [SeedEnd(s, None, {"status": "stopped", "stop_reason": "pruned"}) for s in (1, 2)]
    assert isinstance(outcome(seeds=[SeedEnd(0, None, DONE), *pruned], stop_reason="pruned"), Pruned)
    killed = [SeedEnd(s, "worker process died", {}) for s in (1, 2)]
    assert outcome(seeds=killed, stop_reason="timeout").reason == "timeout after 60.0 s (killed)"  # no seed blamed
    assert isinstance(outcome(seeds=killed, stop_reason="interrupted"), Interrupted)
    # A seed that ran to its end while its siblings were interrupted: the trial resumes, it did not complete.
    mixed = [SeedEnd(0, None, DONE), SeedEnd(1, None, {"status": "stopped", "stop_reason": "interrupted"})]
    assert isinstance(outcome(seeds=mixed, stop_reason="interrupted", seed_values=[[0.1, 0.2]]), Interrupted)


def test_a_retry_that_never_launched_hands_on_the_checkpoint_its_trial_would_have_resumed_from(tmp_path):
    """A retry still waiting for room when the driver stopped has no checkpoint of its own: the next retry
    resumes from where it would have (its resume_from), not from its own empty folder."""
    import optuna

    from grpo.sweep.study.retry import fail_and_maybe_retry
    from grpo.sweep.study.store import StudyStore

    study = optuna.create_study()
    store = StudyStore(study)
    waiting = study.ask({"x": optuna.distributions.FloatDistribution(0, 1)})
    for key, value in {"trial_dir": str(tmp_path / "trials/5"), "resume_from": str(tmp_path / "trials/2"),
                       "attempt": 2}.items():  # fmt: skip
        waiting.set_user_attr(key, value)
    fail_and_maybe_retry(store, store.frozen(waiting), "not launched", retries=3, count_attempt=False, launched=False)
    ran = study.ask()
    assert ran.user_attrs["resume_from"] == str(tmp_path / "trials/2")
    assert ran.user_attrs["attempt"] == 2  # an interruption charges no attempt
    ran.set_user_attr("trial_dir", str(tmp_path / "trials/6"))
    fail_and_maybe_retry(store, store.frozen(ran), "killed", retries=3)  # it ran: its own folder is the latest
    assert study.ask().user_attrs["resume_from"] == str(tmp_path / "trials/6")


def test_stop_reasons_and_seed_statuses_travel_as_their_values():
    """Through Ray and into messages a StopReason is its plain value (f-strings too, on 3.10 and 3.11+)."""
    from grpo.sweep.execution.seed_result import SeedStatus, StopReason

    assert StopReason.DRIVER_DIED == "driver died" and f"{StopReason.TIMEOUT}" == "timeout"
    assert f"{SeedStatus.FAILED}" == "failed" and SeedStatus("stopped") is SeedStatus.STOPPED
    assert outcome({"status": SeedStatus.STOPPED}, stop_reason=StopReason.PRUNED) == Pruned()
