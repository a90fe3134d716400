"""PB2's explore step (spec ``scheduler.explore.method: pb2``): a branch's new values from a time-varying GP-UCB.

Population Based Bandits (Parker-Holder et al. 2020, arXiv:2002.02518; Ray Tune's ``PB2``) keeps PBT's exploit
step and replaces the random perturbation with a bandit: a Gaussian process models how much a segment improved
its lineage's objective as a function of the explored values and of time, and each branch takes the values
that maximise the upper confidence bound. It is meant for small populations, where random perturbation has too
few draws to find a good direction (the paper: 4-8 members), which is what GRPO budgets allow.

As in Ray Tune's ``pb2_utils``: the values are scaled to [0, 1] by their search-space bounds (log-scaled where
the distribution is), the target is each completed segment's improvement over the segment it continued from
(generation 0: over the worst of its generation, so every generation's rows are on one scale), standardised;
the kernel is a squared exponential in the values times ``(1 - eps) ** (|t - t'| / 2)`` in time (its
``TV_SquaredExp``), its length scale and ``eps`` picked by marginal likelihood on a small grid; the UCB weight
follows GP-UCB (Srinivas et al. 2010). Branches of one generation are chosen one after another, each chosen
point added as if it had scored the worst value seen (constant liar, Ginsbourger et al. 2010), so two branches
do not pick the same point. Candidates are drawn from the member's own seeded RNG: the decisions stay a function
of the study's trials and its seed, so a killed driver reruns to the same branches (see grpo/sweep/run/pbt.py).

Only float and int keys are modelled (PB2's continuous bounds); a categorical explored key is perturbed as PBT
does (``explore_value``).
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from optuna.distributions import BaseDistribution, FloatDistribution, IntDistribution

CANDIDATES = 512  # random points at which the UCB is evaluated (plus the parent's own values)
LENGTH_SCALES = (0.1, 0.2, 0.4, 0.8)
TIME_EPS = (0.01, 0.1, 0.3)
NOISE = 1e-2  # observation noise of the standardised target


def modelled(dist: BaseDistribution) -> bool:
    return isinstance(dist, (FloatDistribution, IntDistribution)) and dist.high > dist.low


def to_unit(value: float, dist: FloatDistribution | IntDistribution) -> float:
    if dist.log:
        return (math.log(value) - math.log(dist.low)) / (math.log(dist.high) - math.log(dist.low))
    return (float(value) - dist.low) / (dist.high - dist.low)


def from_unit(u: float, dist: FloatDistribution | IntDistribution) -> float | int:
    u = min(1.0, max(0.0, u))
    x = (
        math.exp(math.log(dist.low) + u * (math.log(dist.high) - math.log(dist.low)))
        if dist.log
        else (dist.low + u * (dist.high - dist.low))
    )
    if dist.step is not None:
        x = dist.low + round((x - dist.low) / dist.step) * dist.step
    x = min(dist.high, max(dist.low, x))
    return round(x) if isinstance(dist, IntDistribution) else float(f"{x:.6g}")


def _kernel(a: np.ndarray, ta: np.ndarray, b: np.ndarray, tb: np.ndarray, length: float, eps: float) -> np.ndarray:
    """Ray Tune's TV_SquaredExp: exp(-||a - b||^2 / length) * (1 - eps) ** (|ta - tb| / 2)."""
    distance = ((a[:, None, :] - b[None, :, :]) ** 2).sum(-1)
    return np.exp(-distance / length) * (1.0 - eps) ** (np.abs(ta[:, None] - tb[None, :]) / 2.0)


