"""Every way a sweep spec can be wrong gives a one-line UserError naming the file and the key path."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from grpo.errors import UserError
from grpo.sweep.spec.load import load_spec

GOOD = """\
study: s1
base: grpo_trainer_tiny_cpu
search:
  rl_config.clip_ratio: interval(0.1, 0.3)
objective: grpo/score/mean
"""


def write(tmp_path: Path, text: str, name: str = "spec.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def problems(path: Path, **kwargs) -> list[str]:
    with pytest.raises(UserError) as info:
        load_spec(path, **kwargs)
    err = info.value
    assert str(err) == err.problems[0]
    for line in err.problems:
        assert "\n" not in line and line.startswith(str(path))
    return err.problems


def test_good_spec_loads(tmp_path):
    spec = load_spec(write(tmp_path, GOOD))
    assert spec.study == "s1" and spec.objectives[0].reduce == "last"


def test_unknown_top_level_key_did_you_mean(tmp_path):
    path = write(tmp_path, GOOD + "concurency: 2\n")
    assert problems(path) == [f"{path}: concurency: unknown key; did you mean concurrency?"]


def test_unknown_nested_key_did_you_mean(tmp_path):
    path = write(tmp_path, GOOD + "pruner:\n  name: median\n  warmup: 3\n")
    assert problems(path) == [f"{path}: pruner.warmup: unknown key; did you mean pruner.warmup_steps?"]


def test_unknown_key_in_objective_mapping(tmp_path):
    path = write(tmp_path, GOOD.replace("objective: grpo/score/mean", "objective:\n  metric: m\n  direction: maximize\n  reduse: auc"))
    assert problems(path) == [f"{path}: objective.reduse: unknown key; did you mean objective.reduce?"]


def test_unknown_key_in_objective_list(tmp_path):
    path = write(tmp_path, GOOD.replace("objective: grpo/score/mean", "objective:\n  - metric: a\n  - metrc: b"))
    assert f"{path}: objective[1].metrc: unknown key; did you mean objective[1].metric?" in problems(path)


@pytest.mark.parametrize("name", ["kl study", "kl/study", "kl.study", "ü"])
def test_bad_study_name(tmp_path, name):
    path = write(tmp_path, GOOD.replace("study: s1", f"study: '{name}'"))
    (line,) = problems(path)
    assert line.startswith(f"{path}: study: must use letters, digits, - and _ only")


def test_study_name_defaults_to_file_stem(tmp_path):
    spec = load_spec(write(tmp_path, GOOD.replace("study: s1\n", ""), name="my-study.yaml"))
    assert spec.study == "my-study"


def test_bad_sampler_name(tmp_path):
    path = write(tmp_path, GOOD + "sampler:\n  name: tpee\n")
    assert problems(path) == [f"{path}: sampler.name: must be one of tpe, random, grid, cmaes, nsga2, gp (got tpee)"]


def test_bad_sampler_name_shorthand(tmp_path):
    path = write(tmp_path, GOOD + "sampler: bayes\n")
    assert problems(path) == [f"{path}: sampler.name: must be one of tpe, random, grid, cmaes, nsga2, gp (got bayes)"]


def test_bad_pruner_name(tmp_path):
    path = write(tmp_path, GOOD + "pruner: {name: asha}\n")
    assert problems(path) == [f"{path}: pruner.name: must be one of median, successive_halving, hyperband, none (got asha)"]


@pytest.mark.parametrize(
    "expr, fragment",
    [
        ("choice(4, 8", "search.rl_config.clip_ratio: "),
        ("0.3", "is a single value, not a sweep"),
        ("shuffle(choice(0.1, 0.2))", "shuffle() is not supported"),
        ("tag(lg, interval(0.1, 0.3))", "unknown tag lg"),
        ("interval(0.3, 0.1)", "interval start must be below its end"),
        ("tag(log, interval(0, 0.3))", "a log interval needs a start > 0"),
    ],
)
def test_bad_expression(tmp_path, expr, fragment):
    path = write(tmp_path, GOOD.replace("interval(0.1, 0.3)", f"'{expr}'"))
    (line,) = problems(path)
    assert line.startswith(f"{path}: search.rl_config.clip_ratio: ") and fragment in line


def test_search_value_that_is_not_a_string(tmp_path):
    path = write(tmp_path, GOOD.replace("interval(0.1, 0.3)", "0.3"))
    (line,) = problems(path)
    assert line.startswith(f"{path}: search.rl_config.clip_ratio: must be a Hydra sweep expression")


def test_unknown_config_key_in_search_did_you_mean(tmp_path):
    path = write(tmp_path, GOOD.replace("rl_config.clip_ratio:", "rl_config.clip_rato:"))
    assert problems(path) == [f"{path}: search.rl_config.clip_rato: unknown config key; did you mean rl_config.clip_ratio?"]


def test_unknown_layout_name(tmp_path):
    path = write(tmp_path, GOOD + "  layout: choice(tp2_pp2, tp3_pp2)\n".replace("  layout", "  layout", 1), name="x.yaml")
    text = GOOD.replace("search:\n", "search:\n  layout: choice(tp2_pp2, tp2_pp3)\n")
    path = write(tmp_path, text)
    (line,) = problems(path)
    assert line.startswith(f"{path}: search.layout: unknown layout tp2_pp3 (no configs/layout/tp2_pp3.yaml)")
    assert "did you mean tp2_pp2?" in line


def test_layout_must_be_a_choice(tmp_path):
    path = write(tmp_path, GOOD.replace("search:\n", "search:\n  layout: interval(1, 2)\n"))
    assert problems(path) == [f"{path}: search.layout: layouts are names: use choice(name, ...)"]


def test_grid_with_a_continuous_dimension(tmp_path):
    path = write(tmp_path, GOOD + "sampler: grid\n")
    (line,) = problems(path)
    assert line.startswith(f"{path}: sampler.name: grid needs discrete dimensions, but search.rl_config.clip_ratio is continuous")


def test_grid_with_conditional_parameters(tmp_path):
    text = """\
    base: grpo_trainer_tiny_cpu
    objective: m
    sampler: grid
    search:
      rl_config.kl_ctrl_type: choice(fixed, adaptive)
      rl_config.kl_target:
        values: choice(0.05, 0.1)
        when: {rl_config.kl_ctrl_type: adaptive}
    """
    path = write(tmp_path, text)
    (line,) = problems(path)
    assert line.startswith(f"{path}: sampler.name: grid cannot sample conditional parameters (search.rl_config.kl_target")


def test_yaml_syntax_error_names_the_line(tmp_path):
    path = write(tmp_path, "study: s1\nbase: grpo_trainer_tiny_cpu\nsearch:\n  a: [1, 2\nobjective: m\n")
    (line,) = problems(path)
    assert line.startswith(f"{path}:5: YAML syntax error:")


def test_yaml_syntax_error_bad_indentation(tmp_path):
    path = write(tmp_path, "study: s1\nbase: x\n  search: 1\n")
    (line,) = problems(path)
    assert line.startswith(f"{path}:3: YAML syntax error: mapping values are not allowed here")


def test_top_level_must_be_a_mapping(tmp_path):
    path = write(tmp_path, "- a\n- b\n")
    assert problems(path) == [f"{path}: (top level): must be a mapping of spec keys (study, base, search, ...)"]


def test_missing_base_name(tmp_path):
    path = write(tmp_path, GOOD.replace("grpo_trainer_tiny_cpu", "grpo_trainer_tiny_cp"))
    (line,) = problems(path)
    assert line.startswith(f"{path}: base: no config named grpo_trainer_tiny_cp in ")
    assert line.endswith("did you mean grpo_trainer_tiny_cpu?")


def test_missing_base_path(tmp_path):
    path = write(tmp_path, GOOD.replace("grpo_trainer_tiny_cpu", "../nowhere/base.yaml"))
    (line,) = problems(path)
    assert line.startswith(f"{path}: base: no such config file ../nowhere/base.yaml")


def test_missing_base_key(tmp_path):
    path = write(tmp_path, GOOD.replace("base: grpo_trainer_tiny_cpu\n", ""))
    assert problems(path) == [f"{path}: base: missing required key"]


def test_missing_objective(tmp_path):
    path = write(tmp_path, GOOD.replace("objective: grpo/score/mean\n", ""))
    assert problems(path) == [f"{path}: objective: missing required key"]


def test_missing_spec_file(tmp_path):
    path = tmp_path / "nope.yaml"
    assert problems(path) == [f"{path}: no such spec file"]


def test_spec_path_is_a_folder(tmp_path):
    assert problems(tmp_path) == [f"{tmp_path}: is a folder, not a spec file"]


@pytest.mark.parametrize(
    "extra, expected",
    [
        ("trials: 0", "trials: must be >= 1 (got 0)"),
        ("concurrency: two", "concurrency: must be an integer (got two)"),
        ("seeds: 0", "seeds: must be >= 1 (got 0)"),
        ("retries: -1", "retries: must be >= 0 (got -1)"),
        ("timeout_per_trial: 0", "timeout_per_trial: must be > 0 (got 0)"),
        ("backend: npu", "backend: must be embedded, mindspeed, trl, verl or package.module:ClassName (got npu)"),
        ("cluster: {address: 'http://x'}", "cluster.address: must be local, auto, host:port (what `ray start --head` prints) or ray://host:port (got 'http://x')"),
        ("storage: 'studies/x.db'", "storage: must be an Optuna storage URL"),
        ("tracking: {wandb: yes}", "tracking.wandb: must be one of off, offline, online (got True)"),
        ("plan: {device_memory_gb: 0}", "plan.device_memory_gb: must be > 0 (got 0)"),
        ("mindspeed: {stall_timout: 10}", "mindspeed.stall_timout: unknown key; did you mean mindspeed.stall_timeout?"),
        ("overrides: rl_config.clip_ratio=0.3", "overrides: must be a list of Hydra overrides"),
    ],
)
def test_bad_values(tmp_path, extra, expected):
    path = write(tmp_path, GOOD + extra + "\n")
    (line,) = problems(path)
    assert line.startswith(f"{path}: {expected}")


def test_objective_problems(tmp_path):
    path = write(tmp_path, GOOD.replace("objective: grpo/score/mean", "objective:\n  metric: m\n  reduce: last\n  k: 3"))
    assert problems(path) == [f"{path}: objective.k: only used with reduce: mean_last_k (reduce is last)"]
    path = write(tmp_path, GOOD.replace("objective: grpo/score/mean", "objective: [a, {metric: a, direction: minimize}]"))
    assert problems(path) == [f"{path}: objective: metric a is listed twice"]
    path = write(tmp_path, GOOD.replace("objective: grpo/score/mean", "objective: {metric: a, direction: up}"))
    assert problems(path) == [f"{path}: objective.direction: must be one of maximize, minimize (got up)"]


def test_overrides_problems(tmp_path):
    text = GOOD + "overrides:\n  - rl_config.clip_ratio=0.3\n  - rl_config.kl_coef=0.1\n  - 'rl_config.epochs=choice(1,2)'\n  - 'layout=tp9'\n  - '=3'\n"
    path = write(tmp_path, text)
    lines = problems(path)
    assert f"{path}: search.rl_config.clip_ratio: also fixed by overrides[0]; a key is either fixed or searched" in lines
    assert any(ln.startswith(f"{path}: overrides[1]: rl_config.kl_coef: unknown config key; did you mean") for ln in lines)
    assert f"{path}: overrides[2]: rl_config.epochs=choice(1,2) is a sweep; searched keys go under search" in lines
    assert any(ln.startswith(f"{path}: overrides[3]: unknown layout tp9") for ln in lines)
    assert any(ln.startswith(f"{path}: overrides[4]: ") for ln in lines)
    assert len(lines) == 5


def test_conditional_problems(tmp_path):
    text = """\
    base: grpo_trainer_tiny_cpu
    objective: m
    search:
      rl_config.kl_ctrl_type: choice(fixed, adaptive)
      rl_config.init_kl_coef: interval(0.001, 0.1)
      rl_config.kl_target:
        values: choice(0.05, 0.1)
        when: {rl_config.kl_ctrl_typ: adaptive}
      rl_config.kl_horizon:
        values: choice(100, 1000)
        when: {rl_config.kl_ctrl_type: adaptiv}
      rl_config.clip_ratio:
        values: choice(0.1, 0.2)
        when: {rl_config.init_kl_coef: 0.01}
    """
    path = write(tmp_path, text)
    lines = problems(path)
    assert lines == [
        f"{path}: search.rl_config.kl_target.when.rl_config.kl_ctrl_typ: conditions must name another searched key; "
        "did you mean rl_config.kl_ctrl_type?",
        f"{path}: search.rl_config.kl_horizon.when.rl_config.kl_ctrl_type: rl_config.kl_ctrl_type never takes adaptiv "
        "(it takes fixed, adaptive)",
        f"{path}: search.rl_config.clip_ratio.when.rl_config.init_kl_coef: rl_config.init_kl_coef is continuous; "
        "conditions need a choice or range",
    ]


def test_conditional_cycle(tmp_path):
    text = """\
    base: grpo_trainer_tiny_cpu
    objective: m
    search:
      rl_config.epochs:
        values: choice(1, 2)
        when: {rl_config.kl_ctrl_type: fixed}
      rl_config.kl_ctrl_type:
        values: choice(fixed, adaptive)
        when: {rl_config.epochs: 1}
    """
    path = write(tmp_path, text)
    (line,) = problems(path)
    assert line.startswith(f"{path}: search.rl_config.epochs.when: conditions form a cycle")


def test_sampler_and_pruner_options(tmp_path):
    path = write(tmp_path, GOOD + "sampler: {name: tpe, options: {n_startup_trial: 3}}\n")
    assert problems(path) == [
        f"{path}: sampler.options.n_startup_trial: unknown option of TPESampler; did you mean sampler.options.n_startup_trials?"
    ]
    path = write(tmp_path, GOOD + "sampler: {name: tpe, options: {seed: 3}}\n")
    assert problems(path) == [f"{path}: sampler.options.seed: set it with sampler.seed, not as an option"]
    path = write(tmp_path, GOOD + "pruner: {name: median, options: {n_warmup_steps: 3}}\n")
    assert problems(path) == [f"{path}: pruner.options.n_warmup_steps: set it with pruner.warmup_steps, not as an option"]
    path = write(tmp_path, GOOD + "pruner: {name: median, options: {n_startup_trials: -1}}\n")
    (line,) = problems(path)
    assert line.startswith(f"{path}: pruner.options: ")


def test_cmaes_refuses_multi_objective(tmp_path):
    path = write(tmp_path, GOOD.replace("objective: grpo/score/mean", "objective: [a, b]") + "sampler: cmaes\n")
    (line,) = problems(path)
    assert line.startswith(f"{path}: sampler.name: cmaes is single-objective only")


def test_cli_overrides_are_validated_like_the_spec(tmp_path):
    path = write(tmp_path, GOOD)
    assert problems(path, address="nowhere") == [
        f"{path}: cluster.address: must be local, auto, host:port (what `ray start --head` prints) or ray://host:port "
        "(got 'nowhere')"
    ]
    assert problems(path, concurrency=0) == [f"{path}: concurrency: must be >= 1 (got 0)"]


def test_every_problem_is_reported_at_once(tmp_path):
    text = GOOD.replace("rl_config.clip_ratio:", "rl_config.clip_rato:").replace(
        "grpo_trainer_tiny_cpu", "missing_base"
    ) + "overrides: [rl_config.epoch=2]\n"
    lines = problems(write(tmp_path, text))
    assert len(lines) == 3
    assert [ln.split(": ")[1] for ln in lines] == ["base", "overrides[0]", "search.rl_config.clip_rato"]


def test_schema_and_content_problems_are_reported_together(tmp_path):
    text = GOOD.replace("rl_config.clip_ratio:", "rl_config.clip_rato:") + "sampler: tpee\n"
    path = write(tmp_path, text)
    assert problems(path) == [
        f"{path}: sampler.name: must be one of tpe, random, grid, cmaes, nsga2, gp (got tpee)",
        f"{path}: search.rl_config.clip_rato: unknown config key; did you mean rl_config.clip_ratio?",
    ]


def test_unknown_metric_is_a_warning_with_did_you_mean(tmp_path):
    spec = load_spec(write(tmp_path, GOOD.replace("objective: grpo/score/mean", "objective: [grpo/score/maen, acc_rewards/mean]")))
    assert spec.warnings[-1] == (
        f"{spec.path}: objective: grpo/score/maen is not a metric the embedded engine logs; did you mean grpo/score/mean?"
    )
    assert not any("acc_rewards/mean" in w for w in spec.warnings)


def test_unknown_key_in_a_search_entry(tmp_path):
    path = write(tmp_path, GOOD.replace("interval(0.1, 0.3)", "{values: 'interval(0.1, 0.3)', whn: {a: 1}}"))
    assert problems(path) == [f"{path}: search.rl_config.clip_ratio.whn: unknown key; did you mean search.rl_config.clip_ratio.when?"]


def test_confirm_defaults_off_and_reads_its_keys(tmp_path):
    assert load_spec(write(tmp_path, GOOD)).confirm is None
    spec = load_spec(write(tmp_path, GOOD + "seeds: 2\nconfirm: {top_k: 2, seeds: 3}\n"))
    assert (spec.confirm.top_k, spec.confirm.seeds) == (2, 3)
    assert spec.confirmation_seed_offsets() == [2, 3, 4]  # fresh: after the search's own seeds


@pytest.mark.parametrize(
    "extra, expected",
    [
        ("confirm: {top_k: 0, seeds: 3}", "confirm.top_k: must be >= 1 (got 0)"),
        ("confirm: {top_k: 2, seeds: 1}", "confirm.seeds: must be at least 2: a paired comparison over seeds needs two (got 1)"),
        ("confirm: {top_k: 2, sedes: 3}", "confirm.sedes: unknown key; did you mean confirm.seeds?"),
        ("confirm: 3", "confirm: must be a mapping (got 3)"),
    ],
)
def test_bad_confirm(tmp_path, extra, expected):
    path = write(tmp_path, GOOD + extra + "\n")
    assert problems(path) == [f"{path}: {expected}"]


def test_confirm_needs_a_single_objective(tmp_path):
    path = write(tmp_path, GOOD.replace("objective: grpo/score/mean", "objective: [a, b]") + "confirm: {top_k: 2}\n")
    assert problems(path) == [
        f"{path}: confirm: ranks trials by one objective, but the spec has 2; remove confirm or keep one objective"
    ]
