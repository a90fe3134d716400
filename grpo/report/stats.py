"""Seed statistics: how sure a trial's value is, and whether the winner beats the runner-up.

A trial that ran ``k`` seeds has ``k`` values per objective (the trial attribute ``values_per_seed``); its
value is their mean. ``mean_interval`` is a percentile bootstrap interval of that mean over the seeds
(scipy's ``stats.bootstrap``); with one seed there is no interval. ``compare`` pairs two trials' values
by seed (the same seed gives both trials the same data order and sampling stream, so a paired test
removes that shared noise) and runs a paired t-test on the differences (scipy's ``stats.ttest_rel``). A
permutation test would assume less, but an exact two-sided sign-flip test cannot go below p = 2^(1-k):
with the 3-5 seeds a GRPO study can afford it could never call a winner at 5 %. ``verdict`` applies it
to a study's two best trials.

Pure functions of numbers and ``FrozenTrial`` attributes: the driver, ``status``, ``best`` and the report all
read the same statistics from here.
"""

from __future__ import annotations

import math
import statistics
import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from optuna.study import StudyDirection
from optuna.trial import FrozenTrial

from grpo.report.best import comparable_trials, configuration, fold_confirmed
from grpo.trial_attrs import CONFIRMATION_OF, SEEDS, VALUES_PER_SEED

CONFIDENCE = 0.95
RESAMPLES = 5000
ALPHA = 0.05


@dataclass(frozen=True)
class Interval:
    """The mean of ``n`` seed values and its bootstrap interval (``low``/``high`` None for one seed)."""

    mean: float
    low: float | None
    high: float | None
    n: int

    def text(self, digits: int = 4) -> str:
        if self.low is None or self.high is None:
            return f"{self.mean:.{digits}g} (1 seed, no interval)"
        return f"{self.mean:.{digits}g} [{self.low:.{digits}g}, {self.high:.{digits}g}] ({self.n} seeds, 95% CI)"


def mean_interval(values: Sequence[float], seed: int = 0) -> Interval:
    """Mean of ``values`` with a 95 % percentile-bootstrap interval (deterministic: fixed ``seed``)."""
    data = np.asarray([v for v in values if v is not None and math.isfinite(v)], dtype=float)
    if data.size == 0:
        return Interval(math.nan, None, None, 0)
    mean = float(data.mean())
    if data.size < 2:
        return Interval(mean, None, None, int(data.size))
    if np.ptp(data) == 0:  # every seed agrees: the bootstrap has nothing to resample
        return Interval(mean, mean, mean, int(data.size))
    from scipy import stats

    res = stats.bootstrap(
        (data,),
        np.mean,
        confidence_level=CONFIDENCE,
        n_resamples=RESAMPLES,
        method="percentile",
        random_state=np.random.default_rng(seed),
    )
    return Interval(mean, float(res.confidence_interval.low), float(res.confidence_interval.high), int(data.size))


@dataclass(frozen=True)
class Comparison:
    """Trial ``a`` against trial ``b`` on the seeds both ran (differences are a - b, signed so > 0 favours a)."""

    a: int
    b: int
    seeds: int  # seeds both ran
    mean_difference: float  # in the objective's own direction: > 0 means a is better
    p_value: float | None  # paired t-test; None with fewer than 2 paired seeds
    distinguishable: bool

    def text(self) -> str:
        if self.p_value is None:
            return (
                f"trial {self.a} vs trial {self.b}: only {self.seeds} paired seed(s), too few to tell them apart; "
                f"run more seeds (confirm: in the spec)"
            )
        if self.distinguishable:
            return (
                f"trial {self.a} beats trial {self.b} by {self.mean_difference:.4g} on average over {self.seeds} "
                f"paired seeds (paired t-test p = {self.p_value:.3g} < {ALPHA})"
            )
        return (
            f"trial {self.a} and trial {self.b} are not distinguishable: difference {self.mean_difference:.4g} over "
            f"{self.seeds} paired seeds, paired t-test p = {self.p_value:.3g} (>= {ALPHA})"
        )


def paired_values(a: FrozenTrial, b: FrozenTrial, objective: int = 0) -> tuple[list[float], list[float]]:
    """The two trials' values on the seeds both ran, in seed order."""
    va, vb = seed_values(a, objective), seed_values(b, objective)
    common = sorted(set(va) & set(vb))
    return [va[s] for s in common], [vb[s] for s in common]


def seed_values(trial: FrozenTrial, objective: int = 0) -> dict[int, float]:
    """seed -> value of one objective, from the trial's ``seeds`` and ``values_per_seed`` attributes.

    A trial stored without them (one seed, or an older study) gives its value under seed -1."""
    seeds = trial.user_attrs.get(SEEDS) or []
    per_seed = trial.user_attrs.get(VALUES_PER_SEED) or []
    if objective < len(per_seed) and len(per_seed[objective]) == len(seeds):
        return {int(s): float(v) for s, v in zip(seeds, per_seed[objective], strict=True)}
    if trial.values is not None:
        return {-1: float(trial.values[objective])}
    return {}


