"""Promotion: did the search's ranking hold on the base the confirmation stage promoted its best trials to?

A confirmation stage with ``confirm.base`` reruns the search's top k on another base (a bigger model, an NPU
config); those trials carry ``promoted_base`` and ``confirmation_of`` (the search trial). ``promotions(trials,
direction)`` compares, per promoted base, the search ranking of the confirmed trials (their search values) with
their ranking on the target (the mean over the confirmation seeds): Kendall's tau-b and Spearman's rho, each with
a 95 % percentile bootstrap interval. The confirmation trials share their seeds, so a resample draws seeds (with
replacement) and takes every trial's mean over the same draw: the pairing by seed is kept, as in
``stats.compare``. The outcome, in one sentence: the ranking held (the interval of tau lies above 0), did not
hold (it lies at or below 0), or cannot tell (it spans 0, or fewer than two paired seeds or confirmed trials).

tau and rho are computed here with numpy, vectorised over the resamples (scipy's ``kendalltau`` and
``spearmanr``, called once per resample, would cost seconds per report); tests/test_report_lineage.py checks
the point estimates against scipy.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from optuna.study import StudyDirection
from optuna.trial import FrozenTrial, TrialState

from grpo.report.stats import CONFIDENCE, seed_values
from grpo.trial_attrs import CONFIRMATION_OF, PROMOTED_BASE

RESAMPLES = 4000
HELD, NOT_HELD, CANNOT_TELL = "held", "did not hold", "cannot tell"


@dataclass(frozen=True)
class Row:
    """One confirmed trial: its search trial's value and rank, its mean on the target base and rank there."""

    source: int
    search_value: float
    search_rank: int  # 1: the search's best
    trial: int  # the confirmation trial
    mean: float  # over the paired seeds
    rank: int  # 1: the best on the target base


@dataclass(frozen=True)
class Correlation:
    value: float
    low: float | None
    high: float | None

    def text(self) -> str:
        if not math.isfinite(self.value):
            return "undefined"
        if self.low is None or self.high is None:
            return f"{self.value:.2f}"
        return f"{self.value:.2f} [{self.low:.2f}, {self.high:.2f}]"


@dataclass(frozen=True)
class Promotion:
    base: str  # the promoted base
    search_base: str | None  # the study's own base
    rows: list[Row]  # in search order
    seeds: list[int]  # the seeds every confirmed trial ran
    tau: Correlation | None
    rho: Correlation | None
    outcome: str  # HELD, NOT_HELD or CANNOT_TELL

    def sentence(self) -> str:
        """The plain sentence of the page: held / did not hold / cannot tell, and why."""
        source = f"on {self.search_base}" if self.search_base else "in the search"
        k = len(self.rows)
        if k < 2 or self.tau is None or self.rho is None:
            why = "a ranking needs two trials" if k < 2 else "they share no seed to pair them by"
            return (
                f"Cannot tell whether the ranking {source} held on {self.base}: {k} confirmed trial(s) completed "
                f"there with {len(self.seeds)} paired seed(s); {why}."
            )
        stats = (
            f"Kendall's tau = {self.tau.text()}, Spearman's rho = {self.rho.text()} between the search ranking of "
            f"the {k} confirmed trials and their mean over {len(self.seeds)} paired seed(s) on {self.base}"
        )
        if self.tau.low is not None:
            stats += f" ({CONFIDENCE:.0%} bootstrap intervals over the seeds)"
        top = self.rows[0]
        kept = (
            f"the search's best, trial {top.source}, is also the best there"
            if top.rank == 1
            else f"the search's best, trial {top.source}, ranks {top.rank} of {k} there"
        )
        if self.outcome == HELD:
            return f"The ranking {source} held on {self.base}: {stats}; {kept}."
        if self.outcome == NOT_HELD:
            return f"The ranking {source} did not hold on {self.base}: {stats}; {kept}."
        why = "one paired seed gives no interval" if len(self.seeds) < 2 else "the interval of tau spans 0"
        return f"Cannot tell whether the ranking {source} held on {self.base} ({why}): {stats}; {kept}."


def promotions(
    trials: Sequence[FrozenTrial], direction: StudyDirection, search_base: str | None = None, objective: int = 0
) -> list[Promotion]:
    """One ``Promotion`` per base that confirmation trials were promoted to (by base name); [] when none was."""
    by_number = {t.number: t for t in trials}
    per_base: dict[str, dict[int, FrozenTrial]] = {}
    for t in sorted(trials, key=lambda t: t.number):
        base, source = t.user_attrs.get(PROMOTED_BASE), t.user_attrs.get(CONFIRMATION_OF)
        if base is None or source is None or t.state != TrialState.COMPLETE or not t.values:
            continue
        src = by_number.get(int(source))
        if src is None or src.state != TrialState.COMPLETE or not src.values:
            continue
        per_base.setdefault(str(base), {})[src.number] = t  # the latest confirmation of a source counts
    return [
        _promotion(base, confirmed, by_number, direction, search_base, objective)
        for base, confirmed in sorted(per_base.items())
    ]