@dataclass
class GP:
    x: np.ndarray  # (n, d) in [0, 1]
    t: np.ndarray  # (n,) generation
    y: np.ndarray  # (n,) standardised improvement
    length: float = 0.2
    eps: float = 0.1
    _chol: Any = field(default=None, repr=False)
    _alpha: Any = field(default=None, repr=False)

    def fit(self) -> GP:
        """Length scale and time decay by marginal likelihood over the grid, then the posterior's factors."""
        best = (-math.inf, self.length, self.eps)
        for length in LENGTH_SCALES:
            for eps in TIME_EPS:
                ll = self._factor(length, eps)
                if ll > best[0]:
                    best = (ll, length, eps)
        _, self.length, self.eps = best
        self._factor(self.length, self.eps)
        return self

    def _factor(self, length: float, eps: float) -> float:
        k = _kernel(self.x, self.t, self.x, self.t, length, eps) + NOISE * np.eye(len(self.y))
        chol = np.linalg.cholesky(k)
        alpha = np.linalg.solve(chol.T, np.linalg.solve(chol, self.y))
        self._chol, self._alpha = chol, alpha
        return float(-0.5 * self.y @ alpha - np.log(np.diag(chol)).sum())

    def predict(self, x: np.ndarray, t: float) -> tuple[np.ndarray, np.ndarray]:
        tx = np.full(len(x), float(t))
        ks = _kernel(x, tx, self.x, self.t, self.length, self.eps)
        mean = ks @ self._alpha
        v = np.linalg.solve(self._chol, ks.T)
        var = np.clip(1.0 - (v**2).sum(0), 1e-12, None)
        return mean, np.sqrt(var)


def ucb_weight(n: int, d: int) -> float:
    """GP-UCB's beta for n observations in d dimensions (delta 0.1), as a weight on the standard deviation."""
    beta = 2.0 * math.log(max(n, 1) ** (d / 2.0 + 2.0) * math.pi**2 / (3.0 * 0.1))
    return math.sqrt(max(beta, 0.0)) / 2.0


@dataclass(frozen=True)
class Observation:
    params: Mapping[str, Any]
    generation: int
    improvement: float  # the lineage's objective after the segment minus before it (sign: higher is better)


class Bandit:
    """The GP over one generation's data; ``choose`` picks one branch's values and remembers it."""

    def __init__(self, observations: Sequence[Observation], keys: Sequence[str], dists: Mapping[str, Any], t: int):
        self.keys = [k for k in keys if modelled(dists[k])]
        self.dists, self.t = dists, t
        rows = [o for o in observations if all(k in o.params for k in self.keys)]
        self.x = np.array([[to_unit(o.params[k], dists[k]) for k in self.keys] for o in rows]).reshape(
            len(rows), len(self.keys)
        )
        self.tt = np.array([float(o.generation) for o in rows])
        y = np.array([o.improvement for o in rows], dtype=float)
        self.y = (y - y.mean()) / y.std() if len(y) > 1 and y.std() > 0 else np.zeros_like(y)
        self._fitted: GP | None = None

    @property
    def usable(self) -> bool:
        return bool(self.keys) and len(self.y) >= 2

    def choose(self, parent: Mapping[str, Any], rng: random.Random, taken: set[tuple[Any, ...]]) -> dict[str, Any]:
        """The parent's values with the modelled keys set to the UCB's maximiser (not a point in ``taken``)."""
        if self._fitted is None:  # hyperparameters from the real observations only, not from the liars
            self._fitted = GP(self.x, self.tt, self.y).fit()
        gp = GP(self.x, self.tt, self.y, self._fitted.length, self._fitted.eps)
        gp._factor(gp.length, gp.eps)
        d = len(self.keys)
        own = [to_unit(parent[k], self.dists[k]) for k in self.keys]
        cand = np.array([own] + [[rng.random() for _ in range(d)] for _ in range(CANDIDATES)])
        mean, std = gp.predict(cand, self.t)
        score = mean + ucb_weight(len(self.y), d) * std
        for i in np.argsort(-score, kind="stable"):
            out = dict(parent)
            out.update({k: from_unit(float(cand[i][j]), self.dists[k]) for j, k in enumerate(self.keys)})
            if tuple(sorted(out.items())) in taken:
                continue
            # constant liar (the worst value seen): the next branch of this generation looks elsewhere
            self.x = np.vstack([self.x, cand[i][None, :]])
            self.tt = np.append(self.tt, float(self.t))
            self.y = np.append(self.y, self.y.min())
            return out
        return dict(parent)
