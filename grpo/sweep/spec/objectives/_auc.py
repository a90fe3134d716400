"""``auc``: the area under the curve, normalised to the metric's own scale."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

from grpo.sweep.spec.objectives._base import CurveReducer, _checked


class AUCReducer(CurveReducer):
    """Trapezoid area under the curve divided by its length: the mean height of the curve.

    With ``n`` values at unit-spaced iterations the trapezoid rule gives an area over ``n - 1``
    intervals; dividing by ``n - 1`` makes the result a value on the metric's own scale (a constant
    curve at ``c`` gives exactly ``c``) and makes a partial curve comparable with a full one, which
    is what a pruner comparing trials at the same step needs. A one-point curve gives that point.
    Two runs that end at the same reward but one gets there sooner: the faster one has the larger
    AUC, which is usually the honest objective for noisy RL curves.

    Example:
        >>> from grpo.sweep.spec.objectives import get_reducer
        >>> get_reducer("auc").reduce([0.0, 1.0])            # area 0.5 over 1 interval
        0.5
        >>> get_reducer("auc").reduce([0.0, 1.0, 1.0])       # (0.5 + 1.0) / 2 intervals
        0.75
        >>> get_reducer("auc").reduce([0.3, 0.3, 0.3, 0.3])
        0.3
    """

    name = "auc"

    def reduce(self, values: Sequence[float]) -> float:
        v = _checked(values)
        if len(v) == 1:
            return v[0]
        area = sum((a + b) / 2.0 for a, b in itertools.pairwise(v))
        return area / (len(v) - 1)
