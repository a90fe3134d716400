"""Seed statistics (grpo.report.stats): bootstrap intervals, the paired t-test, the winner's verdict.

The reference values are scipy's own functions called directly (scipy.stats.ttest_rel is the paired
t-test textbooks define), so a change in how we pair or sign the differences fails here."""

from __future__ import annotations

import math

import pytest
from optuna.distributions import FloatDistribution
from optuna.study import StudyDirection
from optuna.trial import TrialState, create_trial
from scipy import stats as sps

from grpo.report import stats


def trial(number: int, per_seed: list[float], seeds: list[int] | None = None, confirmation_of: int | None = None):
    seeds = seeds if seeds is not None else list(range(1234, 1234 + len(per_seed)))
    attrs = {"seeds": seeds, "values_per_seed": [per_seed]}
    if confirmation_of is not None:
        attrs["confirmation_of"] = confirmation_of
    # A confirmation reruns its source's point: the same params (its configuration), other seeds.
    point = float(confirmation_of if confirmation_of is not None else number)
    t = create_trial(value=sum(per_seed) / len(per_seed), params={"x": point},
                     distributions={"x": FloatDistribution(0.0, 100.0)}, user_attrs=attrs, state=TrialState.COMPLETE)
    t.number = number
    return t


def test_interval_brackets_the_mean_and_one_seed_has_none():
    iv = stats.mean_interval([0.61, 0.70, 0.66, 0.64])
    assert iv.low is not None and iv.high is not None
    assert 0.61 <= iv.low < iv.mean < iv.high <= 0.70 and iv.n == 4
    one = stats.mean_interval([0.5])
    assert (one.mean, one.low, one.high, one.n) == (0.5, None, None, 1) and "no interval" in one.text()
    same = stats.mean_interval([0.3, 0.3])
    assert same.low == same.high == 0.3
    assert stats.mean_interval([0.1, 0.2, 0.3]) == stats.mean_interval([0.1, 0.2, 0.3])  # deterministic


def test_paired_p_is_scipys_paired_t_test():
    a, b = [0.80, 0.85, 0.78, 0.90, 0.83], [0.75, 0.80, 0.79, 0.84, 0.78]
    expected = sps.ttest_rel(a, b).pvalue
    assert stats.paired_p([x - y for x, y in zip(a, b)]) == pytest.approx(expected)
    assert stats.paired_p([0.0, 0.0, 0.0]) == 1.0 and stats.paired_p([0.1, 0.1]) == 0.0


def test_compare_pairs_by_seed_and_signs_by_direction():
    a = trial(1, [0.9, 0.8, 0.85], seeds=[1, 2, 3])
    b = trial(2, [0.7, 0.85, 0.6, 0.1], seeds=[3, 2, 1, 9])  # seed 9 has no partner; order differs
    c = stats.compare(a, b, StudyDirection.MAXIMIZE)
    assert c.seeds == 3
    assert c.mean_difference == pytest.approx(((0.9 - 0.6) + (0.8 - 0.85) + (0.85 - 0.7)) / 3)
    assert c.p_value == pytest.approx(sps.ttest_rel([0.9, 0.8, 0.85], [0.6, 0.85, 0.7]).pvalue)
    flipped = stats.compare(a, b, StudyDirection.MINIMIZE)
    assert flipped.mean_difference == pytest.approx(-c.mean_difference) and not flipped.distinguishable


