"""The decision: which trial wins, how sure (interval over seeds, runner-up, paired test), what finding it cost."""

from __future__ import annotations

import datetime as dt
import re

import optuna
import pytest
from optuna.distributions import FloatDistribution
from optuna.trial import TrialState
from report_fixtures import make_study

from grpo.report import collect, stats, write_report
from grpo.report.decision import study_decision
from grpo.report.page_summary import decision as decision_html


def section(page: str, id: str) -> str:
    return re.search(rf'<section id="{id}"[^>]*>.*?</section>', page, re.S).group(0)


@pytest.fixture(scope="module")
def confirmed(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("decision")
    study = make_study(tmp, confirm=True)
    frames = collect(study)
    return study, frames, study_decision(study, frames), write_report(study, tmp / "report").read_text()


def test_the_confirmation_stage_decides_the_winner(confirmed):
    _, _, decision, _ = confirmed
    # Trial 5 has the best stored value from one seed; its confirmation (trial 6, 3 fresh seeds) wins.
    assert decision.highest.number == 5
    assert decision.best.number == 6 and decision.best.user_attrs["confirmation_of"] == 5
    verdict = decision.verdict
    assert verdict.confirmed and verdict.runner_up.number == 7  # the confirmation of trial 0
    assert verdict.comparison.distinguishable and verdict.comparison.seeds == 3


def test_the_page_states_winner_interval_runner_up_and_the_paired_test(confirmed):
    study, _, _, page = confirmed
    body = section(page, "decision")
    winner = stats.trial_interval(study.trials[6]).text()
    assert re.search(r"\[[\d.]+, [\d.]+\] \(3 seeds, 95% CI\)", winner)
    assert (f'Winner: <a href="#trial-6">#6</a> (confirmation of trial #5): acc_rewards/mean = '
            f'<span class="interval">{winner}</span>') in body
    runner = stats.trial_interval(study.trials[7]).text()
    assert 'Runner-up: <a href="#trial-7">#7</a> (confirmation of trial #0): acc_rewards/mean = ' in body
    assert runner in body
    assert re.search(r'<p class="verdict distinct"><b>Distinguishable:</b> trial 6 beats trial 7 by [\d.]+ on average '
                     r"over 3 paired seeds \(paired t-test p = [\d.e-]+ &lt; 0.05\)", body)
    assert "Ranked by the mean over seeds among the confirmation trials" in body
    assert 'Trial <a href="#trial-5">#5</a> has the best single stored value (0.9 from 1 seed)' in body
    # The winner is the trial every section marks, exports and shows how to rerun.
    assert "best trial #6" in section(page, "slice")
    assert "megatron_training.seed=2002" in section(page, "reproduce")


def test_a_tie_is_called_a_tie(tmp_path):
    """Two trials whose seeds overlap: the paired test cannot tell them apart, and the page says so."""
    study = optuna.create_study(study_name="tie", storage=optuna.storages.InMemoryStorage(), direction="maximize")
    for number, per_seed in enumerate(([0.70, 0.62, 0.66], [0.69, 0.64, 0.64])):
        study.add_trial(optuna.create_trial(
            value=sum(per_seed) / 3, params={"x": 0.1 * (number + 1)}, distributions={"x": FloatDistribution(0, 1)},
            user_attrs={"seeds": [1, 2, 3], "values_per_seed": [per_seed]}))
    frames = collect(study)
    body = decision_html(study, frames, study_decision(study, frames), config_link=False)
    assert '<p class="verdict tied"><b>Not distinguishable:</b> trial 0 and trial 1 are not distinguishable' in body
    assert "Ranked by the mean over seeds among all complete trials" in body


def test_one_seed_gives_no_interval_and_the_page_says_how_to_get_one(tmp_path):
    page = write_report(make_study(tmp_path), tmp_path / "out").read_text()
    body = section(page, "decision")
    assert "0.9 (1 seed, no interval)" in body
    assert "One seed gives no interval" in body and "<code>confirm:</code>" in body
    assert '<p class="verdict distinct"><b>Distinguishable:</b> trial 5 beats trial 0' not in body
    # Trial 0 ran seeds 1234 and 1235, trial 5 only 1234: one seed in common, no test possible.
    assert '<p class="verdict tied"><b>Too few seeds to tell:</b>' in body
    assert "only 1 paired seed(s), too few to tell them apart" in body


def test_compute_to_the_best_trial_and_in_all(tmp_path):
    study = make_study(tmp_path)  # CPU-seconds: 108 + 54 + 27 + 2.5 (failed) + 54 + 54, all up to trial 5
    frames = collect(study)
    compute = study_decision(study, frames).compute
    assert compute.kind == "CPU"
    assert compute.device_s_to_best == pytest.approx(299.5) and compute.device_s_total == pytest.approx(299.5)
    assert compute.trials_to_best == 6 and not compute.running
    body = decision_html(study, frames, study_decision(study, frames), config_link=True)
    assert "Compute to find it: <b>0.0832 h CPU-hours (no accelerator held)" in body
    assert "(6 trials up to trial #5)" in body


def test_accelerator_hours_come_from_the_trials_that_held_one():
    study = optuna.create_study(study_name="npu", storage=optuna.storages.InMemoryStorage(), direction="maximize")
    start = dt.datetime(2025, 1, 1)
    for number, (value, npu_s) in enumerate(((0.5, 7200.0), (0.9, 3600.0), (0.4, 1800.0))):
        trial = optuna.create_trial(
            value=value, params={"x": 0.2 * number}, distributions={"x": FloatDistribution(0, 1)},
            user_attrs={"npu_s": npu_s, "cpu_s": 10.0, "resources": {"num_cpus": 1, "resources": {"NPU": 8}}})
        trial.datetime_start = start + dt.timedelta(hours=number)
        trial.datetime_complete = trial.datetime_start + dt.timedelta(minutes=30)
        study.add_trial(trial)
    compute = study_decision(study, collect(study)).compute
    assert compute.kind == "NPU"
    assert compute.device_s_to_best == pytest.approx(10800.0) and compute.device_s_total == pytest.approx(12600.0)
    assert compute.wall_s_to_best == pytest.approx(5400.0) and compute.wall_s_total == pytest.approx(9000.0)
    body = decision_html(study, collect(study), study_decision(study, collect(study)), config_link=False)
    assert "Compute to find it: <b>3 h NPU-hours and 1h 30m wall time</b>" in body
    assert "in all: 3.5 h NPU-hours, 2h 30m wall time" in body


def test_no_completed_trial_yet(tmp_path):
    study = optuna.create_study(study_name="none", storage=optuna.storages.InMemoryStorage())
    study.tell(study.ask(), state=TrialState.FAIL)
    body = section(write_report(study, tmp_path).read_text(), "decision")
    assert "No completed trial yet." in body
