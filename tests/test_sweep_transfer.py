"""Transfer (spec ``transfer``): another study's best configurations tried first, through the real driver, Ray
and Optuna journal storage on the cheap curve backend. The source study is a real Optuna journal study, as
grpo-sweep writes one (``studies/<name>/journal.log``), filled with ``optuna.trial.create_trial`` trials; the
enqueue mirrors Optuna's ``study.enqueue_trial(skip_if_exists=True)`` (optuna/study/study.py: WAITING trials are
asked first; an existing trial with the same params is not enqueued again), which the rerun check relies on."""

from __future__ import annotations

import optuna
import pytest
from optuna.distributions import CategoricalDistribution, FloatDistribution
from optuna.trial import TrialState, create_trial
from sweep_helpers import load, module_ray, run_cli, states, write_spec

from grpo.cli import sweep_main
from grpo.errors import UserError
from grpo.report.html import write_report
from grpo.sweep.run.driver import run_study
from grpo.sweep.spec.load import load_spec
from grpo.sweep.spec.space import SearchSpace
from grpo.sweep.study.transfer import transfer_points
from grpo.trial_attrs import REPEAT_OF, TRANSFERRED_FROM

SEARCH = {"rl_config.clip_ratio": "interval(0.05, 0.3)", "rl_config.n_samples_per_prompt": "choice(4, 8)"}
CLIP = FloatDistribution(0.01, 0.5)
N = CategoricalDistribution([4, 8, 16])


@pytest.fixture(scope="module", autouse=True)
def local_ray():
    with module_ray():
        yield


def _source(tmp_path, trials, name="proxy", directions=("maximize",)):
    """A journal study where grpo-sweep keeps one: ``trials`` are (params, value, state, user_attrs)."""
    (tmp_path / "studies" / name).mkdir(parents=True, exist_ok=True)
    backend = optuna.storages.journal.JournalFileBackend(str(tmp_path / "studies" / name / "journal.log"))
    study = optuna.create_study(
        study_name=name, storage=optuna.storages.JournalStorage(backend), directions=list(directions)
    )
    for params, value, state, attrs in trials:
        dists = {"rl_config.clip_ratio": CLIP, "rl_config.n_samples_per_prompt": N, "actor_config.lr": CLIP}
        study.add_trial(
            create_trial(
                params=params,
                distributions={k: dists[k] for k in params},
                value=value if state == TrialState.COMPLETE else None,
                state=state,
                user_attrs=attrs,
            )
        )
    return study


def _done(params, value, **attrs):
    return params, value, TrialState.COMPLETE, attrs


def _spec(tmp_path, monkeypatch, **fields):
    monkeypatch.chdir(tmp_path)
    return load_spec(str(write_spec(tmp_path, search=SEARCH, **fields)))


SOURCE = [
    _done({"rl_config.clip_ratio": 0.1, "rl_config.n_samples_per_prompt": 8}, 0.60),
    _done({"rl_config.clip_ratio": 0.2, "rl_config.n_samples_per_prompt": 4, "actor_config.lr": 0.3}, 0.90),
    _done({"rl_config.clip_ratio": 0.45, "rl_config.n_samples_per_prompt": 8}, 0.95),  # outside 0.05..0.3
    _done({"rl_config.clip_ratio": 0.2, "rl_config.n_samples_per_prompt": 4}, 0.91, confirmation_of=1),  # same config
    _done({"rl_config.clip_ratio": 0.25, "rl_config.n_samples_per_prompt": 16}, 0.99),  # 16 is not a choice here
    _done({"rl_config.clip_ratio": 0.15, "rl_config.n_samples_per_prompt": 8}, 0.99, **{REPEAT_OF: 0}),  # never ran
    ({"rl_config.clip_ratio": 0.3, "rl_config.n_samples_per_prompt": 8}, None, TrialState.PRUNED, {}),
    _done({"rl_config.clip_ratio": 0.05, "rl_config.n_samples_per_prompt": 4}, 0.70),
]


def test_the_best_distinct_configurations_in_the_space_are_chosen(tmp_path, monkeypatch):
    _source(tmp_path, SOURCE)
    spec = _spec(tmp_path, monkeypatch, transfer={"study": "proxy", "top_k": 3})
    points = transfer_points(spec, SearchSpace.from_spec(spec))
    # By value, best first; a key this study does not search (lr) dropped; the confirmation of trial 1 is the
    # same configuration; values outside the space, repeats and pruned trials skipped.
    assert [(p.source_trial, p.params) for p in points] == [
        (3, {"rl_config.clip_ratio": 0.2, "rl_config.n_samples_per_prompt": 4}),
        (7, {"rl_config.clip_ratio": 0.05, "rl_config.n_samples_per_prompt": 4}),
        (0, {"rl_config.clip_ratio": 0.1, "rl_config.n_samples_per_prompt": 8}),
    ]
    assert isinstance(points[0].params["rl_config.n_samples_per_prompt"], int)


