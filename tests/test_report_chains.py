"""A retried trial reads as one logical trial: grpo.report.chains, the trials frame, the page, `status`."""

from __future__ import annotations

import json
import re

import optuna
import pytest
from optuna.distributions import FloatDistribution
from optuna.trial import TrialState, create_trial
from report_fixtures import ITERATIONS, make_study

from grpo.report import collect, write_report
from grpo.report.chains import chain_text, logical_trials, retry_chains
from grpo.sweep.commands.handlers import _chains_note, _status_rows

# make_study(chain=True): trials 0-5 as usual (3 FAIL without a retry), then the chain 6 -> 7 -> 8.
CHAIN = [6, 7, 8]


@pytest.fixture(scope="module")
def chain_study(tmp_path_factory):
    return make_study(tmp_path_factory.mktemp("chain"), chain=True)


def _trial(number: int, state: TrialState = TrialState.FAIL, **attrs) -> optuna.trial.FrozenTrial:
    trial = create_trial(state=state, value=0.5 if state == TrialState.COMPLETE else None, user_attrs=attrs,
                         params={"x": 0.1}, distributions={"x": FloatDistribution(0, 1)})
    trial.number = number
    return trial


def test_retry_chains_link_attempts_and_leave_out_retries_that_never_ran():
    trials = [
        _trial(0, retried=True),
        _trial(1, TrialState.PRUNED, retry_of=0, infeasible=True),  # lost the race for the budget, queued again
        _trial(2, TrialState.COMPLETE),
        _trial(3, retry_of=0, attempt=2, resume_from="/t/0", resumed_at_iteration={"1": 4, "2": 6}),
        _trial(4, TrialState.WAITING, retry_of=3, attempt=3, resume_from="/t/3"),
        _trial(5, TrialState.COMPLETE, retry_of=99),  # names a trial that is not there: no chain
    ]
    chains = retry_chains(reversed(trials))  # any order
    assert chains.successor == {0: 3, 3: 4}
    assert chains.runs == {0: [0, 3, 4]} and chains.root == {0: 0, 3: 0, 4: 0}
    assert chains.head(0) == 4 and chains.is_superseded(3) and not chains.is_superseded(4)
    assert [t.number for t in logical_trials(trials, chains)] == [2, 4, 5]
    by_number = {t.number: t for t in trials}
    assert chain_text(0, chains, by_number) == "run 1 of trial #0, superseded by #3"
    assert chain_text(4, chains, by_number) == "run 3 of trial #0, resumes #3 from its checkpoint"
    assert chain_text(2, chains, by_number) == ""
    before = retry_chains(trials[:4])  # #3 as the last run: its seeds resumed at different checkpoints
    assert chain_text(3, before, by_number) == "run 2 of trial #0, resumed at iterations 4 to 6 (per seed) of #0"
    no_checkpoint = _trial(6, TrialState.COMPLETE, retry_of=0, resume_from="/t/0")
    assert retry_chains([trials[0], no_checkpoint]).runs == {0: [0, 6]}
    assert chain_text(6, retry_chains([trials[0], no_checkpoint]), {6: no_checkpoint}).endswith(
        "started over (no checkpoint to resume from)")


def test_the_trials_frame_names_each_attempts_logical_trial_and_the_retry_holds_the_whole_curve(chain_study):
    frames = collect(chain_study)
    trials = frames.trials.set_index("number")
    assert trials.loc[CHAIN, "logical_trial"].tolist() == [6, 6, 6]
    assert trials.loc[[0, 3, 5], "logical_trial"].tolist() == [0, 3, 5]
    assert trials.loc[CHAIN, "superseded_by"].tolist()[:2] == [7, 8] and trials["superseded_by"].notna().sum() == 2
    assert trials.loc[7, "resumed_from"] == 6 and trials.loc[7, "resumed_at_iteration"] == 2
    assert trials.loc[8, "resumed_from"] == 7 and trials.loc[8, "resumed_at_iteration"] == 4
    # One curve: the last run has every iteration once, the attempts' values up to where it resumed.
    acc = frames.metrics[frames.metrics.metric == "acc_rewards/mean"].pivot_table(
        index="iteration", columns="trial", values="value")
    assert acc[8].dropna().index.tolist() == list(range(1, ITERATIONS + 1))
    assert acc.loc[1:2, 8].tolist() == acc.loc[1:2, 6].tolist() and acc.loc[3:4, 8].tolist() == acc.loc[3:4, 7].tolist()


