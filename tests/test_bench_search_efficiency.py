"""benchmarks/search_efficiency.py on a synthetic table with known answers: the winner is judged on the seeds
the search never saw, the curve-aware arm stops a run that cannot catch the incumbent (the driver's
curve_decision, as grpo/sweep/run/stoppers.py calls it), and the summary keeps the issue's format."""

from __future__ import annotations

import gzip
import json
import sys
import tempfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import search_efficiency as se

ITERS = 80
GOOD, FLAT = 1e-5, 1e-4  # lr of the two configurations


def _curve(kind: str, seed: int) -> list[float]:
    """Held-out greedy accuracy at iterations 0, 10, ..., 80: the good run rises to ~0.9, the flat one
    stays at 0.66 (under its base 0.70 but within the collapse rule's 0.10, so only the curve stopper acts)."""
    wobble = 0.002 * (seed - 1234)
    if kind == "good":
        return [0.70] + [round(0.90 - 0.2 * 0.5 ** (i / 2) + wobble, 4) for i in range(1, 9)]
    return [0.70] + [round(0.66 + (0.003 if i % 2 else -0.003) + wobble, 4) for i in range(1, 9)]


def _write_table(path: Path) -> None:
    grid = {"actor_config.lr": [GOOD, FLAT], "rl_config.clip_ratio": [0.2], "rl_config.init_kl_coef": [0.01]}
    runs = []
    for lr, kind in ((GOOD, "good"), (FLAT, "flat")):
        for seed in (1234, 1235, 1236):
            params = {"actor_config.lr": lr, "rl_config.clip_ratio": 0.2, "rl_config.init_kl_coef": 0.01}
            iteration = [float(i) for i in range(ITERS + 1)]
            acc = [None] * (ITERS + 1)
            for n, v in enumerate(_curve(kind, seed)):
                acc[n * 10] = v
            runs.append({"params": params, "seed": seed, "curves": {"iteration": iteration, se.METRIC: acc}})
    header = {"grid": grid, "seeds": [1234, 1235, 1236], "train_iters": ITERS, "eval_every": 10, "git_commit": "x"}
    with gzip.open(path, "wt", encoding="utf-8") as fh:
        json.dump({"header": header, "runs": runs}, fh)


@pytest.fixture(scope="module")
def table(tmp_path_factory: pytest.TempPathFactory) -> se.Table:
    path = tmp_path_factory.mktemp("t") / "table.json.gz"
    _write_table(path)
    return se.load_table(path)


def test_the_winner_is_scored_on_the_seeds_the_search_did_not_see(table: se.Table) -> None:
    key = (GOOD, 0.2, 0.01)
    ends = table.end_point[key]
    # end point = mean of the last 3 evaluations (60, 70, 80) of each seed
    assert ends[1234] == pytest.approx(sum(_curve("good", 1234)[-3:]) / 3)
    assert table.test_value(key, 1234) == pytest.approx((ends[1235] + ends[1236]) / 2)
    assert table.test_value(key, 1236) != pytest.approx(table.test_value(key, 1234))


def test_the_curve_arm_stops_the_flat_run_once_the_good_one_is_finished(table: se.Table) -> None:
    combo = next(c for c in se.COMBOS if c.label == "TPE + curve + collapse rule")
    assert combo.pruner == {"name": "none", "curve": {"min_points": 5, "bounds": [0, 1]}, "collapse": {}}
    plain = next(c for c in se.COMBOS if c.label == "TPE + collapse rule")
    with tempfile.TemporaryDirectory() as folder:
        spec = se.base_spec(table, Path(folder))
    assert spec.objectives[0].reduce == "mean_last_k"  # the quickstart's objective, as it ships
    stopped, flat_second = 0, 0
    for seed in range(6):
        trace = se.replay(table, spec, combo, seed, 24 * ITERS, "answer")
        assert trace.trials == 2  # both points once, then the driver's limit of repeats
        # the flat run is stopped at its 5th evaluation after the start (iteration 50) when it runs second
        if trace.cost == [ITERS, ITERS + 50]:
            flat_second += 1
            stopped += trace.stopped_by == {"curve": 1}
        without = se.replay(table, spec, plain, seed, 24 * ITERS, "answer")
        assert without.pruned == 0 and without.cost[-1] == 2 * ITERS  # the collapse rule alone never acts here
    assert flat_second and stopped == flat_second


def test_the_summary_has_the_issue_format(table: se.Table, tmp_path: Path) -> None:
    wanted = [se.DEFAULT_LABEL, "random"]
    index = {c.label: i for i, c in enumerate(se.COMBOS)}
    with tempfile.TemporaryDirectory() as folder:
        spec = se.base_spec(table, Path(folder))
    traces = {
        index[w]: [se.replay(table, spec, se.COMBOS[index[w]], s, 24 * ITERS, "answer") for s in range(4)]
        for w in wanted
    }
    rows = se.summarize(table, traces, traces[index["random"]])
    path = tmp_path / "summary.json"
    se.write_tabular_summary(rows, path, {index[w]: 4 for w in wanted}, table)
    got = json.loads(path.read_text())
    arm = got["tabular"][se.DEFAULT_LABEL]
    assert len(arm["compute_share_8"]) == 3 and len(arm["compute_share_16"]) == 3
    assert set(arm["end_point_8"]) == {"iqm", "minus_random", "p_beats_random"}
    assert got["tabular"]["random"]["end_point_8"]["minus_random"] == [0.0, 0.0, 0.0]
    assert "default" in got and "commit" in got