def test_verdict_prefers_confirmation_trials_and_says_whether_the_winner_is_distinguishable():
    search = [trial(0, [0.95]), trial(1, [0.70]), trial(2, [0.80])]
    clear = [trial(3, [0.90, 0.88, 0.91, 0.89, 0.92], confirmation_of=2, seeds=[5, 6, 7, 8, 9]),
             trial(4, [0.70, 0.69, 0.72, 0.71, 0.70], confirmation_of=0, seeds=[5, 6, 7, 8, 9])]
    v = stats.verdict(search + clear, StudyDirection.MAXIMIZE)
    assert v is not None and v.confirmed and v.winner.number == 3 and v.runner_up.number == 4
    assert v.comparison.distinguishable and "beats trial 4" in v.text() and "95% CI" in v.text()
    close = [trial(3, [0.80, 0.90, 0.85], confirmation_of=2, seeds=[5, 6, 7]),
             trial(4, [0.82, 0.86, 0.84], confirmation_of=0, seeds=[5, 6, 7])]
    v = stats.verdict(search + close, StudyDirection.MAXIMIZE)
    assert not v.comparison.distinguishable and "not distinguishable" in v.text()
    only_search = stats.verdict(search, StudyDirection.MAXIMIZE)
    assert only_search.winner.number == 0 and not only_search.confirmed
    assert only_search.comparison.p_value is None and "too few" in only_search.comparison.text()


def test_a_trial_stored_without_seed_attributes_still_has_a_value():
    t = create_trial(value=0.4, params={}, distributions={}, state=TrialState.COMPLETE)
    assert stats.seed_values(t) == {-1: 0.4}
    assert stats.trial_interval(t).mean == 0.4
    assert stats.verdict([], StudyDirection.MAXIMIZE) is None
    assert math.isnan(stats.mean_interval([]).mean)


def test_best_trial_is_the_confirmation_stages_winner_once_it_has_two():
    """`grpo-sweep best`, the run summary and the live view use best_trial: a search trial's single lucky
    seed must not outrank the trials the confirmation stage re-ran on fresh seeds."""
    import optuna

    from grpo.report.best import best_trial

    study = optuna.create_study(direction="maximize")
    study.add_trials([trial(0, [0.95]), trial(1, [0.70])])
    assert best_trial(study).number == 0
    study.add_trial(trial(2, [0.65, 0.66, 0.64], confirmation_of=0, seeds=[5, 6, 7]))
    # One confirmation is no stage yet, but it stands for its source (the same point on 3 fresh seeds): trial
    # 0's lucky seed no longer counts, and trial 1 (0.70) leads its rerun (0.65).
    assert best_trial(study).number == 1
    study.add_trial(trial(3, [0.71, 0.70, 0.72], confirmation_of=1, seeds=[5, 6, 7]))
    assert best_trial(study).number == 3


def test_a_trial_is_never_compared_with_its_own_rerun():
    """The quickstart on a fresh clone (issue 31): one search trial complete, its confirmation on 3 fresh seeds,
    and the verdict named the source itself as runner-up ("trial 6 vs trial 0: only 0 paired seed(s)"). The
    rerun stands for its source; the runner-up is the best other configuration, or none."""
    source, rerun = trial(0, [0.95]), trial(6, [0.77, 0.75, 0.78], confirmation_of=0, seeds=[5, 6, 7])
    v = stats.verdict([source, rerun], StudyDirection.MAXIMIZE)
    assert v.winner.number == 6 and v.runner_up is None and "no runner-up" in v.text()
    other = trial(1, [0.60])
    v = stats.verdict([source, other, rerun], StudyDirection.MAXIMIZE)
    assert (v.winner.number, v.runner_up.number) == (6, 1)
    # Two search trials of one point (the search proposed it twice) are one configuration, too.
    twin = create_trial(value=0.9, params={"x": 0.0}, distributions={"x": FloatDistribution(0.0, 100.0)},
                        user_attrs={"seeds": [1300], "values_per_seed": [[0.9]]}, state=TrialState.COMPLETE)
    twin.number = 2
    v = stats.verdict([source, twin, other], StudyDirection.MAXIMIZE)
    assert (v.winner.number, v.runner_up.number) == (0, 1)


def test_the_confirmation_stage_confirms_distinct_configurations():
    from grpo.report.best import distinct_configurations

    first, twin, other = trial(0, [0.9]), trial(3, [0.8]), trial(1, [0.7])
    twin.params = dict(first.params)
    assert [t.number for t in distinct_configurations([first, twin, other])] == [0, 1]
