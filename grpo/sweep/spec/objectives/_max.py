"""``max`` and ``min``: the best value the curve reached (for maximised and minimised metrics)."""

from __future__ import annotations

from collections.abc import Sequence

from grpo.sweep.spec.objectives._base import CurveReducer, _checked


class MaxReducer(CurveReducer):
    """The largest value of the curve: the best a maximised metric ever got.

    Optimistic on noisy curves (it rewards a lucky spike); pair it with a metric that is already an
    average over many rollouts, such as ``grpo/score/mean``.

    Example:
        >>> from grpo.sweep.spec.objectives import get_reducer
        >>> get_reducer("max").reduce([0.1, 0.4, 0.3])
        0.4
    """

    name = "max"

    def reduce(self, values: Sequence[float]) -> float:
        return max(_checked(values))


class MinReducer(CurveReducer):
    """The smallest value of the curve: the best a minimised metric (a loss) ever got.

    Example:
        >>> from grpo.sweep.spec.objectives import get_reducer
        >>> get_reducer("min").reduce([0.5, 0.2, 0.3])
        0.2
    """

    name = "min"

    def reduce(self, values: Sequence[float]) -> float:
        return min(_checked(values))
