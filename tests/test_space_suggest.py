"""Sampling the space with real (in-memory) Optuna studies: conditionals, grids, samplers and pruners."""

from __future__ import annotations

import textwrap

import optuna
import pytest

from grpo.sweep.spec.load import load_spec
from grpo.sweep.spec.samplers import make_pruner, make_sampler
from grpo.sweep.spec.space import SearchSpace

optuna.logging.set_verbosity(optuna.logging.WARNING)

CONDITIONAL = {
    "rl_config.kl_ctrl_type": "choice(fixed, adaptive)",
    "rl_config.kl_target": {"values": "tag(log, interval(0.01, 1.0))", "when": {"rl_config.kl_ctrl_type": "adaptive"}},
    "rl_config.init_kl_coef": "choice(0.001, 0.01)",
}


def _spec(tmp_path, body: str, name: str = "s.yaml"):
    path = tmp_path / name
    path.write_text("base: grpo_trainer_tiny_cpu\nobjective: grpo/score/mean\n" + textwrap.dedent(body))
    return load_spec(path)


def test_conditional_parameter_only_when_its_condition_holds():
    space = SearchSpace.from_entries(CONDITIONAL)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    seen = set()
    for _ in range(30):
        trial = study.ask()
        params = space.suggest(trial)
        kind = params["rl_config.kl_ctrl_type"]
        seen.add(kind)
        assert ("rl_config.kl_target" in params) == (kind == "adaptive")
        assert set(trial.params) == set(params)
        if kind == "adaptive":
            assert 0.01 <= params["rl_config.kl_target"] <= 1.0
        study.tell(trial, params["rl_config.init_kl_coef"])
    assert seen == {"fixed", "adaptive"}


def test_conditional_order_puts_parents_first():
    reversed_entries = dict(reversed(list(CONDITIONAL.items())))
    space = SearchSpace.from_entries(reversed_entries)
    assert space.keys.index("rl_config.kl_ctrl_type") < space.keys.index("rl_config.kl_target")


def test_conditional_with_a_list_of_accepted_values():
    space = SearchSpace.from_entries(
        {"rl_config.n_samples_per_prompt": "range(4, 16, 4)",
         "generate_config.sampling_config.top_p": {"values": "choice(0.9, 1.0)",
                                                    "when": {"rl_config.n_samples_per_prompt": [12, 16]}}}
    )
    points = space.grid_points()
    assert len(points) == 2 + 2 * 2  # 4 and 8 alone; 12 and 16 with both top_p values
    assert {"rl_config.n_samples_per_prompt": 4} in points
    assert {"rl_config.n_samples_per_prompt": 16, "generate_config.sampling_config.top_p": 0.9} in points


def test_tpe_with_conditionals_and_constant_liar(tmp_path):
    spec = _spec(tmp_path, """\
        concurrency: 3
        sampler: {name: tpe, seed: 1, options: {n_startup_trials: 4}}
        search:
          rl_config.kl_ctrl_type: choice(fixed, adaptive)
          rl_config.kl_target: {values: 'tag(log, interval(0.01, 1.0))', when: {rl_config.kl_ctrl_type: adaptive}}
          rl_config.init_kl_coef: tag(log, interval(1e-4, 1e-1))
        """)
    space = SearchSpace.from_spec(spec)
    sampler = make_sampler(spec, space)
    assert isinstance(sampler, optuna.samplers.TPESampler)
    assert sampler._multivariate and sampler._constant_liar and sampler._group
    study = optuna.create_study(sampler=sampler, direction="maximize")
    for _ in range(12):
        trial = study.ask()
        p = space.suggest(trial)
        assert ("rl_config.kl_target" in p) == (p["rl_config.kl_ctrl_type"] == "adaptive")
        study.tell(trial, -abs(p["rl_config.init_kl_coef"] - 0.01))
    assert len(study.trials) == 12


def test_tpe_without_concurrency_has_no_constant_liar(tmp_path):
    spec = _spec(tmp_path, "search:\n  rl_config.clip_ratio: interval(0.1, 0.3)\n")
    sampler = make_sampler(spec, SearchSpace.from_spec(spec))
    assert not sampler._constant_liar and not sampler._group


