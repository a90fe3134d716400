"""Statistics for few-search benchmarks, as rliable reports them (Agarwal et al. 2021, arXiv:2108.13264).

- IQM: the interquartile mean (``scipy.stats.trim_mean`` with 25 % cut at each end), robust to one lucky or
  one broken search, less noisy than the median at 10 searches.
- Stratified bootstrap: resample searches within each stratum (an arm's searches; with one task a stratum is
  the arm), 95 % percentile interval.
- Paired difference to random: search ``s`` of an arm and search ``s`` of random share their seed; the mean of
  the paired differences with a bootstrap interval over the pairs.
- Probability of improvement: P(arm's search beats random's), the Mann-Whitney statistic over all pairs
  (ties count 1/2), as rliable's ``probability_of_improvement``.

``merge_summary`` writes one part of benchmarks/results/search_summary.json, keeping the other scripts' parts.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from scipy import stats

SUMMARY = Path(__file__).resolve().parent / "results" / "search_summary.json"


def iqm(values: Sequence[float]) -> float:
    return float(stats.trim_mean(np.asarray(values, dtype=float), 0.25))


def iqm_interval(values: Sequence[float], n: int = 2000, seed: int = 0) -> tuple[float, float, float]:
    """IQM and its 95 % stratified-bootstrap interval (one stratum: the arm's searches)."""
    x = np.asarray(values, dtype=float)
    if len(x) < 2:
        return iqm(x), float("nan"), float("nan")
    rng = np.random.default_rng(seed)
    boots = [iqm(x[rng.integers(0, len(x), len(x))]) for _ in range(n)]
    lo, hi = np.percentile(boots, [2.5, 97.5])
    return iqm(x), float(lo), float(hi)


def paired_difference(
    arm: Sequence[float], base: Sequence[float], n: int = 2000, seed: int = 0
) -> tuple[float, float, float]:
    """Mean of arm[s] - base[s] over paired searches and its 95 % bootstrap interval over the pairs."""
    d = np.asarray(arm, dtype=float) - np.asarray(base, dtype=float)
    if len(d) < 2:
        return float(np.mean(d)), float("nan"), float("nan")
    res = stats.bootstrap((d,), np.mean, n_resamples=n, method="percentile", random_state=np.random.default_rng(seed))
    return float(np.mean(d)), float(res.confidence_interval.low), float(res.confidence_interval.high)


def p_improvement(arm: Sequence[float], base: Sequence[float]) -> float:
    """P(X > Y) for X from the arm's searches, Y from the base's: ties count 1/2 (Mann-Whitney U / (n m))."""
    x, y = np.asarray(arm, dtype=float), np.asarray(base, dtype=float)
    u = stats.mannwhitneyu(x, y, alternative="greater").statistic
    return float(u / (len(x) * len(y)))


def git_commit(root: Path) -> str:
    out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, check=False)
    return out.stdout.strip()


def merge_summary(
    part: str, data: dict[str, Any], root: Path, path: Path = SUMMARY, default: str | None = None
) -> None:
    """Replace ``part`` ("tabular" or "real") of the summary file, keeping the other part."""
    old = json.loads(path.read_text()) if path.exists() else {}
    old[part] = data
    if default is not None:
        old["default"] = default
    old.setdefault("default", "default")
    old["commit"] = git_commit(root)
    path.write_text(json.dumps(old, indent=1, sort_keys=True) + "\n")
