"""Start points (spec ``start_points``): known-good settings tried before any proposal, through the real driver,
Ray and Optuna journal storage on the cheap curve backend. Mirrors Optuna's ``study.enqueue_trial``
semantics (optuna/study/study.py: enqueued WAITING trials are asked first; ``skip_if_exists`` compares with
every trial's params by type and value), which the rerun test relies on: a resumed study enqueues no point twice."""

from __future__ import annotations

import pytest
from sweep_helpers import load, module_ray, states, write_spec

from grpo.errors import UserError
from grpo.sweep.run.driver import run_study
from grpo.sweep.spec.load import load_spec
from grpo.trial_attrs import START_POINT


@pytest.fixture(scope="module", autouse=True)
def local_ray():
    with module_ray():
        yield


SEARCH = {"rl_config.clip_ratio": "interval(0.05, 0.3)", "rl_config.n_samples_per_prompt": "choice(4, 8)"}


def _spec(tmp_path, monkeypatch, **fields):
    monkeypatch.chdir(tmp_path)
    return load_spec(str(write_spec(tmp_path, search=SEARCH, **fields)))


def test_start_points_run_first_and_a_rerun_enqueues_none_twice(tmp_path, monkeypatch):
    points = [{"rl_config.clip_ratio": 0.2, "rl_config.n_samples_per_prompt": 8}, {"rl_config.clip_ratio": 0.1}]
    spec = _spec(tmp_path, monkeypatch, trials=3, concurrency=1, start_points=points)
    run_study(spec)
    study = load(tmp_path)
    assert states(study) == {"COMPLETE": 3}
    first, second, third = sorted(study.trials, key=lambda t: t.number)
    assert first.params == {"rl_config.clip_ratio": 0.2, "rl_config.n_samples_per_prompt": 8}
    assert first.user_attrs[START_POINT] == 0
    assert second.params["rl_config.clip_ratio"] == 0.1 and second.user_attrs[START_POINT] == 1  # the rest sampled
    assert START_POINT not in third.user_attrs  # the sampler's own proposal
    more = _spec(tmp_path, monkeypatch, trials=4, concurrency=1, start_points=points)
    run_study(more)  # raising the budget resumes the study: the points ran already
    again = load(tmp_path)
    assert states(again) == {"COMPLETE": 4}
    assert sum(START_POINT in t.user_attrs for t in again.trials) == 2


@pytest.mark.parametrize(
    ("points", "said"),
    [
        ([{"rl_config.clip_ratio": 0.5}], "start_points[0].rl_config.clip_ratio: 0.5 is outside the searched range"),
        ([{"rl_config.n_samples_per_prompt": 6}], "start_points[0].rl_config.n_samples_per_prompt: 6 is not one of"),
        ([{"rl_config.clip_rat": 0.2}], "start_points[0].rl_config.clip_rat: not a searched key; did you mean"),
        ([{}], "start_points[0]: names no searched key"),
        ([{"rl_config.clip_ratio": 0.2}] * 4, "start_points: 4 points but trials: 3"),
    ],
)
def test_a_point_outside_the_space_is_one_line_naming_it(tmp_path, monkeypatch, points, said):
    with pytest.raises(UserError) as err:
        _spec(tmp_path, monkeypatch, trials=3, start_points=points)
    assert said in str(err.value) and str(err.value).startswith(str(tmp_path / "s.yaml"))
    assert not (tmp_path / "studies").exists()  # nothing written
