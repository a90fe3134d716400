"""The report's decision when every trial ties (no winner is crowned) and its header's pruner line (only the
rules a spec set, not every rule with null)."""

from __future__ import annotations

import re

import optuna
from optuna.distributions import FloatDistribution

from grpo.report import collect, stats
from grpo.report.decision import study_decision
from grpo.report.page_summary import _component_line
from grpo.report.page_summary import decision as decision_html
from grpo.sweep.spec.models import SweepSpec


def _study(values: list[float]) -> optuna.Study:
    study = optuna.create_study(study_name="t", storage=optuna.storages.InMemoryStorage(), direction="maximize")
    for number, value in enumerate(values):
        study.add_trial(optuna.create_trial(
            value=value, params={"x": 0.1 * (number + 1)}, distributions={"x": FloatDistribution(0, 1)},
            user_attrs={"seeds": [1], "values_per_seed": [[value]]}))  # fmt: skip
    return study


def _decision(study: optuna.Study) -> tuple[stats.Verdict, str]:
    frames = collect(study)
    decision = study_decision(study, frames)
    return decision.verdict, decision_html(study, frames, decision, config_link=False)


def test_trials_that_all_tie_crown_no_winner():
    verdict, body = _decision(_study([-1.0, -1.0, -1.0, -1.0]))  # a reward that never paid: every trial at -1
    assert verdict.tie == 4
    assert verdict.text().startswith("no winner: the trials tie (4 trials at -1")
    assert '<p class="winner big tie">No winner: the trials tie. All 4 trials ranked reach' in body
    assert "Winner:" not in body and "Runner-up" not in body


def test_a_shared_best_that_not_every_trial_reaches_is_no_tie():
    verdict, body = _decision(_study([-1.0, -1.0, -2.0]))
    assert verdict.tie == 0 and "Winner:" in body and "No winner" not in body
    verdict, _ = _decision(_study([0.5]))  # one trial: nothing to tie with
    assert verdict.tie == 0


def test_the_pruner_line_shows_only_the_rules_that_are_set():
    spec = SweepSpec.model_validate({
        "study": "s", "base": "grpo_trainer_tiny_cpu", "objective": "grpo/score/mean",
        "pruner": {"name": "median", "warmup_steps": 2, "collapse": {"below_base": 0.1, "kl_max": 5.0}},
    })  # fmt: skip
    stored = spec.to_dict()["pruner"]  # what the study records: every rule, the unset ones null
    assert stored["collapse"]["kl_spike"] is None
    line = _component_line(stored)
    assert line == "median (warmup_steps=2, collapse=(metric=eval/acc_greedy, below_base=0.1, kl_max=5))"
    assert not re.search(r"null|None|kl_spike|options", line)
    assert _component_line({"name": "none", "options": {}, "collapse": None}) == "none"
