"""Start points: known-good settings a study tries first (spec key ``start_points``).

    start_points:
      - {actor_config.lr: 1.0e-6, rl_config.clip_ratio: 0.2}   # MindSpeed-RL's recipe values
      - {actor_config.lr: 5.6e-5}                              # a previous winner; the sampler fills the rest

Each point is enqueued with Optuna's ``study.enqueue_trial(..., skip_if_exists=True)`` before the sampler
proposes anything (Optuna runs enqueued trials first, as its own tutorial's "specify hyperparameters
manually" does): a good prior costs no search budget to find, and TPE or GP model the space from a good
point on (the piBO / PriorBand idea at the budgets GRPO affords, arXiv:2306.12370). A point may name some
of the searched keys; the sampler proposes the others. Start points are trials of the study like any
other: they count against ``trials``, and they compete for the best.

Here: the check that every point lies in the search space (one line naming ``start_points[i].key``), and
the values as the distribution holds them, so a rerun's ``skip_if_exists`` recognises the point it
enqueued before (Optuna compares by type: an int 1 for a float range would be enqueued again on every run).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from optuna.distributions import BaseDistribution, CategoricalDistribution, FloatDistribution, IntDistribution

from grpo.errors import did_you_mean
from grpo.sweep.spec.space import SearchSpace, format_value


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def _same(value: Any, choice: Any) -> bool:
    """A choice equal to ``value`` (numbers by value: 0.2 and a choice 0.2; a bool never equals 1)."""
    x, c = _number(value), _number(choice)
    if x is not None and c is not None:
        return x == c
    return type(value) is type(choice) and value == choice


def value_problem(dist: BaseDistribution, value: Any) -> str | None:
    """Why ``value`` is not a point of ``dist`` (None when it is)."""
    if isinstance(dist, CategoricalDistribution):
        if any(_same(value, c) for c in dist.choices):
            return None
        return f"{format_value(value)} is not one of the choices {', '.join(format_value(c) for c in dist.choices)}"
    if isinstance(dist, (FloatDistribution, IntDistribution)):
        x = _number(value)
        if x is None or not math.isfinite(x):
            return f"must be a number (got {value!r})"
        if isinstance(dist, IntDistribution) and x != int(x):
            return f"must be an integer (got {format_value(value)})"
        if not dist.low <= x <= dist.high:
            return f"{format_value(value)} is outside the searched range [{dist.low}, {dist.high}]"
        if dist.step is not None and abs((x - dist.low) / dist.step - round((x - dist.low) / dist.step)) > 1e-9:
            return f"{format_value(value)} is not on the range's step {dist.step} from {dist.low}"
        return None
    return None


def as_stored(dist: BaseDistribution, value: Any) -> Any:
    """``value`` as ``dist`` holds it (float for a float range, int for an int range, the choice itself)."""
    if isinstance(dist, FloatDistribution):
        return float(value)
    if isinstance(dist, IntDistribution):
        return int(value)
    if isinstance(dist, CategoricalDistribution):
        return next(c for c in dist.choices if _same(value, c))
    return value


def start_point_problems(points: Sequence[Mapping[str, Any]], space: SearchSpace, source: str) -> list[str]:
    """One line per key of a start point that is not searched or lies outside its distribution."""
    problems = []
    dists = space.distributions()
    for i, point in enumerate(points):
        if not point:
            problems.append(f"{source}: start_points[{i}]: names no searched key")
        for key, value in point.items():
            where = f"{source}: start_points[{i}].{key}"
            if key not in dists:
                close = did_you_mean(key, list(dists))
                hint = f"; did you mean {close}?" if close else f" (searched: {', '.join(dists)})"
                problems.append(f"{where}: not a searched key{hint}")
                continue
            problem = value_problem(dists[key], value)
            if problem:
                problems.append(f"{where}: {problem}")
    return problems


def stored_points(points: Sequence[Mapping[str, Any]], space: SearchSpace) -> list[dict[str, Any]]:
    """The (checked) points with each value as its distribution holds it."""
    dists = space.distributions()
    return [{key: as_stored(dists[key], value) for key, value in point.items()} for point in points]