def _promotion(
    base: str,
    confirmed: dict[int, FrozenTrial],
    by_number: dict[int, FrozenTrial],
    direction: StudyDirection,
    search_base: str | None,
    objective: int,
) -> Promotion:
    s = -1.0 if direction == StudyDirection.MAXIMIZE else 1.0  # s * value sorts best first
    sources = sorted(confirmed, key=lambda n: (s * float(by_number[n].values[objective]), n))
    per_seed = [seed_values(confirmed[n], objective) for n in sources]
    seeds = sorted(set.intersection(*(set(v) for v in per_seed))) if per_seed else []
    search = np.asarray([float(by_number[n].values[objective]) for n in sources])
    matrix = np.asarray([[v[seed] for seed in seeds] for v in per_seed], dtype=float).reshape(len(sources), len(seeds))
    means = matrix.mean(axis=1) if seeds else np.full(len(sources), np.nan)
    target_order = sorted(range(len(sources)), key=lambda i: (s * means[i], sources[i]))
    target_rank = {i: r + 1 for r, i in enumerate(target_order)}
    rows = [
        Row(n, float(search[i]), i + 1, confirmed[n].number, float(means[i]), target_rank[i])
        for i, n in enumerate(sources)
    ]
    if len(sources) < 2 or not seeds:
        return Promotion(base, search_base, rows, seeds, None, None, CANNOT_TELL)
    tau_point = float(kendall_tau(search, means[None, :])[0])
    rho_point = float(spearman_rho(search, means[None, :])[0])
    if len(seeds) < 2:
        tau, rho = Correlation(tau_point, None, None), Correlation(rho_point, None, None)
        return Promotion(base, search_base, rows, seeds, tau, rho, CANNOT_TELL)
    rng = np.random.default_rng(0)
    draws = rng.integers(0, len(seeds), size=(RESAMPLES, len(seeds)))
    resampled = matrix[:, draws].mean(axis=2).T  # (resamples, trials)
    tau = _with_interval(tau_point, kendall_tau(search, resampled))
    rho = _with_interval(rho_point, spearman_rho(search, resampled))
    if not math.isfinite(tau_point) or tau.low is None or tau.high is None:
        outcome = CANNOT_TELL
    elif tau.low > 0:
        outcome = HELD
    elif tau.high <= 0:
        outcome = NOT_HELD
    else:
        outcome = CANNOT_TELL
    return Promotion(base, search_base, rows, seeds, tau, rho, outcome)


def _with_interval(point: float, samples: np.ndarray) -> Correlation:
    # A resample whose means all tie has no order: it counts as no agreement (0), not as a missing draw.
    samples = np.where(np.isfinite(samples), samples, 0.0)
    alpha = (1 - CONFIDENCE) / 2
    low, high = np.quantile(samples, [alpha, 1 - alpha])
    return Correlation(point, float(low), float(high))


def kendall_tau(x: np.ndarray, ys: np.ndarray) -> np.ndarray:
    """Kendall's tau-b (ties corrected, as scipy's ``kendalltau``) of ``x`` with each row of ``ys``; NaN where
    one side has no untied pair."""
    pairs = list(itertools.combinations(range(len(x)), 2))
    i, j = (np.asarray(p) for p in zip(*pairs, strict=True))
    sx = np.sign(x[i] - x[j])
    sy = np.sign(ys[:, i] - ys[:, j])
    n0 = len(pairs)
    denominator = np.sqrt((n0 - np.count_nonzero(sx == 0)) * (n0 - np.count_nonzero(sy == 0, axis=1)))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(denominator > 0, (sy * sx).sum(axis=1) / np.where(denominator > 0, denominator, 1), np.nan)


def spearman_rho(x: np.ndarray, ys: np.ndarray) -> np.ndarray:
    """Spearman's rho (Pearson's r of average ranks, as scipy's ``spearmanr``) of ``x`` with each row of ``ys``."""
    rx = _ranks(x[None, :])[0]
    ry = _ranks(ys)
    dx = rx - rx.mean()
    dy = ry - ry.mean(axis=1, keepdims=True)
    denominator = np.sqrt((dx**2).sum() * (dy**2).sum(axis=1))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(denominator > 0, (dy * dx).sum(axis=1) / np.where(denominator > 0, denominator, 1), np.nan)


def _ranks(rows: np.ndarray) -> np.ndarray:
    """Average ranks (ties share the mean of their ranks) along each row."""
    less = (rows[:, None, :] < rows[:, :, None]).sum(axis=2)
    equal = (rows[:, None, :] == rows[:, :, None]).sum(axis=2)
    return less + (equal + 1) / 2.0
