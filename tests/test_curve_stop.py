"""The curve-aware stopper (pruner.curve) and the final_fit objective on synthetic sigmoid GRPO curves: a slow
starter that ends best is not stopped where a rung comparison stops it; a run that cannot catch the
incumbent is, with the prediction and the incumbent in its reason."""

from __future__ import annotations

import math

import numpy as np
import optuna
import pytest

from grpo.sweep.run.curve_stop import CurveDecision, Incumbent, curve_decision, incumbent_of
from grpo.sweep.spec.models import CurveRule
from grpo.sweep.spec.objectives import get_reducer
from grpo.sweep.spec.objectives.curve_fit import forecast, future_iterations
from grpo.trial_attrs import VALUE_INTERVAL

T = 80  # train_iters
EVERY = 5  # eval_every
ITS = np.arange(0, T + 1, EVERY)
BASE = 0.66


def sigmoid(ceiling: float, midpoint: float, scale: float, noise: float = 0.015, seed: int = 0) -> list[float]:
    """A held-out accuracy curve: the base at iteration 0, a logistic rise to ``ceiling``, binomial-size noise."""
    rng = np.random.default_rng(seed)
    y = BASE + (ceiling - BASE) / (1 + np.exp(-(ITS - midpoint) / scale))
    y = np.clip(y + rng.normal(0, noise, ITS.size), 0, 1)
    y[0] = BASE
    return [float(v) for v in y]


FAST = sigmoid(0.80, 12, 4, seed=1)  # a high learning rate: early rise, plateau at 0.80
SLOW = sigmoid(0.92, 48, 6, seed=2)  # a low learning rate: flat until ~35, ends best
BAD = sigmoid(0.55, 10, 3, seed=3)  # falls below its base and stays there


def upto(curve: list[float], iteration: int) -> list[tuple[int, float]]:
    return [(int(t), v) for t, v in zip(ITS, curve, strict=True) if t <= iteration]


def test_the_fit_recovers_a_full_sigmoid_and_its_interval_covers_the_end():
    fitted = forecast(upto(FAST, T), T, bounds=(0.0, 1.0))
    assert fitted is not None
    assert fitted.value == pytest.approx(0.80, abs=0.015)
    assert fitted.low <= FAST[-1] + 0.03 and fitted.low < fitted.value < fitted.high
    assert fitted.high - fitted.low < 0.06  # a complete curve is well determined
    partial = forecast(upto(FAST, 40), T, bounds=(0.0, 1.0))
    assert partial is not None and partial.low < 0.80 < partial.high  # past its rise: the plateau is known


def test_a_flat_start_leaves_the_end_open_and_a_rise_narrows_it():
    early = forecast(upto(SLOW, 30), T, bounds=(0.0, 1.0))
    late = forecast(upto(SLOW, 65), T, bounds=(0.0, 1.0))
    assert early is not None and late is not None
    assert early.high > 0.95  # still flat at 30: a late steep rise fits as well as none
    assert late.high - late.low < early.high - early.low
    assert late.low < 0.92 < late.high


def test_too_few_points_give_no_forecast():
    assert forecast(upto(FAST, 15), T) is None  # 3 evaluations after the base
    assert forecast([(0, 0.6), (5, 0.7), (10, float("nan")), (15, 0.7), (20, 0.7)], T) is None


def test_future_evaluations_follow_the_last_gap_and_end_at_train_iters():
    assert future_iterations([0, 5, 10], 22) == [15, 20, 22]
    assert future_iterations([0, 5, 10, 22], 22) == []


def _incumbent_at(curve: list[float]) -> Incumbent:
    """A finished trial's value with a 3-seed-like interval around it."""
    return Incumbent(curve[-1], curve[-1] - 0.02, curve[-1] + 0.02, number=0)


