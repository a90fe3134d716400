"""`grpo-sweep status`: pbt lineage in --json and the table, and a table readable on 80 columns."""

import io
from types import SimpleNamespace

import optuna
from optuna.distributions import FloatDistribution
from optuna.trial import TrialState, create_trial
from rich.console import Console

from grpo.sweep.commands import handlers

REASON = "pruned at iteration 12: " + "the median of the completed trials was not reached " * 6


def _study():
    study = optuna.create_study(direction="maximize")
    study.set_user_attr("pbt", {"population": 2, "interval": 10, "train_iters": 20})
    dist = {"actor_config.lr": FloatDistribution(1e-7, 1e-4, log=True)}
    specs = [  # member, generation, branch_of, exploited, state
        (0, 0, None, False, TrialState.COMPLETE),
        (1, 0, None, False, TrialState.COMPLETE),
        (0, 1, 0, False, TrialState.COMPLETE),
        (1, 1, 0, True, TrialState.PRUNED),
    ]
    for member, gen, parent, exploited, state in specs:
        attrs = {"pbt_member": member, "pbt_generation": gen, "exploited": exploited, "seeds": [0, 1]}
        if parent is not None:
            attrs |= {"branch_of": parent, "branched_at": gen * 10}
        if state == TrialState.PRUNED:
            attrs["pruned_reason"] = REASON
        study.add_trial(create_trial(state=state, value=0.5 if state == TrialState.COMPLETE else None,
                                     params={"actor_config.lr": 1e-5}, distributions=dist, user_attrs=attrs,
                                     intermediate_values={12: 0.1}))
    return study


def test_status_rows_carry_the_pbt_lineage():
    rows = handlers._status_rows(_study())
    got = [r["lineage"] for r in rows]
    assert got[0] == {"member": 0, "generation": 0, "branch_of": None, "branched_at": None, "exploited": False}
    assert got[3] == {"member": 1, "generation": 1, "branch_of": 0, "branched_at": 10, "exploited": True}
    assert rows[3]["reason"] == REASON  # the full reason stays in --json


def test_status_rows_of_a_plain_study_have_no_lineage():
    study = optuna.create_study()
    study.add_trial(create_trial(state=TrialState.COMPLETE, value=1.0))
    assert handlers._status_rows(study)[0]["lineage"] is None


def test_the_status_table_fits_80_columns_and_shows_the_lineage():
    study = _study()
    spec = SimpleNamespace(study="pbt-demo", tool_storage=lambda: "sqlite:///x.db")
    out = io.StringIO()
    Console(file=out, width=80).print(handlers.status_table(spec, study, handlers._status_rows(study)))
    text = out.getvalue()
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= 80
    for header in ("state", "params", "reason", "from"):
        assert header in text  # no header cut to "para…"
    assert "COMPLETE" in text and "PRUNED" in text
    assert "m1 g1" in text and "<#0@10*" in text
    pruned = [line for line in lines if "PRUNED" in line]
    assert len(lines) <= 2 * len(rows_of(study)) + 4, text  # a long reason no longer wraps over many lines
    assert pruned and "pruned at iteration" in pruned[0]


def rows_of(study):
    return study.get_trials(deepcopy=False)
