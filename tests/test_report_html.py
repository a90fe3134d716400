"""write_report(): every section of reports/<study>/index.html, escaping, multi-objective, partial studies."""

from __future__ import annotations

import re

import optuna
import pytest
import yaml
from plotly.offline import get_plotlyjs
from report_fixtures import PAYLOAD, make_study

from grpo.report import write_report

PLOT_SECTIONS = ("slice", "parallel", "history0", "curves", "cost0")
NOTE_SECTIONS = ("importances0", "contour")  # 4 complete trials: too few for importances (and the contour)
SECTIONS = ("summary", "decision", "why", "runs", "health", "samples", "cost", "reproduce", "trials", "details",
            *PLOT_SECTIONS, *NOTE_SECTIONS)


def drawn(page: str) -> set[str]:
    """Ids of sections that hold a figure (not a note)."""
    return set(re.findall(r'<div id="plot-([\w-]+)" class="plotly-graph-div"', page))


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("html")
    study = make_study(tmp, payload=PAYLOAD)
    index = write_report(study, tmp / "reports" / "s", spec_path="sweeps/s.yaml")
    return study, index, index.read_text()


def test_report_has_every_section_and_draws_every_plot(report):
    study, index, page = report
    assert index.name == "index.html"
    for section in SECTIONS:
        assert f'id="{section}"' in page, section
    assert drawn(page) == set(PLOT_SECTIONS)
    assert 'id="pareto"' not in page  # single objective
    for section in NOTE_SECTIONS:
        assert re.search(rf'<section id="{section}" class="panel"><h3>[^<]*</h3><p class="note">', page), section
    for number in range(6):
        assert f'id="trial-{number}"' in page
    # Header facts.
    assert "sweeps/s.yaml" in page and "grpo_trainer_tiny_cpu" in page
    assert "tpe (seed=0" in page and "median (warmup_steps=2" in page
    assert "4 complete" in page and "1 pruned" in page and "1 fail" in page
    assert "maximize acc_rewards/mean (reduce: last)" in page
    # The winner, its value and its config beside the report (the per-trial checkpoint folder removed).
    best = re.search(r'<section id="decision">.*?</section>', page, re.S).group(0)
    assert re.search(r'Winner: <a href="#trial-5">#5</a>: acc_rewards/mean = <span class="interval">0.9 \(1 seed', best)
    assert 'href="best_config.yaml"' in best
    config = yaml.safe_load((index.parent / "best_config.yaml").read_text())
    expected = study.trials[5].user_attrs["config"]
    assert "save" in expected["actor_config"] and "save" not in config["actor_config"]
    expected["actor_config"].pop("save")
    assert config == expected
    # Diagnostics are flagged in the table and the curves.
    assert "entropy_collapse" in page and "kl_blowup" in page and "length_pinned" in page
    assert "health flag" in page
    # plotly.js inlined exactly once (the page works offline), and the rest of the page is small beside it.
    bundle = get_plotlyjs()
    assert page.count(bundle) == 1 and page.count("plotly.js v") == 1
    ours = page.replace(bundle, "")
    assert len(ours) < len(bundle) / 2
    assert not re.search(r'(src|href)="(https?:)?//', ours) and "cdn" not in ours.lower()


def test_detail_sections_diff_against_the_base_config_and_show_failure_logs(report):
    _, _, page = report
    trial0 = re.search(r'<section class="trial" id="trial-0">.*?</section>', page, re.S).group(0)
    assert "Config diffs are against the base config grpo_trainer_tiny_cpu" in page
    row = re.search(r"<tr><td><code>rl_config.clip_ratio</code></td><td>([^<]*)</td><td>([^<]*)</td></tr>", trial0)
    assert row and row.group(2) == "0.1" and row.group(1) != "0.1"
    failed = re.search(r'<section class="trial" id="trial-3">.*?</section>', page, re.S).group(0)
    assert "Last log lines" in failed and "RuntimeError: boom" in failed and "out of memory" in failed


