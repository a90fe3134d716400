"""Hydra sweep expressions -> Optuna distributions, one test per form, and values -> overrides."""

from __future__ import annotations

import pytest
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

from grpo.sweep.spec.space import SearchSpace, distribution_values, format_value, parse_expression, parse_overrides

KEY = "rl_config.clip_ratio"


@pytest.mark.parametrize(
    "expr, expected",
    [
        ("choice(4, 8, 16)", CategoricalDistribution([4, 8, 16])),
        ("choice(kl, abs, mse, low_var_kl)", CategoricalDistribution(["kl", "abs", "mse", "low_var_kl"])),
        ("choice(0.0, 0.001, 0.01)", CategoricalDistribution([0.0, 0.001, 0.01])),
        ("choice(true, false)", CategoricalDistribution([True, False])),
        ("choice('a b', x)", CategoricalDistribution(["a b", "x"])),
        ("4,8", CategoricalDistribution([4, 8])),  # Hydra's simple choice form
        # range includes its stop value (hydra-optuna-sweeper passes stop to Optuna as an inclusive high)
        ("range(1, 5)", IntDistribution(1, 5, step=1)),
        ("range(4, 16, 4)", IntDistribution(4, 16, step=4)),
        ("range(1, 10, 4)", IntDistribution(1, 9, step=4)),  # stop off the step grid: lowered to 9
        ("range(0.1, 0.5, 0.1)", FloatDistribution(0.1, 0.5, step=0.1)),
        ("range(0.1, 0.45, 0.1)", FloatDistribution(0.1, 0.4, step=0.1)),
        ("interval(0.1, 0.3)", FloatDistribution(0.1, 0.3)),
        ("interval(1, 5)", FloatDistribution(1.0, 5.0)),  # Hydra's interval is always float
        ("tag(log, interval(1e-4, 1e-1))", FloatDistribution(1e-4, 0.1, log=True)),
        ("tag(int, interval(1, 9))", IntDistribution(1, 9)),
        ("tag(int, log, interval(1, 64))", IntDistribution(1, 64, log=True)),
    ],
)
def test_expression_to_distribution(expr, expected):
    got = parse_expression(KEY, expr)
    assert got == expected
    assert type(got) is type(expected)


def test_int_range_is_ints_and_float_range_is_floats():
    assert all(isinstance(v, int) for v in distribution_values(parse_expression(KEY, "range(1, 5)")))
    assert distribution_values(parse_expression(KEY, "range(1, 5)")) == [1, 2, 3, 4, 5]
    assert distribution_values(parse_expression(KEY, "range(0.1, 0.5, 0.1)")) == [0.1, 0.2, 0.3, 0.4, 0.5]
    assert distribution_values(parse_expression(KEY, "interval(0.1, 0.5)")) is None


@pytest.mark.parametrize(
    "expr, fragment",
    [
        ("", "empty expression"),
        ("0.2", "is a single value, not a sweep"),
        ("choice(4, 8", ""),
        ("shuffle(range(1, 4))", "shuffle() is not supported"),
        ("tag(foo, interval(0, 1))", "unknown tag foo"),
        ("tag(log, choice(1, 2))", "tags apply to interval(...) only"),
        ("tag(log, range(1, 4))", "tags apply to interval(...) only"),
        ("interval(0.5, 0.5)", "interval start must be below its end"),
        ("tag(log, interval(-1, 1))", "a log interval needs a start > 0"),
        ("tag(int, interval(1.5, 4))", "tag(int, ...) needs whole-number ends"),
        ("range(5, 1)", "range needs start < stop and a positive step"),
        ("choice(1, 1, 2)", "choice lists 1 twice"),
        ("choice([1, 2], 3)", "choice values must be numbers, strings or booleans"),
    ],
)
def test_bad_expressions(expr, fragment):
    with pytest.raises(ValueError) as info:
        parse_expression(KEY, expr)
    assert fragment in str(info.value)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("value", [True, False, 3, 0.001, 1e-5, 2.5e-12, "kl", "low_var_kl", "a b", "it's", "true", "1e-3", "x=y"])
def test_format_value_round_trips_through_hydra(value):
    (override,) = parse_overrides([f"{KEY}={format_value(value)}"])
    assert override.value() == value and type(override.value()) is type(value)


def test_to_overrides_in_space_order():
    space = SearchSpace.from_entries(
        {"rl_config.kl_penalty": "choice(kl, mse)", "rl_config.init_kl_coef": "tag(log, interval(1e-4, 1e-1))"}
    )
    params = {"rl_config.init_kl_coef": 0.01, "rl_config.kl_penalty": "mse"}
    assert space.to_overrides(params) == ["rl_config.kl_penalty=mse", "rl_config.init_kl_coef=0.01"]
    with pytest.raises(KeyError):
        space.to_overrides({"rl_config.epochs": 1})


def test_model_keys_accept_any_model_name():
    space = SearchSpace.from_entries({"model.tiny_qwen.num_layers": "choice(2, 4)"})
    assert space.keys == ["model.tiny_qwen.num_layers"]


def test_layout_choice_of_known_layouts():
    space = SearchSpace.from_entries({"layout": "choice(tp4_pp1, tp2_pp2)"})
    assert space.distributions()["layout"] == CategoricalDistribution(["tp4_pp1", "tp2_pp2"])
    assert space.to_overrides({"layout": "tp2_pp2"}) == ["layout=tp2_pp2"]
