"""The quickstart's own report in headless Chromium: sweeps/quickstart.yaml, shortened only in size (10
iterations, 3 trials, a 2-trial x 2-seed confirmation stage), runs end to end on the real engine through
the CLI, and the page it writes must show, in the rendered DOM: the winner with an interval over seeds,
held-out accuracy curves with seed bands, the best trial marked in every slice, and the "too few complete
trials" note instead of importances (at most 5 complete trials < 10). The fixture-based checks of the same page
are in test_report_browser.py."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
import yaml
from sweep_helpers import run_cli
from test_report_browser import BEST_RED, between, chromium, held_out_subplot

REPO = Path(__file__).resolve().parents[1]
pytestmark = [
    pytest.mark.browser,
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("chromium") is None and shutil.which("chromium-browser") is None,
                       reason="headless Chromium is not installed (apt-get install chromium)"),
]


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("quickstart")
    spec = yaml.safe_load((REPO / "sweeps" / "quickstart.yaml").read_text())
    spec["overrides"] = ["megatron_training.train_iters=10", "megatron_training.save_interval=10",
                         "engine.eval_every=5"]
    spec.update(trials=3, confirm={"top_k": 2, "seeds": 2}, timeout_per_trial=300)
    (tmp / "quickstart.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    done = run_cli(["run", "quickstart.yaml", "--quiet"], cwd=tmp, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    index = tmp / "reports" / "quickstart" / "index.html"
    run = chromium(tmp / "profile", "--dump-dom", index.as_uri())
    assert run.returncode == 0, run.stderr[-2000:]
    return run.stdout


@pytest.fixture(scope="module")
def complete(page, tmp_path_factory):
    """How many trials of the study completed, as `grpo-sweep status --json` says (the collapse rule may
    stop a high-lr trial: 3 search trials + 2 confirmation trials, minus what was pruned)."""
    tmp = next(tmp_path_factory.getbasetemp().glob("quickstart*"))
    status = run_cli(["status", "quickstart.yaml", "--json"], cwd=tmp, timeout=120)
    assert status.returncode == 0, status.stderr[-2000:]
    return sum(t["state"] == "COMPLETE" for t in json.loads(status.stdout)["trials"])


def test_the_winner_is_shown_with_its_interval(page):
    decision = between(page, '<section id="decision">', "</section>")
    winner = re.search(r'Winner: <a href="#trial-(\d+)">#\d+</a> \(confirmation of trial #\d+\): eval/acc_greedy = '
                       r'<span class="interval">([\d.]+) \[([\d.]+), ([\d.]+)\] \(2 seeds, 95% CI\)', decision)
    assert winner, decision[:3000]
    mean, low, high = map(float, winner.groups()[1:])
    assert low <= mean <= high


def test_held_out_curves_have_seed_bands(page):
    fills = re.findall(r'<path class="js-fill" d="([^"]+)"', held_out_subplot(page))
    assert len(fills) == 2 and all(len(d) > 20 for d in fills)  # the two 2-seed confirmation trials


def test_the_best_trial_is_marked_in_every_slice(page):
    slices = between(page, 'id="plot-slice"', "</script>")
    stars = re.findall(r'<path class="point"[^>]*style="[^"]*fill: (rgb\([^)]*\))', slices)
    assert stars.count(BEST_RED) == 2  # lr and clip_ratio


def test_too_few_trials_for_importances_says_so(page, complete):
    body = between(page, '<section id="importances0"', "</section>")
    assert 4 <= complete < 10  # the 2 confirmation trials and the 2 search trials they confirm, at least
    assert re.search(rf"Too few complete trials for parameter importances: {complete} complete, at least 10 needed",
                     body), body
    assert "plotly-graph-div" not in body
