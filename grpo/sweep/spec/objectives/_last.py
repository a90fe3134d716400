"""``last``: the value at the final iteration (the default)."""

from __future__ import annotations

from collections.abc import Sequence

from grpo.sweep.spec.objectives._base import CurveReducer, _checked


class LastReducer(CurveReducer):
    """The last value of the curve: where training ended up.

    The simplest objective and the default. It is as noisy as one iteration of the metric, so prefer
    ``mean_last_k`` or ``auc`` when single iterations jump around.

    Example:
        >>> from grpo.sweep.spec.objectives import get_reducer
        >>> get_reducer("last").reduce([0.1, 0.4, 0.3])
        0.3
    """

    name = "last"

    def reduce(self, values: Sequence[float]) -> float:
        return _checked(values)[-1]
