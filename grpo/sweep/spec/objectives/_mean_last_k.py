"""``mean_last_k``: the mean of the last ``k`` iterations."""

from __future__ import annotations

from collections.abc import Sequence

from grpo.sweep.spec.objectives._base import CurveReducer, _checked

DEFAULT_K = 5


class MeanLastKReducer(CurveReducer):
    """The mean of the last ``k`` values (all of them while the curve is shorter than ``k``).

    Where training ended up, with the noise of one iteration averaged away. On a partial curve
    (a pruner asking mid-run) it is the mean of the most recent ``k`` iterations.

    Example:
        >>> from grpo.sweep.spec.objectives import get_reducer
        >>> get_reducer("mean_last_k", k=2).reduce([0.0, 0.2, 0.4, 0.6])
        0.5
        >>> get_reducer("mean_last_k", k=10).reduce([0.0, 0.2])
        0.1
    """

    name = "mean_last_k"

    def __init__(self, k: int = DEFAULT_K):
        if int(k) < 1:
            raise ValueError(f"k must be >= 1 (got {k})")
        self.k = int(k)

    def reduce(self, values: Sequence[float]) -> float:
        tail = _checked(values)[-self.k :]
        return sum(tail) / len(tail)

    def __repr__(self) -> str:
        return f"MeanLastKReducer(k={self.k})"
