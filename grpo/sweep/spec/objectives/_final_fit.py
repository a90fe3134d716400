"""``final_fit``: the fitted learning curve's value at the run's last iteration (what a user deploys)."""

from __future__ import annotations

import math
from collections.abc import Sequence

from grpo.sweep.spec.objectives._base import CurveReducer, _checked
from grpo.sweep.spec.objectives.curve_fit import MIN_POINTS, forecast


class FinalFitReducer(CurveReducer):
    """The saturating curve of ``curve_fit`` fitted to the curve (its base value first), read at the last
    iteration of the run: the end point without one evaluation's noise, and on a partial curve (a pruner
    asking mid-run) the curve's forecast end point rather than where it is now. Fewer than ``MIN_POINTS``
    points after the start: the last value.

    The driver passes the iterations and the run's last iteration (``reduce_curve``); ``reduce`` on bare
    values takes the first as the start and the last as the end.

    Example:
        >>> from grpo.sweep.spec.objectives import get_reducer
        >>> curve = [(0, 0.6), (10, 0.62), (20, 0.7), (30, 0.76), (40, 0.79), (50, 0.8)]
        >>> round(get_reducer("final_fit").reduce_curve(curve, 80), 2)
        0.81
        >>> get_reducer("final_fit").reduce([0.5, 0.6])
        0.6
    """

    name = "final_fit"

    def reduce(self, values: Sequence[float]) -> float:
        v = _checked(values)
        return self.reduce_curve(list(enumerate(v)), len(v) - 1, start=True)

    def reduce_curve(self, points: Sequence[tuple[int, float]], horizon: int, start: bool | None = None) -> float:
        has_start = points[0][0] == 0 if start is None else start
        after = points[1:] if has_start else points
        if not after:
            raise ValueError("cannot reduce an empty curve")
        broken = [v for _, v in after if not math.isfinite(v)]
        if broken:  # a diverged run stays NaN/inf, as with the other reducers
            return float(broken[-1])
        if len(after) < MIN_POINTS:
            return float(after[-1][1])
        fitted = forecast(points, max(horizon, int(points[-1][0])))
        return float(after[-1][1]) if fitted is None else fitted.value