def trial_interval(trial: FrozenTrial, objective: int = 0) -> Interval:
    """The trial's value as mean and interval over its seeds."""
    values = list(seed_values(trial, objective).values())
    if not values:
        return Interval(math.nan, None, None, 0)
    return mean_interval(values)


def compare(a: FrozenTrial, b: FrozenTrial, direction: StudyDirection, objective: int = 0) -> Comparison:
    """Paired t-test of ``a`` against ``b`` over the seeds both ran."""
    xa, xb = paired_values(a, b, objective)
    s = 1.0 if direction == StudyDirection.MAXIMIZE else -1.0
    diffs = np.asarray([s * (x - y) for x, y in zip(xa, xb, strict=True)], dtype=float)
    if diffs.size < 2:
        mean = float(diffs.mean()) if diffs.size else math.nan
        return Comparison(a.number, b.number, int(diffs.size), mean, None, False)
    p = paired_p(diffs)
    mean = float(diffs.mean())
    return Comparison(a.number, b.number, int(diffs.size), mean, p, p < ALPHA and mean > 0)


def paired_p(diffs: Sequence[float] | np.ndarray) -> float:
    """Two-sided p-value of a paired t-test that the mean of the paired differences is 0."""
    data = np.asarray(diffs, dtype=float)
    scale = max(1.0, float(np.abs(data).max()))
    if np.ptp(data) <= 1e-12 * scale:  # no spread (to float error): identical runs, or a difference all agree on
        return 1.0 if abs(float(data.mean())) <= 1e-12 * scale else 0.0
    from scipy import stats

    with warnings.catch_warnings():  # scipy's "precision loss" note on differences that nearly agree
        warnings.simplefilter("ignore", RuntimeWarning)
        return float(stats.ttest_1samp(data, 0.0).pvalue)


@dataclass(frozen=True)
class Verdict:
    """The study's winner and runner-up, each with its interval, and whether they can be told apart."""

    winner: FrozenTrial
    winner_interval: Interval
    runner_up: FrozenTrial | None
    runner_up_interval: Interval | None
    comparison: Comparison | None
    confirmed: bool  # decided among confirmation trials
    # Every trial ranked shares the winner's mean (all at -1 with a reward that never paid, say): no winner.
    tie: int = 0  # how many trials tie (0: no tie)

    def text(self) -> str:
        if self.tie:
            return f"no winner: the trials tie ({self.tie} trials at {self.winner_interval.text()})"
        head = f"best: trial {self.winner.number}, {self.winner_interval.text()}"
        if self.confirmed:
            head += " (confirmation stage)"
        if self.runner_up is None or self.runner_up_interval is None or self.comparison is None:
            return head + "; no runner-up to compare with"
        return (
            f"{head}; runner-up: trial {self.runner_up.number}, {self.runner_up_interval.text()}; "
            f"{self.comparison.text()}"
        )


def verdict(trials: Sequence[FrozenTrial], direction: StudyDirection, objective: int = 0) -> Verdict | None:
    """Winner and runner-up among COMPLETE trials with values: among the confirmation trials when there are
    at least two (they ran more seeds on the same seeds), else among all with a confirmed search trial folded
    into its confirmation (``best.fold_confirmed``); ranked by mean over seeds. The runner-up is the best trial
    of another configuration (``best.configuration``), never the winner's own rerun. A pbt
    study's segments compete only from its last generation (``best.comparable_trials``: the highest among
    ``trials``; pass ``best.comparable(study)`` while the last generation has not started)."""
    done = [
        t
        for t in comparable_trials(trials)
        if t.values is not None and len(t.values) > objective and t.state.name == "COMPLETE"
    ]
    confirmations = [t for t in done if t.user_attrs.get(CONFIRMATION_OF) is not None]
    pool = confirmations if len(confirmations) >= 2 else fold_confirmed(done)
    if not pool:
        return None
    s = -1.0 if direction == StudyDirection.MAXIMIZE else 1.0
    order = sorted(pool, key=lambda t: (s * statistics.fmean(seed_values(t, objective).values()), t.number))
    winner = order[0]
    best_mean = statistics.fmean(seed_values(winner, objective).values())
    tied = all(
        math.isclose(statistics.fmean(seed_values(t, objective).values()), best_mean, rel_tol=1e-12, abs_tol=1e-12)
        for t in order
    )
    # The runner-up is the best *other* configuration: a rerun of the winner's point is no rival to it.
    runner = next((t for t in order[1:] if configuration(t) != configuration(winner)), None)
    return Verdict(
        winner=winner,
        winner_interval=trial_interval(winner, objective),
        runner_up=runner,
        runner_up_interval=trial_interval(runner, objective) if runner is not None else None,
        comparison=compare(winner, runner, direction, objective) if runner is not None else None,
        confirmed=pool is confirmations,
        tie=len(order) if tied and len(order) > 1 else 0,
    )
