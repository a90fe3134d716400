"""The pbt planner (grpo/sweep/run/pbt.py) on fabricated studies: which segments a generation gets, from which
parents, with what explored values; and that the plan is derived from storage alone, so a rerun after a crash
enqueues exactly what is missing, with the same decisions.

The quantile rule and the explore step mirror Ray Tune's ``PopulationBasedTraining`` (ray/tune/schedulers/pbt.py,
``_quantiles``: ``ceil(n * quantile_fraction)`` trials, at most ``floor(n / 2)``; ``_explore``: resample with
``resample_probability``, else multiply by a perturbation factor, a list value moving to a neighbour).
"""

from __future__ import annotations

import math
import random

import optuna
import pytest
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.trial import TrialState, create_trial

from grpo.sweep.run import pbt
from grpo.sweep.spec.models import SchedulerSpec
from grpo.sweep.spec.space import SearchSpace
from grpo.trial_attrs import BRANCH_OF, BRANCHED_AT, EXPLOITED, PBT_GENERATION, PBT_MEMBER, RESUME_FROM, SCHEDULE

LR, CLIP, TP = "actor_config.lr", "rl_config.clip_ratio", "actor_config.tensor_model_parallel_size"
SPACE = SearchSpace.from_entries(
    {LR: "tag(log, interval(1e-6, 1e-4))", CLIP: "choice(0.1, 0.2, 0.3)", TP: "choice(1, 2)"}
)
SCHEDULABLE = [LR, CLIP]  # the tensor-parallel size is a layout: inherited, never explored


def settings(population: int = 4, quantile: float = 0.25, resample: float = 0.25) -> pbt.Settings:
    spec = SchedulerSpec(
        population=population, interval=10, quantile=quantile, explore={"resample_probability": resample}
    )
    return pbt.Settings.of(spec, train_iters=30)


def population(**kw) -> pbt.Population:
    return pbt.Population(settings(**kw), SPACE, SCHEDULABLE, "maximize", seed="7")


def segment(number: int, generation: int, member: int, value: float | None, state=TrialState.COMPLETE, lr=1e-5):
    params = {LR: lr, CLIP: 0.2, TP: 1}
    attrs = {
        PBT_GENERATION: generation,
        PBT_MEMBER: member,
        "trial_dir": f"/s/trials/{number}",
        SCHEDULE: pbt.initial_schedule(params, SCHEDULABLE),
    }
    trial = create_trial(
        state=state,
        value=value if state == TrialState.COMPLETE else None,
        params=params,
        distributions=SPACE.distributions(),
        user_attrs=attrs,
    )
    trial.number = number
    return trial


def test_settings_count_segments_and_store_as_an_attr():
    s = settings()
    assert (s.generations, s.trials) == (3, 12)
    assert pbt.Settings.of(SchedulerSpec(population=2, interval=7), train_iters=30).generations == 5  # 4 x 7 + 2
    assert s.as_attr()["generations"] == 3 and s.as_attr()["perturb"] == [0.8, 1.2]


def test_generation_zero_is_enqueued_for_the_missing_members_only():
    pop = population()
    first = pop.missing([])
    assert [(s.member, s.generation, s.params, s.parent) for s in first] == [(m, 0, None, None) for m in range(4)]
    assert first[0].user_attrs(10) == {PBT_MEMBER: 0, PBT_GENERATION: 0}
    # a crash after two of the four were enqueued: the rerun adds members 2 and 3, not 0 and 1 again
    waiting = [segment(0, 0, 0, None, TrialState.WAITING), segment(1, 0, 1, None, TrialState.WAITING)]
    assert [s.member for s in pop.missing(waiting)] == [2, 3]