def test_minimize_ranks_the_smallest_first(tmp_path, monkeypatch):
    trials = [_done({"rl_config.clip_ratio": c}, v) for c, v in [(0.1, 3.0), (0.2, 1.0), (0.3, 2.0)]]
    _source(tmp_path, trials, name="low", directions=("minimize",))
    spec = _spec(tmp_path, monkeypatch, transfer={"study": "low", "top_k": 2})
    assert [p.source_trial for p in transfer_points(spec, SearchSpace.from_spec(spec))] == [1, 2]


def test_transferred_configurations_run_first_and_a_rerun_enqueues_none_twice(tmp_path, monkeypatch):
    _source(tmp_path, SOURCE)
    spec = _spec(tmp_path, monkeypatch, trials=3, concurrency=1, transfer={"study": "proxy", "top_k": 2})
    run_study(spec)
    study = load(tmp_path)
    assert states(study) == {"COMPLETE": 3}
    first, second, third = sorted(study.trials, key=lambda t: t.number)
    assert first.params == {"rl_config.clip_ratio": 0.2, "rl_config.n_samples_per_prompt": 4}
    assert first.user_attrs[TRANSFERRED_FROM] == "proxy#3"
    assert second.user_attrs[TRANSFERRED_FROM] == "proxy#7"
    assert TRANSFERRED_FROM not in third.user_attrs  # the sampler's own proposal
    page = write_report(study, tmp_path / "report").read_text()  # each trial's facts say where it came from
    assert "<dt>transferred from</dt><dd>proxy#3</dd>" in page
    run_study(_spec(tmp_path, monkeypatch, trials=4, concurrency=1, transfer={"study": "proxy", "top_k": 2}))
    again = load(tmp_path)
    assert states(again) == {"COMPLETE": 4}
    assert sum(TRANSFERRED_FROM in t.user_attrs for t in again.trials) == 2


@pytest.mark.parametrize(
    ("fields", "source", "said"),
    [
        ({"transfer": {"study": "nope"}}, None, "transfer.study: nope: no such study in journal:studies/nope/"),
        ({"transfer": {"study": "proxy"}}, [], "transfer.study: proxy: has no complete trial to transfer"),
        (
            {"transfer": {"study": "proxy"}},
            [_done({"rl_config.clip_ratio": 0.45}, 1.0)],
            "none of its 1 complete trials lies in this search space (trial 0: rl_config.clip_ratio 0.45 is outside",
        ),
        ({"transfer": {"study": "s"}}, None, "transfer.study: s is this study; name another study to transfer from"),
        ({"transfer": {"study": "proxy", "top_k": 3}, "trials": 2}, None, "top_k 3 is more than trials: 2"),
        ({"transfer": {"study": "proxy", "top_k": 0}}, None, "transfer.top_k"),
        ({"transfer": {"study": "proxy", "topk": 2}}, None, "transfer.topk"),
    ],
)
def test_an_unusable_transfer_is_one_line_naming_it_and_writes_nothing(
    tmp_path, monkeypatch, capsys, fields, source, said
):
    if source is not None:
        _source(tmp_path, source)
    spec_path = write_spec(tmp_path, search=SEARCH, **fields)
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    monkeypatch.chdir(tmp_path)
    code = sweep_main(["validate", str(spec_path)])  # the console script's own function, in this process
    stderr = capsys.readouterr().err
    assert code == 2, stderr
    assert stderr.startswith(f"error: {spec_path}") and said in stderr.splitlines()[0], stderr
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before  # validate writes nothing


def test_a_multi_objective_source_is_refused(tmp_path, monkeypatch):
    _source(tmp_path, [], directions=("maximize", "minimize"))
    spec = _spec(tmp_path, monkeypatch, transfer={"study": "proxy"})
    with pytest.raises(UserError, match="has 2 objectives; transfer reads single-objective studies"):
        transfer_points(spec, SearchSpace.from_spec(spec))


def test_validate_lists_what_would_be_transferred(tmp_path, monkeypatch):
    _source(tmp_path, SOURCE)
    spec_path = write_spec(tmp_path, search=SEARCH, transfer={"study": "proxy", "top_k": 1})
    monkeypatch.chdir(tmp_path)
    run = run_cli(["validate", str(spec_path)], tmp_path)
    assert run.returncode == 0, run.stderr
    shown = " ".join(run.stdout.split())  # rich wraps at the terminal's width
    assert "transfer: study proxy's best 1, tried first:" in shown
    assert "trial 3 (0.91): {'rl_config.clip_ratio': 0.2, 'rl_config.n_samples_per_prompt': 4}" in shown
