"""benchmarks/_rliable.py: IQM, paired difference and probability of improvement on inputs with known answers,
and the summary file merged part by part."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from _rliable import iqm, iqm_interval, merge_summary, p_improvement, paired_difference


def test_iqm_drops_the_outer_quartiles():
    # 8 values: the lowest two and the highest two are cut, the mean of 3, 4, 5, 6 is 4.5
    assert iqm([1, 2, 3, 4, 5, 6, 7, 1000]) == pytest.approx(4.5)
    value, lo, hi = iqm_interval([1, 2, 3, 4, 5, 6, 7, 1000])
    assert value == pytest.approx(4.5) and lo <= value <= hi and hi < 1000


def test_paired_difference_of_a_constant_shift_is_that_shift():
    base = [0.80, 0.85, 0.82, 0.90, 0.79, 0.84, 0.88, 0.81, 0.86, 0.83]
    value, lo, hi = paired_difference([b + 0.02 for b in base], base)
    assert value == pytest.approx(0.02) and lo == pytest.approx(0.02) and hi == pytest.approx(0.02)
    value, lo, hi = paired_difference([b + d for b, d in zip(base, [0.01, 0.03] * 5, strict=True)], base)
    assert value == pytest.approx(0.02) and 0.01 <= lo < value < hi <= 0.03


def test_probability_of_improvement_counts_pairs_and_ties_half():
    assert p_improvement([2, 3], [1, 1]) == 1.0
    assert p_improvement([1, 1], [2, 3]) == 0.0
    # pairs (x, y): (1,1) tie 0.5, (1,2) 0, (3,1) 1, (3,2) 1 -> 2.5 / 4
    assert p_improvement([1, 3], [1, 2]) == pytest.approx(0.625)


def test_merge_keeps_the_other_part(tmp_path):
    path = tmp_path / "s.json"
    merge_summary("tabular", {"random": {"compute_share_8": [1, 1, 1]}}, tmp_path, path)
    merge_summary("real", {"random": {"iqm": [0.8, 0.7, 0.9]}}, tmp_path, path, default="random")
    got = json.loads(path.read_text())
    assert got["tabular"]["random"]["compute_share_8"] == [1, 1, 1]
    assert got["real"]["random"]["iqm"] == [0.8, 0.7, 0.9] and got["default"] == "random" and "commit" in got