def test_next_generation_waits_for_every_member_then_branches_the_bottom_from_the_top():
    pop = population()
    gen0 = [
        segment(n, 0, n, v, lr=lr) for n, (v, lr) in enumerate([(0.5, 1e-5), (0.9, 2e-5), (0.7, 3e-5), (0.2, 4e-5)])
    ]
    running = [*gen0[:3], segment(3, 0, 3, None, TrialState.RUNNING)]
    assert pop.missing(running) == []  # member 3 still runs: no decision yet
    plan = pop.missing(gen0)
    assert [s.generation for s in plan] == [1] * 4
    by_member = {s.member: s for s in plan}
    # 4 members, quantile 0.25: ceil(1) = 1 at each end, as Ray Tune's _quantiles. Member 3 (0.2) is the bottom.
    assert by_member[3].exploited and by_member[3].parent is not None and by_member[3].parent.number == 1
    for m in (0, 1, 2):
        assert not by_member[m].exploited and by_member[m].parent.number == m
        assert by_member[m].params == gen0[m].params  # a member that continues keeps its values
    branch = by_member[3]
    assert branch.params[TP] == gen0[1].params[TP]  # a layout is inherited, never explored
    attrs = branch.user_attrs(10)
    assert attrs[BRANCH_OF] == 1 and attrs[BRANCHED_AT] == 10 and attrs[EXPLOITED] is True
    assert attrs[RESUME_FROM] == "/s/trials/1"  # the parent's folder: its checkpoints are what the branch loads
    # the branch's schedule: the parent's from 0, its explored values from 10 where they changed
    schedule = attrs[SCHEDULE]
    assert schedule[LR]["0"] == 2e-5 and set(schedule) == {LR, CLIP}
    for key in (LR, CLIP):
        points = schedule[key]
        if branch.params[key] != gen0[1].params[key]:
            assert points["10"] == branch.params[key]
        else:
            assert "10" not in points


def test_the_plan_is_the_same_on_every_rerun_and_only_fills_what_is_missing():
    pop = population(population=6, quantile=0.5, resample=0.5)
    gen0 = [segment(n, 0, n, v) for n, v in enumerate([0.1, 0.9, 0.8, 0.3, 0.6, 0.2])]
    first = pop.missing(gen0)
    again = population(population=6, quantile=0.5, resample=0.5).missing(gen0)
    assert [(s.member, s.params, s.parent.number, s.exploited) for s in first] == [
        (s.member, s.params, s.parent.number, s.exploited) for s in again
    ]
    # quantile 0.5 of 6 = 3 = floor(6 / 2): members 0, 5, 3 (the three worst) branch from 1, 2, 4
    assert {s.member for s in first if s.exploited} == {0, 3, 5}
    assert {s.parent.number for s in first if s.exploited} <= {1, 2, 4}
    # the driver died after enqueueing members 0..2 of generation 1: the rerun adds 3..5, decided the same way
    enqueued = [segment(6 + s.member, 1, s.member, None, TrialState.WAITING) for s in first[:3]]
    rest = pop.missing([*gen0, *enqueued])
    assert [(s.member, s.params) for s in rest] == [(s.member, s.params) for s in first[3:]]


def test_failed_and_pruned_members_branch_and_a_dead_population_finishes():
    pop = population()
    gen0 = [
        segment(0, 0, 0, 0.5),
        segment(1, 0, 1, 0.9),
        segment(2, 0, 2, None, TrialState.PRUNED),  # the collapse rule stopped it
        segment(3, 0, 3, None, TrialState.FAIL),  # failed, no retry left
    ]
    gen0[3].user_attrs["gave_up"] = True
    plan = {s.member: s for s in pop.missing(gen0)}
    # two complete members: ceil(0.5) = 1 > 2 / 2? no: one at each end; 0 is the bottom, 2 and 3 never completed
    assert {m for m, s in plan.items() if s.exploited} == {0, 2, 3}
    assert all(plan[m].parent.number == 1 for m in (0, 2, 3))
    assert not plan[1].exploited
    retrying = [*gen0[:3], segment(3, 0, 3, None, TrialState.FAIL)]
    retrying[3].user_attrs["retried"] = True  # its retry is enqueued: the generation has not ended
    assert pop.missing(retrying) == [] and not pop.finished(retrying)
    dead = [segment(n, 0, n, None, TrialState.PRUNED) for n in range(4)]
    assert pop.finished(dead) and pop.dead_at(dead) == 0 and pop.missing(dead) == []


def test_the_population_finishes_after_its_last_generation():
    pop = population(population=2)
    trials = []
    number = 0
    for g in range(3):
        for m in range(2):
            trials.append(segment(number, g, m, 0.5 + m))
            number += 1
        assert pop.finished(trials) == (g == 2)
        assert [s.generation for s in pop.missing(trials)] == ([] if g == 2 else [g + 1] * 2)


