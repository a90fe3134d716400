"""Curve reducers on hand-computed curves, and the runnable examples in their docstrings."""

from __future__ import annotations

import doctest
import importlib
import math

import pytest

from grpo.sweep.spec.objectives import REDUCERS, CurveReducer, get_reducer

CURVE = [0.0, 0.2, 0.6, 0.4, 1.0]


def test_last_max_min():
    assert get_reducer("last").reduce(CURVE) == 1.0
    assert get_reducer("max").reduce([0.3, 0.9, 0.1]) == 0.9
    assert get_reducer("min").reduce([0.3, 0.9, 0.1]) == 0.1


def test_mean_last_k():
    assert get_reducer("mean_last_k", k=2).reduce(CURVE) == pytest.approx(0.7)
    assert get_reducer("mean_last_k", k=3).reduce(CURVE) == pytest.approx((0.6 + 0.4 + 1.0) / 3)
    assert get_reducer("mean_last_k").k == 5
    assert get_reducer("mean_last_k").reduce(CURVE) == pytest.approx(0.44)
    assert get_reducer("mean_last_k", k=50).reduce([2.0, 4.0]) == 3.0  # shorter than k: all of it
    with pytest.raises(ValueError):
        get_reducer("mean_last_k", k=0)


def test_auc_is_the_mean_height_of_the_trapezoid_curve():
    # trapezoids: (0+.2)/2 + (.2+.6)/2 + (.6+.4)/2 + (.4+1)/2 = .1 + .4 + .5 + .7 = 1.7 over 4 intervals
    assert get_reducer("auc").reduce(CURVE) == pytest.approx(1.7 / 4)
    assert get_reducer("auc").reduce([0.7] * 9) == pytest.approx(0.7)  # on the metric's scale
    assert get_reducer("auc").reduce([0.25]) == 0.25
    # faster learner, same end point: larger auc; a partial curve is comparable with a full one
    fast, slow = [0.0, 0.8, 1.0, 1.0], [0.0, 0.2, 0.5, 1.0]
    assert get_reducer("auc").reduce(fast) > get_reducer("auc").reduce(slow)
    assert get_reducer("auc").reduce(fast[:2]) == pytest.approx(0.4)


def test_non_finite_values_propagate_and_empty_curves_are_refused():
    assert math.isnan(get_reducer("auc").reduce([0.1, float("nan")]))
    assert math.isinf(get_reducer("last").reduce([0.1, float("inf")]))
    for name in REDUCERS:
        with pytest.raises(ValueError):
            get_reducer(name).reduce([])


def test_registry():
    assert set(REDUCERS) == {"last", "max", "min", "mean_last_k", "auc", "final_fit"}
    assert all(isinstance(get_reducer(n), CurveReducer) and get_reducer(n).name == n for n in REDUCERS)
    with pytest.raises(ValueError, match="unknown reducer"):
        get_reducer("median")


@pytest.mark.parametrize("module", ["", "._last", "._max", "._mean_last_k", "._auc", "._final_fit"])
def test_docstring_examples_run(module):
    mod = importlib.import_module("grpo.sweep.spec.objectives" + module)
    result = doctest.testmod(mod)
    assert result.attempted > 0 and result.failed == 0
