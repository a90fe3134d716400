"""A saturating curve fitted to a learning curve, and its forecast at the run's last iteration with an interval.

GRPO curves are sigmoid: a slow start, a fast rise, a plateau (arXiv:2507.18014; ScaleRL arXiv:2510.13786).
The model is a Hill curve that starts at the base value ``y0`` (the iteration-0 evaluation)::

    f(t) = y0 + (c - y0) * r**h / (1 + r**h),   r = t / m

three parameters: the ceiling ``c``, the midpoint ``m`` (iterations) and the steepness ``h`` (sigmoid for
``h > 1``). Without an iteration-0 point the first point is the start.

The interval is the fit's joint confidence region (Beale's F region): every (c, m, h) whose sum of squared
residuals is within ``1 + p/(n-p) F(p, n-p; confidence)`` of the best fit's, and the forecast's range over
it. The model is linear in ``c`` given (m, h), so the region is exact in ``c`` on a grid of (m, h). Unlike
the fit covariance or a residual bootstrap, it stays wide where the data cannot tell the parameters apart:
a curve still flat at its start fits a late steep rise as well as no rise at all, so a slow starter's upper
bound stays high and it is not stopped for being slow. The best fit itself is refined with scipy's
``curve_fit`` from the best grid cell.

Pure numbers in, a ``Forecast`` out: the curve stopper (grpo.sweep.run.curve_stop), the ``final_fit``
objective and benchmark replays all call ``forecast``.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

Points = Sequence[tuple[int, float]]  # (iteration, value), iterations ascending
MIN_POINTS = 4  # points after the start: one more than the model's parameters, so the noise is estimable
NOISE_FLOOR = 1e-3  # residual standard deviation assumed at least (an exact synthetic curve has none)
_MIDPOINTS = 48  # grid of m: log-spaced from horizon/100 to 4 x horizon
_STEEPNESS = (0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, 8.0)


@dataclass(frozen=True)
class Forecast:
    """The forecast objective (``value``) at the horizon with its interval, and the best fit behind it."""

    value: float
    low: float
    high: float
    ceiling: float
    midpoint: float
    steepness: float
    residual_sd: float
    points: int  # points fitted (after the start)

    def text(self, digits: int = 3) -> str:
        return f"{self.value:.{digits}g} [{self.low:.{digits}g}, {self.high:.{digits}g}]"


def hill(t: np.ndarray, y0: float, c: float, m: float, h: float) -> np.ndarray:
    """The model at iterations ``t`` (0 gives ``y0``)."""
    r = np.power(np.maximum(np.asarray(t, dtype=float), 0.0) / m, h)
    return y0 + (c - y0) * r / (1.0 + r)


def future_iterations(seen: Sequence[int], horizon: int) -> list[int]:
    """The evaluations still to come: on the last gap between evaluations, and always the horizon (the engine
    evaluates at every ``eval_every`` and at the last iteration)."""
    last = seen[-1]
    gap = seen[-1] - seen[-2] if len(seen) > 1 else 1
    out = list(range(last + max(gap, 1), horizon, max(gap, 1)))
    return [*out, horizon] if last < horizon else out


def forecast(
    points: Points,
    horizon: int,
    confidence: float = 0.95,
    bounds: tuple[float, float] | None = None,
    reduce: Callable[[Sequence[float]], float] | None = None,
) -> Forecast | None:
    """The fitted curve's objective at ``horizon`` with its ``confidence`` interval, or None with fewer than
    ``MIN_POINTS`` points after the start (or a non-finite one).

    ``points``: the curve so far, the start first (iteration 0 where the base was evaluated). ``bounds``:
    the metric's range (accuracy: (0, 1)); the ceiling stays inside it. ``reduce``: the objective's reducer
    over the values after the start; it is applied to the observed values followed by the forecast at the
    evaluations still to come (None: the forecast value at ``horizon`` itself). The reducers of
    grpo.sweep.spec.objectives are monotone in each value, so the interval is the reducer's range over the
    region's extreme curves.
    """
    key = (tuple((int(t), float(v)) for t, v in points), int(horizon), float(confidence), bounds, reduce)
    return _forecast(*key)


@lru_cache(maxsize=512)  # the driver asks after every iteration; the curve changes only at evaluations
def _forecast(
    points: tuple[tuple[int, float], ...],
    horizon: int,
    confidence: float,
    bounds: tuple[float, float] | None,
    reduce: Callable[[Sequence[float]], float] | None,
) -> Forecast | None:
    if len(points) < MIN_POINTS + 1 or not all(math.isfinite(v) for _, v in points):
        return None
    t0, y0 = points[0]
    t = np.array([p[0] - t0 for p in points[1:]], dtype=float)
    y = np.array([p[1] for p in points[1:]], dtype=float)
    span = max(float(horizon - t0), float(t[-1]), 1.0)
    d = y - y0
    lo, hi = (-math.inf, math.inf) if bounds is None else bounds

    # Grid over (m, h): g[k, i] = the shape at point i, a = c - y0 solved in closed form per cell.
    m_grid = np.geomspace(span / 100.0, 4.0 * span, _MIDPOINTS)
    mm, hh = np.meshgrid(m_grid, np.asarray(_STEEPNESS), indexing="ij")
    mm, hh = mm.ravel(), hh.ravel()
    r = np.power(t[None, :] / mm[:, None], hh[:, None])
    g = r / (1.0 + r)
    gg = np.einsum("ki,ki->k", g, g)
    a_best = (g @ d) / gg
    a_best = np.clip(a_best, lo - y0, hi - y0)
    sse = np.einsum("ki,ki->k", d[None, :] - a_best[:, None] * g, d[None, :] - a_best[:, None] * g)
    best = int(np.argmin(sse))
    c, m, h, sse_min = float(y0 + a_best[best]), float(mm[best]), float(hh[best]), float(sse[best])
    c, m, h, sse_min = _refine(t, y, y0, (c, m, h), sse_min, (lo, hi), span)

    n, p = len(y), 3
    dof = max(n - p, 1)
    sse_min = max(sse_min, n * NOISE_FLOOR**2)
    from scipy.stats import f as f_dist

    threshold = sse_min * (1.0 + p / dof * float(f_dist.ppf(confidence, p, dof)))
    # Per cell, the a with SSE(a) <= threshold: a quadratic in a around its unclipped minimum.
    a_free = (g @ d) / gg
    sse_free = np.einsum("ki,ki->k", d[None, :] - a_free[:, None] * g, d[None, :] - a_free[:, None] * g)
    room = np.sqrt(np.maximum(threshold - sse_free, 0.0) / gg)
    feasible = sse_free <= threshold
    a_low = np.maximum(a_free - room, lo - y0)
    a_high = np.minimum(a_free + room, hi - y0)
    feasible &= a_low <= a_high

    future = future_iterations([int(p[0]) for p in points], horizon)
    observed = [float(v) for v in y]

    def objective(c_: float, m_: float, h_: float) -> float:
        if reduce is None:
            return float(hill(np.array([horizon - t0]), y0, c_, m_, h_)[0])
        ahead = hill(np.asarray(future, dtype=float) - t0, y0, c_, m_, h_)
        return float(reduce(observed + [float(v) for v in ahead]))

    ends = [
        objective(float(y0 + a), float(mm[k]), float(hh[k]))
        for k in np.flatnonzero(feasible)
        for a in (a_low[k], a_high[k])
    ]
    value = objective(c, m, h)
    ends.append(value)  # the refined best fit may lie between grid cells
    return Forecast(
        value=value,
        low=min(ends),
        high=max(ends),
        ceiling=c,
        midpoint=m,
        steepness=h,
        residual_sd=math.sqrt(sse_min / dof),
        points=n,
    )


def _refine(
    t: np.ndarray,
    y: np.ndarray,
    y0: float,
    start: tuple[float, float, float],
    sse: float,
    bounds: tuple[float, float],
    span: float,
) -> tuple[float, float, float, float]:
    """The least-squares fit from the best grid cell (scipy's ``curve_fit``); the cell itself when that fails."""
    from scipy.optimize import curve_fit

    c, m, h = start
    low_c, high_c = bounds
    box = ([low_c, span / 1000.0, _STEEPNESS[0]], [high_c, 10.0 * span, _STEEPNESS[-1]])
    guess = [min(max(c, low_c + 1e-9), high_c - 1e-9), m, h]
    try:
        with warnings.catch_warnings():  # OptimizeWarning: covariance not estimable (a flat curve); not used
            warnings.simplefilter("ignore")
            params, _ = curve_fit(
                lambda x, c_, m_, h_: hill(x, y0, c_, m_, h_), t, y, p0=guess, bounds=box, maxfev=2000
            )
    except (RuntimeError, ValueError):
        return c, m, h, sse
    fitted = float(np.sum((y - hill(t, y0, *params)) ** 2))
    if not math.isfinite(fitted) or fitted >= sse:
        return c, m, h, sse
    return float(params[0]), float(params[1]), float(params[2]), fitted