def test_grid_sampler_visits_every_point_once(tmp_path):
    spec = _spec(tmp_path, """\
        sampler: grid
        trials: 6
        search:
          rl_config.kl_penalty: choice(kl, mse, low_var_kl)
          rl_config.epochs: range(1, 2)
        """)
    space = SearchSpace.from_spec(spec)
    assert len(space.grid_points()) == 6 and spec.warnings == []
    study = optuna.create_study(sampler=make_sampler(spec, space))
    seen = []
    for _ in range(6):
        trial = study.ask()
        seen.append(tuple(sorted(space.suggest(trial).items())))
        study.tell(trial, 0.0)
    assert sorted(seen) == sorted(tuple(sorted(p.items())) for p in space.grid_points())


def test_grid_points_none_when_continuous():
    assert SearchSpace.from_entries({"rl_config.clip_ratio": "interval(0.1, 0.3)"}).grid_points() is None
    assert SearchSpace.from_entries({}).grid_points() == [{}]


def test_grid_with_more_trials_than_points_warns(tmp_path):
    spec = _spec(tmp_path, "sampler: grid\ntrials: 10\nsearch:\n  rl_config.epochs: range(1, 3)\n")
    assert spec.warnings == [f"{spec.path}: trials: 10 asked but the grid has 3 points; the study stops after 3"]
    assert spec.trials == 3


@pytest.mark.parametrize("name, cls", [("random", optuna.samplers.RandomSampler), ("cmaes", optuna.samplers.CmaEsSampler),
                                       ("nsga2", optuna.samplers.NSGAIISampler), ("gp", optuna.samplers.GPSampler)])
def test_other_samplers_sample_the_space(tmp_path, name, cls):
    spec = _spec(tmp_path, f"sampler: {{name: {name}, seed: 3}}\nsearch:\n  rl_config.clip_ratio: interval(0.1, 0.3)\n"
                 "  rl_config.epochs: range(1, 3)\n")
    space = SearchSpace.from_spec(spec)
    sampler = make_sampler(spec, space)
    assert isinstance(sampler, cls)
    study = optuna.create_study(sampler=sampler)
    for _ in range(3):
        trial = study.ask()
        p = space.suggest(trial)
        assert 0.1 <= p["rl_config.clip_ratio"] <= 0.3 and p["rl_config.epochs"] in (1, 2, 3)
        study.tell(trial, p["rl_config.clip_ratio"])


def test_pruners(tmp_path):
    spec = _spec(tmp_path, "pruner: {name: median, warmup_steps: 3, options: {n_startup_trials: 2}}\n")
    pruner = make_pruner(spec)
    assert isinstance(pruner, optuna.pruners.MedianPruner)
    assert pruner._n_warmup_steps == 3 and pruner._n_startup_trials == 2
    spec = _spec(tmp_path, "pruner: {name: successive_halving, warmup_steps: 4}\n")
    assert make_pruner(spec)._min_resource == 4
    spec = _spec(tmp_path, "pruner: none\n")
    assert isinstance(make_pruner(spec), optuna.pruners.NopPruner)


def test_hyperband_max_resource_is_the_base_train_iters(tmp_path):
    spec = _spec(tmp_path, "pruner: {name: hyperband, warmup_steps: 2}\noverrides: [megatron_training.train_iters=17]\n")
    pruner = make_pruner(spec)
    assert isinstance(pruner, optuna.pruners.HyperbandPruner)
    assert pruner._max_resource == 17 and pruner._min_resource == 2
    assert make_pruner(spec, max_resource=9)._max_resource == 9


def test_median_pruner_prunes_a_worse_curve(tmp_path):
    spec = _spec(tmp_path, "pruner: {name: median, warmup_steps: 1, options: {n_startup_trials: 1}}\n")
    study = optuna.create_study(direction="maximize", pruner=make_pruner(spec))
    good = study.ask()
    for step in range(5):
        good.report(0.5 + 0.1 * step, step)
    study.tell(good, 0.9)
    bad = study.ask()
    bad.report(0.0, 0)
    assert not bad.should_prune()  # inside the warmup
    bad.report(0.0, 1)
    assert bad.should_prune()


def test_multi_objective_has_no_pruning(tmp_path):
    path = tmp_path / "m.yaml"
    path.write_text("base: grpo_trainer_tiny_cpu\nobjective: [grpo/score/mean, e2e_tps]\npruner: median\n")
    spec = load_spec(path)
    assert spec.multi_objective and spec.directions == ["maximize", "maximize"]
    assert isinstance(make_pruner(spec), optuna.pruners.NopPruner)
    assert spec.warnings == [
        f"{path}: pruner.name: median is ignored: Optuna cannot prune multi-objective studies "
        "(Trial.report/should_prune are single-objective), so every trial runs to its end"
    ]
