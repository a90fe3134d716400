"""The curve-aware stopper (``pruner.curve``): stop a run only when its fitted curve says it cannot catch the
incumbent.

GRPO curves cross: a low learning rate starts slowly and often ends best, so a rung that compares runs at
the same early iteration (successive halving, Hyperband) stops the eventual winner (LC-PFN arXiv:2310.20447;
docs/benchmarks.md, search efficiency). This stopper fits the saturating curve of grpo.sweep.spec.objectives.curve_fit
to the running trial's objective metric (the mean over seeds at each evaluation every seed has reached, the
base evaluation first), forecasts the objective at the run's last iteration with its interval, and stops
the run only when that interval's upper bound lies below the lower bound of the incumbent: the best
finished trial's value with its interval over seeds (``value_interval``). An incumbent of one seed has no
such interval; its value less ``z`` residual standard deviations of this run's fit stands in (one
evaluation's noise). Nothing is stopped before ``min_points`` evaluations after the start, nor without a
finished trial.

``curve_decision`` is the pure function (curve values in, decision out) that the driver's stopper and a
benchmark replay both call.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from statistics import NormalDist

import optuna
from optuna.trial import TrialState

from grpo.sweep.spec.models import CurveRule
from grpo.sweep.spec.objectives.curve_fit import Forecast, forecast
from grpo.trial_attrs import VALUE_INTERVAL


@dataclass(frozen=True)
class Incumbent:
    """The best finished trial: its value and interval (``low``/``high`` None with one seed)."""

    value: float
    low: float | None = None
    high: float | None = None
    number: int | None = None


@dataclass(frozen=True)
class CurveDecision:
    """What the stopper concluded: ``stop``, the forecast it rests on (None: too few points or no fit), the
    incumbent's bounds it was compared with, and the reason when it stops."""

    stop: bool
    forecast: Forecast | None = None
    incumbent_low: float | None = None
    incumbent_high: float | None = None
    reason: str | None = None


def curve_decision(
    curve: Sequence[tuple[int, float]],
    train_iters: int,
    incumbent: Incumbent | None,
    rule: CurveRule | None = None,
    maximize: bool = True,
    reduce: Callable[[Sequence[float]], float] | None = None,
) -> CurveDecision:
    """Stop a run whose objective curve so far is ``curve`` ((iteration, value), the base evaluation at
    iteration 0 first) and which ends at ``train_iters``, against ``incumbent``?

    ``reduce``: the objective's reducer over the curve after the start (None: the value at ``train_iters``,
    i.e. ``last`` or ``final_fit``). ``maximize=False`` mirrors the test (stop when the lower bound lies above
    the incumbent's upper bound).
    """
    rule = rule or CurveRule()
    seen = [p for p in curve if p[0] <= train_iters]
    if len(seen) < rule.min_points + 1 or incumbent is None:
        return CurveDecision(False)
    fitted = forecast(seen, train_iters, rule.confidence, rule.bounds, reduce)
    if fitted is None:
        return CurveDecision(False)
    z = NormalDist().inv_cdf(0.5 + rule.confidence / 2)
    noise = z * fitted.residual_sd
    low = incumbent.low if incumbent.low is not None else incumbent.value - noise
    high = incumbent.high if incumbent.high is not None else incumbent.value + noise
    stop = fitted.high < low if maximize else fitted.low > high
    if not stop:
        return CurveDecision(False, fitted, low, high)
    sign = "<" if maximize else ">"
    who = f" (trial {incumbent.number})" if incumbent.number is not None else ""
    reason = (
        f"curve: predicted final {fitted.text()} {sign} incumbent{who} {incumbent.value:.3g} "
        f"[{low:.3g}, {high:.3g}] at iteration {seen[-1][0]} of {train_iters}"
    )
    return CurveDecision(True, fitted, low, high, reason)


def incumbent_of(study: optuna.Study, maximize: bool) -> Incumbent | None:
    """The best COMPLETE trial of a single-objective ``study`` with its stored interval over seeds."""
    done = [
        (float(t.value), t)
        for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
        if t.value is not None and math.isfinite(t.value)
    ]
    if not done:
        return None
    value, best = max(done, key=lambda vt: vt[0] if maximize else -vt[0])
    intervals = best.user_attrs.get(VALUE_INTERVAL) or []
    first = intervals[0] if intervals else None
    low, high = (float(first[0]), float(first[1])) if first else (None, None)
    return Incumbent(value, low, high, best.number)
