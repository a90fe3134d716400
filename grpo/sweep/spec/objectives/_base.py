"""The one abstraction of this package: a rule that turns a learning curve into one number.

RL curves are noisy and trials mostly differ in how fast they learn, so *which* number a curve
becomes is a modelling choice. Each rule is a small class with one method, ``reduce``; the
intermediate values reported to Optuna's pruner are the same rule applied to the curve so far, so a
reducer must give a sensible value for a partial curve too.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence


class CurveReducer(abc.ABC):
    """Turns the per-iteration values of one metric (oldest first) into the trial's value.

    ``values`` holds one float per iteration in order; it must not be empty (a trial that logged
    nothing has no value: that is a failed trial, not a number). Non-finite values propagate, so a
    diverged run shows up as NaN/inf and the driver can fail it.
    """

    name: str = ""

    @abc.abstractmethod
    def reduce(self, values: Sequence[float]) -> float:
        """The curve's value."""

    def reduce_curve(self, points: Sequence[tuple[int, float]], horizon: int) -> float:
        """The value of a curve given as (iteration, value) points of a run that ends at iteration ``horizon``.
        An iteration-0 point is the base policy's evaluation, not what the trial achieved: left out here; a
        reducer that models the curve (``final_fit``) uses it as the start."""
        after = points[1:] if points and points[0][0] == 0 else points
        return self.reduce([v for _, v in after])

    def __call__(self, values: Sequence[float]) -> float:
        return self.reduce(values)

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"

    # Equal when the same rule (the repr names its settings): the curve fit's cache keys on the reducer.
    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and repr(other) == repr(self)

    def __hash__(self) -> int:
        return hash((type(self), repr(self)))


def _checked(values: Sequence[float]) -> list[float]:
    """The values as floats; an empty curve is a ValueError (the caller's bug, not the user's)."""
    out = [float(v) for v in values]
    if not out:
        raise ValueError("cannot reduce an empty curve")
    return out