def test_user_strings_are_escaped_everywhere(report):
    """The payload is in the study name, a parameter value, a failure reason and a log line."""
    _, _, page = report
    assert PAYLOAD not in page
    escaped = "&lt;script&gt;alert(1)&lt;/script&gt;"
    assert f"Study report_study {escaped}" in page                               # study name
    assert f"<td>{escaped}</td>" in page                                         # layout param in the table
    assert f"out of memory {escaped}" in page                                    # failure reason
    assert f"RuntimeError: boom {escaped}" in page                               # log line
    blocks = re.findall(r"<script>\s*window.PLOTLYENV(.*?)</script>", page, re.S)
    assert len(blocks) == len(PLOT_SECTIONS)
    assert all("<" not in block for block in blocks)                             # figure JSON: no raw '<'
    assert any("alert(1)" in block for block in blocks)                          # ...and the value is there
    # The only <script> elements are ours: plotly, one Plotly.newPlot per figure, the table code.
    assert len(re.findall(r"<script[\s>]", page)) == 1 + len(PLOT_SECTIONS) + 1
    assert "&lt;answer&gt;" in page and "&lt;think&gt;" in page                 # model output in the samples


def test_multi_objective_study_gets_a_pareto_front(tmp_path):
    study = make_study(tmp_path, name="mo", multi=True, extra=8)  # 12 complete: enough for importances
    page = write_report(study, tmp_path / "out").read_text()
    assert 'id="pareto"' in page and "pareto" in drawn(page)
    assert {"history0", "history1", "importances0", "importances1", "cost0", "cost1"} <= drawn(page)
    assert "Pareto-optimal trial(s)" in page
    # The chosen trade-off: marked in the front's plot and first in the decision, its row highlighted.
    pareto = re.search(r'<section id="pareto".*?</section>', page, re.S).group(0)
    assert "chosen trade-off: best trial #" in pareto
    decision = re.search(r'<section id="decision">.*?</section>', page, re.S).group(0)
    chosen = re.search(r"Chosen trade-off: <a href=\"#trial-(\d+)\">", decision).group(1)
    assert f"chosen trade-off: best trial #{chosen}" in pareto
    assert re.search(rf'<tr class="chosen"><td><a href="#trial-{chosen}">', decision)
    assert (tmp_path / "out" / "best_config.yaml").is_file()


def test_running_interrupted_study_still_reports(tmp_path):
    study = make_study(tmp_path, name="live", running=True)
    page = write_report(study, tmp_path / "out").read_text()
    assert "1 running" in page and "now (trials running)" in page
    assert 'id="trial-6"' in page
    assert "curves" in drawn(page)


def test_few_trials_give_notes_not_crashes_and_a_study_without_a_recorded_base_config(tmp_path):
    """A study made before the sweep recorded ``base_config`` is diffed against its first trial's config."""
    storage = optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(str(tmp_path / "j.log")))
    study = optuna.create_study(study_name="tiny", storage=storage)
    study.set_user_attr("base", "grpo_trainer_tiny_cpu")
    empty = write_report(study, tmp_path / "empty").read_text()
    assert "No completed trial yet." in empty and "No trials yet." in empty
    assert not (tmp_path / "empty" / "best_config.yaml").exists()
    trial = study.ask()
    trial.set_user_attr("config", {"rl_config": {"clip_ratio": 0.2}})
    study.tell(trial, 1.0)  # one completed trial and no parameter
    page = write_report(study, tmp_path / "one").read_text()
    assert re.search(r'id="importances0".*?the study has no parameters', page, re.S)
    assert re.search(r'id="contour".*?needs at least 2 completed trials', page, re.S)
    assert re.search(r'id="parallel".*?the study has no parameters', page, re.S)
    assert "history0" in drawn(page)
    assert "records no base config" in page and "trial #0&#x27;s config" in page


def test_the_best_trial_is_marked_in_every_plot_that_shows_trials(report):
    _, _, page = report
    marks = {"history0": "best trial #5", "parallel": "best trial #5", "slice": "best trial #5",
             "cost0": "best trial #5", "curves": "#5 complete (best)"}
    for section, mark in marks.items():
        body = re.search(rf'<section id="{section}".*?</section>', page, re.S).group(0)
        assert mark in body, section


def test_the_trials_table_sorts_by_number_where_the_text_does_not(report):
    """Durations read "1m 48s": their cells carry the seconds for the sort code."""
    _, _, page = report
    table = re.search(r'<table class="sortable trials">.*?</table>', page, re.S).group(0)
    assert table.count("<tr>") == 1 + 6
    assert '<td><span data-sort="108">1m 48s</span></td>' in table  # trial 0's compute: 2 seeds x 6 x 9 s
    assert '<a href="#trial-5">5</a>' in table
