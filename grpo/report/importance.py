"""Parameter importances with their uncertainty, and only when there are enough trials to mean anything.

``importances(study, complete, target)`` returns ``Importances`` or, below ``MIN_TRIALS`` complete
trials, a note saying how many there are: a forest fitted to 2-3 points draws a confident bar for
whichever parameter happened to vary with the noise (the quickstart once said clip_ratio 0.69 where
optuna-dashboard said lr 0.99 on the same study).

- The point estimate is Optuna's own (``optuna.importance.get_param_importances``, normalised): fANOVA
  with Optuna's defaults (the numbers optuna-dashboard shows) up to ``FANOVA_MAX_TRIALS`` trials,
  PED-ANOVA beyond (fANOVA's forest grows faster than linearly).
- The spread: the same evaluator on ``RESAMPLES`` bootstrap resamples of the trials (drawn with
  replacement, fixed seed; fANOVA with ``RESAMPLE_TREES`` trees, which moves the estimate far less than
  the resampling does). ``low``/``high`` are the 10th and 90th percentiles over the resamples.
- At most ``MAX_TRIALS`` trials are used, a uniform sample (fixed seed) of a bigger study, so a
  10,000-trial study costs what a 500-trial one does.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import optuna
from optuna.importance import (
    BaseImportanceEvaluator,
    FanovaImportanceEvaluator,
    PedAnovaImportanceEvaluator,
    get_param_importances,
)
from optuna.trial import FrozenTrial

from grpo.report._figure import MARGIN
from grpo.report._snapshot import snapshot

log = logging.getLogger(__name__)

MIN_TRIALS = 10
FANOVA_MAX_TRIALS = 100
MAX_TRIALS = 500
RESAMPLES = 10
RESAMPLE_TREES = 16
PERCENTILES = (10, 90)


@dataclass(frozen=True)
class Importances:
    """Normalised importances (``value``), their bootstrap percentiles (``low``/``high``), most important first."""

    params: list[str]
    value: list[float]
    low: list[float]
    high: list[float]
    complete: int  # complete trials in the study
    used: int  # trials the estimate used (a sample beyond MAX_TRIALS)
    method: str
    resamples: int  # resamples that gave an answer

    def top(self, k: int = 2) -> list[str]:
        return self.params[:k]

    def caption(self) -> str:
        used = (
            f"all {self.complete} complete trials"
            if self.used == self.complete
            else f"a uniform sample of {self.used} of the {self.complete} complete trials"
        )
        spread = (
            f"whiskers: {PERCENTILES[0]}th-{PERCENTILES[1]}th percentile over {self.resamples} bootstrap resamples "
            "of the trials (a wide whisker: the data cannot rank that parameter yet)"
            if self.resamples
            else "no bootstrap spread (every resample failed)"
        )
        return f"Importance by {self.method} over {used}; {spread}."


def too_few(complete: int) -> str | None:
    """The note that replaces the importances below ``MIN_TRIALS`` complete trials (None: enough)."""
    if complete >= MIN_TRIALS:
        return None
    return (
        f"Too few complete trials for parameter importances: {complete} complete, at least {MIN_TRIALS} "
        "needed. With fewer, an importance is mostly noise and would look more certain than it is."
    )


def _evaluator(n: int, resample: bool) -> tuple[BaseImportanceEvaluator, str]:
    if n <= FANOVA_MAX_TRIALS:
        trees = RESAMPLE_TREES if resample else 64
        return FanovaImportanceEvaluator(n_trees=trees, seed=0), "fANOVA (Optuna's default)"
    return PedAnovaImportanceEvaluator(), f"PED-ANOVA (fANOVA is too slow beyond {FANOVA_MAX_TRIALS} trials)"


def importances(
    study: optuna.Study,
    complete: Sequence[FrozenTrial],
    target: Callable[[FrozenTrial], float] | None = None,
) -> Importances | str:
    """Importances of the study's parameters for ``target`` (default: the single objective), or a note."""
    note = too_few(len(complete))
    if note:
        return note
    snap = snapshot(study)
    rng = np.random.default_rng(0)
    used = list(complete)
    if len(used) > MAX_TRIALS:
        picks = np.sort(rng.choice(len(used), size=MAX_TRIALS, replace=False))
        used = [used[i] for i in picks]
    point_evaluator, method = _evaluator(len(used), resample=False)
    try:
        point = get_param_importances(snap.subset(used), evaluator=point_evaluator, target=target, normalize=True)
    except Exception as err:  # a degenerate space Optuna cannot evaluate: a note, not a lost report
        log.warning("report: importances failed: %s", err)
        return f"could not compute importances: {type(err).__name__}: {err}"
    if not point:
        return "the study has no parameters"
    params = list(point)
    draws: list[list[float]] = []
    for _ in range(RESAMPLES):
        sample = [used[i] for i in rng.integers(0, len(used), len(used))]
        evaluator, _ = _evaluator(len(used), resample=True)
        try:
            got = get_param_importances(
                snap.subset(sample), evaluator=evaluator, params=params, target=target, normalize=True
            )
        except Exception:  # a resample where a parameter never varies, say: it gives no answer
            continue
        draws.append([float(got.get(p, 0.0)) for p in params])
    value = [float(point[p]) for p in params]
    if draws:
        matrix = np.asarray(draws)
        low = np.percentile(matrix, PERCENTILES[0], axis=0).tolist()
        high = np.percentile(matrix, PERCENTILES[1], axis=0).tolist()
    else:
        low, high = list(value), list(value)
    return Importances(params, value, low, high, len(complete), len(used), method, len(draws))


def figure(result: Importances) -> dict[str, Any]:
    """Horizontal bars, most important on top, with the bootstrap percentiles as whiskers (figure JSON)."""
    order = list(reversed(range(len(result.params))))  # plotly draws the first bar at the bottom
    value = [result.value[i] for i in order]
    low = [result.low[i] for i in order]
    high = [result.high[i] for i in order]
    return {
        "data": [
            {
                "type": "bar",
                "orientation": "h",
                "name": "importance",
                "y": [result.params[i] for i in order],
                "x": value,
                "marker": {"color": "#1f77b4"},
                "error_x": {
                    "type": "data",
                    "symmetric": False,
                    "array": [max(0.0, h - v) for h, v in zip(high, value, strict=True)],
                    "arrayminus": [max(0.0, v - lo) for lo, v in zip(low, value, strict=True)],
                    "color": "#444444",
                    "thickness": 1.5,
                    "width": 6,
                },
                "customdata": [[lo, h] for lo, h in zip(low, high, strict=True)],
                "hovertemplate": "%{y}: %{x:.3f}<br>resamples: %{customdata[0]:.3f} to %{customdata[1]:.3f}"
                "<extra></extra>",
            }
        ],
        "layout": {
            "height": max(260, 60 + 40 * len(result.params)),
            "margin": {**MARGIN, "l": 220},
            "xaxis": {"title": {"text": "importance (normalised: they sum to 1)"}, "range": [0, 1.05]},
            "yaxis": {"automargin": True},
            "showlegend": False,
        },
    }