def test_crossing_curves_the_slow_starter_survives_where_a_rung_stops_it():
    # The incumbent is the fast starter, finished at 0.80; the slow starter ends at 0.92.
    incumbent = _incumbent_at(FAST)
    at = 30
    assert SLOW[at // EVERY] < FAST[at // EVERY] - 0.1  # at the rung it looks hopeless
    decision = curve_decision(upto(SLOW, at), T, incumbent, CurveRule(bounds=(0.0, 1.0)))
    assert not decision.stop and decision.forecast is not None and decision.forecast.high > incumbent.low

    # Optuna's successive halving (Hyperband's bracket) compares the two at the same rung and stops it.
    study = optuna.create_study(
        direction="maximize",
        pruner=optuna.pruners.SuccessiveHalvingPruner(min_resource=at, reduction_factor=2),
    )
    done = study.ask()
    for t, v in zip(ITS, FAST, strict=True):
        done.report(v, int(t))
        assert not done.should_prune()  # the first trial at its rung: promoted (and the rung remembers it)
    study.tell(done, FAST[-1])
    slow = study.ask()
    for t, v in upto(SLOW, at):
        slow.report(v, t)
    assert slow.should_prune()

    # Run to the end, the slow starter is the better run: stopping it would have lost the winner.
    assert SLOW[-1] > FAST[-1]
    for t in range(at + EVERY, T, EVERY):  # and the curve stopper never stops it on the way
        assert not curve_decision(upto(SLOW, t), T, incumbent, CurveRule(bounds=(0.0, 1.0))).stop


def test_a_run_that_cannot_catch_the_incumbent_is_stopped_with_the_prediction_in_its_reason():
    decision = curve_decision(upto(BAD, 30), T, _incumbent_at(FAST), CurveRule(bounds=(0.0, 1.0)))
    assert decision.stop and decision.forecast is not None
    assert decision.forecast.high < decision.incumbent_low
    assert decision.reason is not None
    assert decision.reason.startswith("curve: predicted final ")
    assert decision.forecast.low < 0.55 < decision.forecast.high  # where it really ends
    assert "< incumbent (trial 0) 0.8" in decision.reason and decision.reason.endswith("at iteration 30 of 80")
    assert f"[{decision.forecast.low:.3g}, {decision.forecast.high:.3g}]" in decision.reason


def test_the_decision_compares_bounds_not_values():
    fitted = forecast(upto(BAD, 30), T, bounds=(0.0, 1.0))
    assert fitted is not None
    # An incumbent whose lower bound is under the run's upper bound: no stop, though its value is higher.
    wide = Incumbent(fitted.high + 0.01, fitted.high - 0.01, fitted.high + 0.03)
    assert not curve_decision(upto(BAD, 30), T, wide, CurveRule(bounds=(0.0, 1.0))).stop
    tight = Incumbent(fitted.high + 0.03, fitted.high + 0.01, fitted.high + 0.05)
    assert curve_decision(upto(BAD, 30), T, tight, CurveRule(bounds=(0.0, 1.0))).stop
    # One seed: no interval; the value less z residual SDs stands in for its lower bound.
    single = curve_decision(upto(BAD, 30), T, Incumbent(FAST[-1]), CurveRule(bounds=(0.0, 1.0)))
    assert single.stop and single.incumbent_low == pytest.approx(
        FAST[-1] - 1.959964 * single.forecast.residual_sd, rel=1e-4
    )


def test_nothing_is_stopped_before_min_points_or_without_an_incumbent():
    rule = CurveRule(min_points=8, bounds=(0.0, 1.0))
    assert curve_decision(upto(BAD, 35), T, _incumbent_at(FAST), rule) == CurveDecision(False)  # 7 evaluations
    assert curve_decision(upto(BAD, 40), T, _incumbent_at(FAST), rule).stop
    assert curve_decision(upto(BAD, 40), T, None, rule) == CurveDecision(False)


def test_a_minimised_objective_is_mirrored():
    loss = [(t, 1.0 - v) for t, v in upto(BAD, 30)]  # a loss that stays high against an incumbent at 0.2
    incumbent = Incumbent(1 - FAST[-1], 1 - FAST[-1] - 0.02, 1 - FAST[-1] + 0.02)
    decision = curve_decision(loss, T, incumbent, CurveRule(), maximize=False)
    assert decision.stop and decision.reason is not None and " > incumbent " in decision.reason
    assert not curve_decision(loss, T, incumbent, CurveRule(), maximize=True).stop


def test_the_objective_reducer_is_applied_to_the_forecast_curve():
    # auc of the whole run: the observed part counts as it is, the rest comes from the fit.
    auc = get_reducer("auc")
    fitted = forecast(upto(FAST, 40), T, bounds=(0.0, 1.0), reduce=auc.reduce)
    full = auc.reduce(FAST[1:])
    assert fitted is not None and fitted.low <= full <= fitted.high
    assert abs(fitted.value - full) < 0.01


def test_incumbent_is_the_best_complete_trial_with_its_stored_interval():
    study = optuna.create_study(direction="maximize")
    assert incumbent_of(study, maximize=True) is None
    for value, interval in ((0.7, [0.68, 0.72]), (0.8, [0.78, 0.82]), (0.75, None)):
        trial = study.ask()
        if interval is not None:
            trial.set_user_attr(VALUE_INTERVAL, [interval])
        study.tell(trial, value)
    pruned = study.ask()
    study.tell(pruned, state=optuna.trial.TrialState.PRUNED)
    assert incumbent_of(study, maximize=True) == Incumbent(0.8, 0.78, 0.82, 1)
    assert incumbent_of(study, maximize=False) == Incumbent(0.7, 0.68, 0.72, 0)


def test_final_fit_is_the_fitted_end_point():
    reducer = get_reducer("final_fit")
    points = upto(FAST, T)
    assert reducer.reduce_curve(points, T) == pytest.approx(0.80, abs=0.015)
    # Less noisy than the last evaluation: over 20 noisy replicates its spread is smaller.
    ends = [sigmoid(0.80, 12, 4, noise=0.03, seed=s) for s in range(20)]
    fitted = [reducer.reduce_curve(upto(c, T), T) for c in ends]
    assert np.std(fitted) < np.std([c[-1] for c in ends])
    # On a partial curve: the forecast end, not where it is now.
    partial = reducer.reduce_curve(upto(SLOW, 60), T)
    assert partial > SLOW[60 // EVERY]
    assert reducer.reduce_curve([(0, 0.6), (5, 0.7)], T) == 0.7  # too short to fit: the last value
    assert math.isnan(reducer.reduce_curve([(0, 0.6), (5, 0.7), (10, math.nan), (15, 0.7), (20, 0.7)], T))