def test_a_retry_whose_file_lacks_the_adopted_lines_gets_them_from_the_attempt_it_resumed(tmp_path):
    study = make_study(tmp_path, chain=True, limit=1)  # trial 0, then the chain 1 -> 2 -> 3
    last = tmp_path / "studies" / "report_study" / "trials" / "3" / "metrics.jsonl"
    lines = [json.loads(x) for x in last.read_text().splitlines()]
    last.write_text("".join(json.dumps(x) + "\n" for x in lines if x["iteration"] > 4))  # its own lines only
    metrics = collect(study).metrics
    acc = metrics[metrics.metric == "acc_rewards/mean"].pivot_table(index="iteration", columns="trial", values="value")
    assert acc[3].dropna().index.tolist() == list(range(1, ITERATIONS + 1))
    assert acc.loc[1:4, 3].tolist() == acc.loc[1:4, 2].tolist()  # #2's lines up to 4 (its own adopted #1's to 2)
    evals = metrics[(metrics.trial == 3) & (metrics.metric == "eval/acc_greedy")]
    assert evals["iteration"].tolist() == [0, 2, 4, 6] and not metrics.duplicated(["trial", "seed", "iteration",
                                                                                   "metric"]).any()


def test_the_page_counts_logical_trials_and_lists_a_chain_together(chain_study, tmp_path):
    page = write_report(chain_study, tmp_path / "r").read_text()
    header = re.search(r"<dt>Trials</dt><dd>(.*?)</dd>", page).group(1)
    text = re.sub("<[^>]+>", "", header)
    assert text.startswith("7 (5 complete, 1 pruned, 1 fail) in 9 Optuna trials: 2 failed attempts continued")
    table = re.search(r'<table class="sortable trials">.*?</table>', page, re.S).group(0)
    rows = [[re.sub("<[^>]+>", "", c) for c in re.findall(r"<td>(.*?)</td>", r)] for r in re.findall(r"<tr>.*?</tr>",
                                                                                                      table)[1:]]
    assert [r[0] for r in rows] == ["0", "1", "2", "3", "4", "5", "8", "7", "6"]  # the last run, then the earlier
    chain = {r[0]: r[1] for r in rows}
    assert chain["8"] == "run 3 of trial #6, resumed at iteration 4 of #7"
    assert chain["7"] == "run 2 of trial #6, superseded by #8" and chain["6"] == "run 1 of trial #6, superseded by #7"
    assert chain["3"] == ""  # a failure nobody retried is a trial of its own
    assert "7 logical trials in 9 Optuna trials" in page
    detail = re.search(r'<section class="trial" id="trial-7">.*?</section>', page, re.S).group(0)
    assert "resumed at iteration 2 of #6" in detail and '<a href="#trial-8">#8</a> (complete)' in detail
    # A study without retries reads as before: no chain column, no count of Optuna trials.
    plain = write_report(make_study(tmp_path / "plain", limit=2), tmp_path / "r2").read_text()
    assert "retry chain" not in plain and "Optuna trials" not in plain


def test_status_shows_which_attempt_a_retry_superseded(chain_study):
    rows = {r["number"]: r for r in _status_rows(chain_study)}
    assert rows[6]["superseded_by"] == 7 and rows[7]["superseded_by"] == 8 and rows[8]["superseded_by"] is None
    assert {rows[n]["logical_trial"] for n in CHAIN} == {6}
    assert rows[8]["chain"] == "run 3 of trial #6, resumed at iteration 4 of #7" and rows[3]["chain"] is None
    assert _chains_note(list(rows.values())).startswith("7 logical trials")
    assert _chains_note([r for n, r in rows.items() if n not in CHAIN]) is None