def test_explore_stays_in_bounds_and_on_the_grid():
    s = settings(resample=0.3)
    rng = random.Random(0)
    log = FloatDistribution(1e-6, 1e-4, log=True)
    stepped = FloatDistribution(0.1, 0.3, step=0.05)
    ints = IntDistribution(1, 8)
    choice = CategoricalDistribution([0.1, 0.2, 0.3])
    moved = 0
    for _ in range(500):
        v = pbt.explore_value(9e-5, log, rng, s)
        assert 1e-6 <= v <= 1e-4
        w = pbt.explore_value(0.3, stepped, rng, s)
        assert 0.1 <= w <= 0.3 and math.isclose(round((w - 0.1) / 0.05) * 0.05 + 0.1, w, abs_tol=1e-9)
        i = pbt.explore_value(1, ints, rng, s)
        assert isinstance(i, int) and 1 <= i <= 8
        c = pbt.explore_value(0.2, choice, rng, s)
        assert c in (0.1, 0.2, 0.3)
        moved += c != 0.2
    assert moved > 300  # a choice moves to a neighbour unless resampled onto itself
    # perturbation: the value times 0.8 or 1.2 (no resampling)
    fixed = settings(resample=0.0)
    assert {pbt.explore_value(5e-5, log, random.Random(k), fixed) for k in range(50)} == {4e-5, 6e-5}


def test_explore_retries_an_infeasible_point_then_keeps_the_parents():
    calls = []

    def never(params):
        calls.append(params)
        return False

    pop = pbt.Population(settings(resample=1.0), SPACE, SCHEDULABLE, "maximize", seed="1", feasible=never)
    parent = {LR: 1e-5, CLIP: 0.2, TP: 2}
    assert pop.explore(dict(parent), random.Random(0)) == parent
    assert len(calls) == pbt.MAX_EXPLORE_DRAWS


def test_minimize_ranks_the_other_way():
    pop = pbt.Population(settings(), SPACE, SCHEDULABLE, "minimize", seed="7")
    gen0 = [segment(n, 0, n, v) for n, v in enumerate([0.5, 0.9, 0.7, 0.2])]
    plan = {s.member: s for s in pop.missing(gen0)}
    assert [m for m, s in plan.items() if s.exploited] == [1] and plan[1].parent.number == 3


@pytest.mark.parametrize("at", [10, 20])
def test_extended_schedule_adds_only_changes(at):
    schedule = {LR: {"0": 1e-5}, CLIP: {"0": 0.2}}
    out = pbt.extended(schedule, {LR: 1e-5, CLIP: 0.3, TP: 2}, at, SCHEDULABLE)
    assert out == {LR: {"0": 1e-5}, CLIP: {"0": 0.2, str(at): 0.3}}
    assert schedule == {LR: {"0": 1e-5}, CLIP: {"0": 0.2}}  # not modified in place
    assert pbt.schedule_for_config(out) == {LR: {0: 1e-5}, CLIP: {0: 0.2, at: 0.3}}


def test_outcomes_follow_retries_to_the_last_attempt():
    failed = segment(0, 0, 0, None, TrialState.FAIL)
    failed.user_attrs["retried"] = True
    retry = segment(4, 0, 0, 0.7)
    found = pbt.Population.outcomes([failed, retry])
    assert found[(0, 0)].number == 4
    optuna.logging.set_verbosity(optuna.logging.WARNING)


def test_two_branches_of_one_parent_never_train_the_same_run():
    # Same checkpoint, same RNG state, same values: the same run twice. With no resampling and a single
    # perturbation factor the explore step has few outcomes (lr x 1.2, the clip ratio one step either way), so
    # for many seeds two branches of one parent would collide; the plan gives each branch its own values.
    spec = SchedulerSpec(
        population=4, interval=10, quantile=0.5, explore={"resample_probability": 0.0, "perturb": [1.2]}
    )
    gen0 = [segment(n, 0, n, v) for n, v in enumerate([0.1, 0.2, 0.7, 0.9])]
    for seed in range(20):
        pop = pbt.Population(pbt.Settings.of(spec, train_iters=30), SPACE, SCHEDULABLE, "maximize", seed=str(seed))
        branches = [(s.parent.number, tuple(sorted(s.params.items()))) for s in pop.missing(gen0) if s.exploited]
        assert len(branches) == 2 and len(set(branches)) == 2, (seed, branches)
