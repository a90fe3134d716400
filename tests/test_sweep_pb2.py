"""PB2's explore step (grpo/sweep/run/pb2.py, spec ``scheduler.explore.method: pb2``) on fabricated studies.

What it mirrors of Ray Tune's PB2 (ray/tune/schedulers/pb2.py and pb2_utils.py, read for this): the exploit step
is PBT's; the explore step fits a GP with the time-varying kernel ``TV_SquaredExp`` (squared exponential in the
[0, 1]-scaled values times ``(1 - eps) ** (|t - t'| / 2)``) to each member's improvement over its last interval
and picks the new values by UCB within the search-space bounds; several branches of one step are chosen one
after another with the earlier choices taken into account. What differs (said in the module): log-scaled bounds
where the distribution is log, a kriging believer instead of Ray's pending-point variance, candidates drawn from
the member's seeded RNG so a rerun decides the same way.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from optuna.trial import TrialState, create_trial

from grpo.errors import UserError
from grpo.sweep.run import pb2, pbt
from grpo.sweep.spec.models import SchedulerSpec
from grpo.sweep.spec.space import SearchSpace
from grpo.trial_attrs import BRANCH_OF, PBT_GENERATION, PBT_MEMBER, SCHEDULE

LR, CLIP = "actor_config.lr", "rl_config.clip_ratio"
SPACE = SearchSpace.from_entries({LR: "tag(log, interval(1e-6, 1e-3))", CLIP: "choice(0.1, 0.2, 0.3)"})
SCHEDULABLE = [LR, CLIP]
BEST_LR = 3e-5  # the fabricated landscape's best learning rate


def gain(lr: float) -> float:
    """A segment's improvement: a bump in log(lr) around BEST_LR (the GRPO shape: too low learns slowly,
    too high collapses)."""
    return math.exp(-((math.log10(lr) - math.log10(BEST_LR)) ** 2) / 0.2)


def settings(method: str, population: int = 4) -> pbt.Settings:
    spec = SchedulerSpec(population=population, interval=10, quantile=0.25, explore={"method": method})
    return pbt.Settings.of(spec, train_iters=40)


def trial(number, generation, member, value, lr, clip=0.2, parent=None):
    params = {LR: lr, CLIP: clip}
    attrs = {PBT_GENERATION: generation, PBT_MEMBER: member, "trial_dir": f"/s/trials/{number}"}
    attrs[SCHEDULE] = pbt.initial_schedule(params, SCHEDULABLE)
    if parent is not None:
        attrs[BRANCH_OF] = parent
    t = create_trial(
        state=TrialState.COMPLETE, value=value, params=params, distributions=SPACE.distributions(), user_attrs=attrs
    )
    t.number = number
    return t


def generation0(lrs):
    return [trial(m, 0, m, gain(lr), lr) for m, lr in enumerate(lrs)]


def test_the_spec_names_the_method_and_the_study_attr_keeps_it():
    assert settings("pb2").as_attr()["explore_method"] == "pb2"
    assert "explore_method" not in settings("perturb").as_attr()  # an older study's attr is unchanged
    with pytest.raises(ValueError, match="explore.method"):
        SchedulerSpec(population=4, interval=10, explore={"method": "pb3"})


def test_units_round_trip_on_log_and_int_bounds():
    dists = SPACE.distributions()
    for lr in (1e-6, 3e-5, 1e-3):
        assert pb2.from_unit(pb2.to_unit(lr, dists[LR]), dists[LR]) == pytest.approx(lr, rel=1e-5)
    assert pb2.to_unit(math.sqrt(1e-6 * 1e-3), dists[LR]) == pytest.approx(0.5)


def test_the_gp_fits_the_observed_improvements():
    dists = SPACE.distributions()
    lrs = [1e-6, 5e-6, 2e-5, 1e-4, 5e-4, 1e-3]
    obs = [pb2.Observation({LR: lr, CLIP: 0.2}, 0, gain(lr)) for lr in lrs]
    bandit = pb2.Bandit(obs, SCHEDULABLE, dists, t=1)
    gp = pb2.GP(bandit.x, bandit.tt, bandit.y).fit()
    mean, std = gp.predict(bandit.x, 0)
    assert np.corrcoef(mean, bandit.y)[0, 1] > 0.95 and (std < 0.3).all()  # it interpolates what it saw
    far_mean, far_std = gp.predict(bandit.x, 6)  # six generations later the old data say less
    assert far_std.mean() > std.mean()


def test_pb2_branches_go_where_the_population_improved_most():
    # 8 members over three decades; the improvements peak at BEST_LR (3e-5), which no member ran.
    gen0 = generation0([1e-6, 5e-6, 1e-5, 2e-5, 1e-4, 3e-4, 1e-3, 3e-6])
    spec = SchedulerSpec(population=8, interval=10, quantile=0.25, explore={"method": "pb2"})
    pop = pbt.Population(pbt.Settings.of(spec, train_iters=40), SPACE, SCHEDULABLE, "maximize", seed="7")
    branches = [s for s in pop.missing(gen0) if s.exploited]
    assert len(branches) == 2 and {s.member for s in branches} == {0, 6}  # the two worst: 1e-6 and 1e-3
    for branch in branches:
        assert branch.params[CLIP] in (0.1, 0.2, 0.3)  # a categorical key is perturbed as PBT does
        assert 1.5e-5 < branch.params[LR] < 6e-5, branch.params  # near the peak, between the members that ran
    assert branches[0].params[LR] != branches[1].params[LR]


def test_two_branches_of_one_step_do_not_pick_the_same_point_and_a_rerun_decides_the_same():
    lrs = [1e-6, 2e-6, 4e-6, 2e-5, 5e-5, 1e-4, 2e-4, 5e-4]
    gen0 = generation0(lrs)
    spec_settings = pbt.Settings.of(
        SchedulerSpec(population=8, interval=10, quantile=0.5, explore={"method": "pb2"}), train_iters=40
    )
    first = pbt.Population(spec_settings, SPACE, SCHEDULABLE, "maximize", seed="7").missing(gen0)
    again = pbt.Population(spec_settings, SPACE, SCHEDULABLE, "maximize", seed="7").missing(gen0)
    branches = [s for s in first if s.exploited]
    assert len(branches) == 4
    assert len({(s.parent.number, tuple(sorted(s.params.items()))) for s in branches}) == 4
    assert [(s.member, s.params) for s in first] == [(s.member, s.params) for s in again]


def test_later_generations_learn_from_improvements_over_the_parent_segment():
    gen0 = generation0([1e-6, 1e-5, 1e-4, 1e-3])
    # generation 1: each continued its own lineage; the improvement is value(g1) - value(g0 parent)
    gen1 = [trial(4 + m, 1, m, gen0[m].value + gain(t.params[LR]), t.params[LR], parent=m) for m, t in enumerate(gen0)]
    pop = pbt.Population(settings("pb2"), SPACE, SCHEDULABLE, "maximize", seed="3")
    bandit = pop._bandit(pop.outcomes([*gen0, *gen1]), 1)
    assert len(bandit.y) == 8 and bandit.t == 2
    improvements = {round(o, 6) for o in bandit.y}
    assert len(improvements) >= 4  # generation 1's rows are improvements, not the cumulative values


def test_a_choice_that_breaks_a_config_rule_falls_back_to_pbt():
    gen0 = generation0([1e-6, 3e-6, 2e-5, 1e-4])
    pop = pbt.Population(settings("pb2"), SPACE, SCHEDULABLE, "maximize", seed="7", feasible=lambda p: p[LR] > 5e-5)
    (branch,) = [s for s in pop.missing(gen0) if s.exploited]
    assert branch.params[LR] > 5e-5  # PBT's explore from the parent (2e-5 region refused)


def test_a_bad_method_is_one_line_naming_the_key(tmp_path, monkeypatch):
    from sweep_helpers import write_spec

    from grpo.sweep.spec.load import load_spec

    monkeypatch.chdir(tmp_path)
    spec = write_spec(
        tmp_path,
        search={LR: "tag(log, interval(1e-6, 1e-3))"},
        scheduler={"kind": "pbt", "population": 2, "interval": 4, "explore": {"method": "bandit"}},
    )
    with pytest.raises(UserError) as err:
        load_spec(str(spec))
    assert "scheduler.explore.method" in str(err.value) and str(err.value).startswith(str(spec))
