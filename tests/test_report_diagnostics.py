"""The GRPO diagnostics: each rule fires on the curve it describes and stays quiet just below its threshold."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from report_fixtures import make_study

from grpo.report import collect
from grpo.report import diagnostics as d

NAMES = {"entropy": "actor/entropy", "kl": "actor/kl_loss", "acc": "acc_rewards/mean",
         "format": "strict_format_rewards/mean", "length": "response_length/mean"}


def flags(cap=None, **series):
    n = len(next(iter(series.values())))
    return [f.name for f in d.check_curves(np.arange(1, n + 1), {k: np.asarray(v, float) for k, v in series.items()}, NAMES, cap)]


def test_entropy_collapse_threshold():
    assert flags(entropy=[1.0, 1.0, 0.9, 0.1, 0.09, 0.08]) == ["entropy_collapse"]
    assert flags(entropy=[1.0, 1.0, 0.9, 0.3, 0.2, 0.15]) == []  # 15-20 % of the start: not collapsed
    assert flags(entropy=[1.0, 0.01]) == []  # too few iterations for a trend


def test_kl_blowup_absolute_growth_and_non_finite():
    assert flags(kl=[0.01, 0.2, 1.5]) == ["kl_blowup"]
    assert flags(kl=[0.01, 0.02, 0.05, 0.1, 0.25, 0.3]) == ["kl_blowup"]  # 10x growth above the floor
    assert flags(kl=[0.01, 0.02, 0.03, 0.05, 0.08, 0.1]) == []  # grows 10x but stays small
    assert flags(kl=[0.01, float("inf")]) == ["kl_blowup"]
    assert flags(kl=[0.05, 0.06, 0.05]) == []


def test_format_rising_while_accuracy_flat():
    assert flags(format=[0.1, 0.2, 0.5, 0.8], acc=[0.3, 0.3, 0.31, 0.3]) == ["format_without_accuracy"]
    assert flags(format=[0.1, 0.2, 0.5, 0.8], acc=[0.3, 0.35, 0.4, 0.5]) == []  # accuracy learns too
    assert flags(format=[0.5, 0.55, 0.6, 0.65], acc=[0.3, 0.3, 0.3, 0.3]) == []  # rise below 0.2


def test_length_pinned_needs_max_tokens():
    assert flags(cap=100, length=[50, 80, 95, 99]) == ["length_pinned"]
    assert flags(cap=100, length=[50, 60, 80, 85]) == []
    assert flags(cap=None, length=[99, 99, 99]) == []


def test_fixture_study_flags_the_trials_built_to_fail_each_rule(tmp_path):
    frames = collect(make_study(tmp_path))
    got = {n: sorted(f.name for f in fl) for n, fl in frames.flags.items()}
    assert got == {1: ["entropy_collapse"], 2: ["kl_blowup"], 4: ["format_without_accuracy", "length_pinned"]}
    length = next(f for f in frames.flags[4] if f.name == "length_pinned")
    assert "max_tokens 24" in length.detail and length.metric == "response_length/mean"
    assert length.value == pytest.approx(23.5)


def _random_trial(rng: np.random.Generator) -> tuple[np.ndarray, dict[str, np.ndarray], int | None]:
    """Curves of 1-12 iterations near every rule's threshold, with missing (NaN) and non-finite points."""
    n = int(rng.integers(1, 13))
    its = np.sort(rng.choice(np.arange(1, 40), size=n, replace=False))
    start = rng.uniform(0.05, 1.5)
    series = {
        "entropy": start * np.geomspace(1.0, rng.uniform(0.03, 0.3), n),
        "kl": rng.uniform(0.005, 0.05) * np.geomspace(1.0, rng.uniform(1.0, 60.0), n) * rng.choice([1, -1]),
        "format": np.linspace(rng.uniform(0, 0.5), rng.uniform(0, 0.9), n),
        "acc": np.linspace(0.3, 0.3 + rng.uniform(-0.05, 0.08), n),
        "length": rng.uniform(10, 26, n),
    }
    for values in series.values():
        values[rng.random(n) < 0.1] = np.nan
    if rng.random() < 0.05:
        series["kl"][rng.integers(n)] = rng.choice([np.inf, -np.inf])
    roles = [r for r in series if rng.random() < 0.85]
    return its, {r: series[r] for r in roles}, (24 if rng.random() < 0.7 else None)


def test_a_study_and_each_trial_alone_get_the_same_flags():
    """The rules run on all trials at once (``diagnose``): a trial gets exactly the flags its own curves
    give (``check_curves``), whatever its neighbours look like. 400 random trials near the thresholds."""
    rng = np.random.default_rng(0)
    trials = [_random_trial(rng) for _ in range(400)]
    frames, caps = [], {}
    for number, (its, series, cap) in enumerate(trials):
        caps[number] = cap
        index = pd.MultiIndex.from_arrays([np.full(len(its), number), its], names=["trial", "iteration"])
        frames.append(pd.DataFrame({NAMES[r]: v for r, v in series.items()}, index=index))
    wide = pd.concat(frames).sort_index()
    together = d.evaluate(wide, NAMES, caps)
    alone = {n: d.check_curves(its, series, NAMES, cap) for n, (its, series, cap) in enumerate(trials)}
    assert together == {n: fl for n, fl in alone.items() if fl}
    fired = {f.name for fl in together.values() for f in fl}
    assert fired == {r.name for r in d.RULES}  # the cases reach every rule
    assert 20 < len(together) < 380  # ...and not every trial breaks one
