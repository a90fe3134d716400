"""Population-based branching (spec ``scheduler: {kind: pbt}``): which segments the population runs next.

A population of ``population`` members trains ``train_iters`` iterations in generations of ``interval``
iterations. Each segment (member m, generation g: iterations [g*K, (g+1)*K)) is one trial of the study, run by
the driver like any other (retried, resumed, recorded). Once every member of generation g has ended, the members
are ranked by their trial value (the spec's objective over the lineage's held-out curve, mean over seeds: the
curve of a branch adopts its ancestors' rows, as a retry's does):

- the bottom ``quantile`` (and every member that was pruned, failed or never ran) continue from a copy of a
  top-``quantile`` member's checkpoint at iteration (g+1)*K (weights, optimizer, KL controller, data position,
  RNG: a resume from it), with explored parameters (``explore``);
- the others continue their own lineage unchanged.

The ranking and the quantiles are Ray Tune's ``PopulationBasedTraining._quantiles`` (``ceil(n * quantile)``
members, at most half of them); explore is its ``_explore``: a searched key that can change during a run
(``grpo.config.schedule.SCHEDULABLE``) is resampled from its search space with ``resample_probability``, else
multiplied by one of ``perturb`` (a choice moves to a neighbouring value), clamped to its bounds; any other
searched key (a layout, a batch size) is inherited, never explored; ``explore.method: pb2`` picks the float and
int values by a GP-UCB instead (grpo/sweep/run/pb2.py, Ray Tune's ``PB2``). Unlike Ray Tune, generations are
synchronous (a member waits for the generation to end), which is what makes every decision reproducible:
everything is derived from the study's trials and a seed, so a driver killed at any moment and rerun enqueues
exactly the segments that are missing, with the same decisions, and never one twice.

A segment's trial carries its member, generation, parent and branch iteration (``grpo.trial_attrs``) and its
``schedule``: the values its lineage ran with from iteration 0, which its config carries too, so its exported
config replays the whole lineage from scratch with ``grpo-train``.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from optuna.distributions import BaseDistribution, CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.trial import FrozenTrial, TrialState

from grpo.config.schedule import SCHEDULABLE
from grpo.sweep.run import pb2
from grpo.sweep.spec.models import SchedulerSpec
from grpo.sweep.spec.space import SearchSpace
from grpo.trial_attrs import (
    BRANCH_OF,
    BRANCHED_AT,
    EXPLOITED,
    GAVE_UP,
    INFEASIBLE,
    PBT_GENERATION,
    PBT_MEMBER,
    RESUME_FROM,
    RETRIED,
    SCHEDULE,
    TRIAL_DIR,
)

Schedule = dict[str, dict[str, Any]]  # config key -> {str(first iteration): value}
Feasible = Callable[[dict[str, Any]], bool]
MAX_EXPLORE_DRAWS = 20  # explored points that break a config rule are drawn again, then the parent's are kept


@dataclass(frozen=True)
class Settings:
    """The scheduler as the study runs it (stored as the study's ``pbt`` attr)."""

    population: int
    interval: int
    quantile: float
    resample_probability: float
    perturb: tuple[float, ...]
    train_iters: int
    method: str = "perturb"  # explore.method: perturb (PBT's) or pb2 (grpo/sweep/run/pb2.py)

    @classmethod
    def of(cls, scheduler: SchedulerSpec, train_iters: int) -> Settings:
        explore = scheduler.explore
        return cls(
            scheduler.population,
            scheduler.interval,
            scheduler.quantile,
            explore.resample_probability,
            tuple(explore.perturb),
            train_iters,
            explore.method,
        )

    @property
    def generations(self) -> int:
        return math.ceil(self.train_iters / self.interval)

    @property
    def trials(self) -> int:
        """Segments in all: the study's trial budget."""
        return self.population * self.generations

    def as_attr(self) -> dict[str, Any]:
        method = {} if self.method == "perturb" else {"explore_method": self.method}  # older studies' attr as it was
        return {
            **method,
            "kind": "pbt",
            "population": self.population,
            "interval": self.interval,
            "quantile": self.quantile,
            "resample_probability": self.resample_probability,
            "perturb": list(self.perturb),
            "train_iters": self.train_iters,
            "generations": self.generations,
        }


@dataclass(frozen=True)
class Segment:
    """A segment to enqueue: member ``member`` of generation ``generation``."""

    member: int
    generation: int
    params: dict[str, Any] | None  # None: generation 0, sampled by the spec's sampler when asked
    parent: FrozenTrial | None = None
    exploited: bool = False
    schedule: Schedule | None = None  # None: generation 0 (made from the sampled params when asked)

    def user_attrs(self, interval: int) -> dict[str, Any]:
        attrs: dict[str, Any] = {PBT_MEMBER: self.member, PBT_GENERATION: self.generation}
        if self.parent is not None:
            attrs[BRANCH_OF] = self.parent.number
            attrs[BRANCHED_AT] = self.generation * interval
            attrs[EXPLOITED] = self.exploited
            attrs[RESUME_FROM] = self.parent.user_attrs[TRIAL_DIR]  # its checkpoints: what the branch resumes from
        if self.schedule is not None:
            attrs[SCHEDULE] = self.schedule
        return attrs

    def describe(self) -> str:
        if self.parent is None:
            return f"member {self.member} starts"
        if not self.exploited:
            return f"member {self.member} continues trial {self.parent.number}"
        return f"member {self.member} branches from trial {self.parent.number}"


def explored_keys(searched: Sequence[str], schedulable: Sequence[str] = SCHEDULABLE) -> list[str]:
    """The searched keys a branch explores: those a schedule may change during a run; the rest are inherited."""
    allowed = set(schedulable)
    return [key for key in searched if key in allowed]


def is_segment(trial: FrozenTrial) -> bool:
    return trial.user_attrs.get(PBT_GENERATION) is not None


def initial_schedule(params: Mapping[str, Any], schedulable: Sequence[str]) -> Schedule:
    """Generation 0's schedule: each schedulable searched key's sampled value from iteration 0."""
    return {key: {"0": params[key]} for key in schedulable if key in params}


def extended(schedule: Schedule, params: Mapping[str, Any], at: int, schedulable: Sequence[str]) -> Schedule:
    """``schedule`` with the values of ``params`` from iteration ``at`` where they change."""
    out = {key: dict(points) for key, points in schedule.items()}
    for key in schedulable:
        if key not in params:
            continue
        points = out.setdefault(key, {})
        current = points[max(points, key=int)] if points else None
        if not points or current != params[key]:
            points[str(at)] = params[key]
    return out


def schedule_for_config(schedule: Schedule) -> dict[str, dict[int, Any]]:
    """The ``schedule:`` config key of a schedule attr (iterations as ints)."""
    return {key: {int(at): value for at, value in points.items()} for key, points in schedule.items()}


class Population:
    """Decides, from the study's trials alone, which segments are missing; see the module docstring."""

    def __init__(
        self,
        settings: Settings,
        space: SearchSpace,
        schedulable: Sequence[str],
        direction: str,
        seed: str,
        feasible: Feasible | None = None,
    ):
        self.settings, self.space, self.direction, self.seed = settings, space, direction, seed
        self.explored_keys = explored_keys(space.keys, schedulable)
        self.feasible = feasible

    # -- what the study holds ---------------------------------------------------------------------------
    @staticmethod
    def outcomes(trials: Sequence[FrozenTrial]) -> dict[tuple[int, int], FrozenTrial]:
        """(generation, member) -> the trial that settled it (retries followed: the last attempt)."""
        found: dict[tuple[int, int], FrozenTrial] = {}
        for t in sorted((t for t in trials if is_segment(t)), key=lambda t: t.number):
            key = (int(t.user_attrs[PBT_GENERATION]), int(t.user_attrs[PBT_MEMBER]))
            if key in found and found[key].state != TrialState.FAIL:
                continue  # settled (or running) already; a later one is a duplicate the asker fails
            found[key] = t
        return found

    @staticmethod
    def ended(trial: FrozenTrial) -> bool:
        """The segment is settled: COMPLETE, PRUNED (also infeasible), or FAIL with no retry to come."""
        if trial.state in (TrialState.COMPLETE, TrialState.PRUNED):
            return True
        if trial.state == TrialState.FAIL:
            return bool(trial.user_attrs.get(GAVE_UP) or trial.user_attrs.get(INFEASIBLE)) or not trial.user_attrs.get(
                RETRIED
            )
        return False

    def generation_ended(self, outcomes: Mapping[tuple[int, int], FrozenTrial], generation: int) -> bool:
        return all(
            (generation, m) in outcomes and self.ended(outcomes[(generation, m)])
            for m in range(self.settings.population)
        )

    def survivors(self, outcomes: Mapping[tuple[int, int], FrozenTrial], generation: int) -> list[FrozenTrial]:
        """Generation ``generation``'s COMPLETE members, worst first."""
        done = [
            outcomes[(generation, m)]
            for m in range(self.settings.population)
            if (generation, m) in outcomes and outcomes[(generation, m)].state == TrialState.COMPLETE
        ]
        sign = 1.0 if self.direction == "maximize" else -1.0
        return sorted(done, key=lambda t: (sign * float(t.values[0]), -t.number))

    def finished(self, trials: Sequence[FrozenTrial]) -> bool:
        """Nothing more to run: the last generation has ended, or a generation ended with no member complete."""
        outcomes = self.outcomes(trials)
        for g in range(self.settings.generations):
            if not self.generation_ended(outcomes, g):
                return False
            if not self.survivors(outcomes, g):
                return True  # the whole population died: there is nothing to branch from
        return True

    def dead_at(self, trials: Sequence[FrozenTrial]) -> int | None:
        """The generation in which every member ended without completing, if any."""
        outcomes = self.outcomes(trials)
        for g in range(self.settings.generations):
            if not self.generation_ended(outcomes, g):
                return None
            if not self.survivors(outcomes, g):
                return g
        return None

    # -- the next segments ------------------------------------------------------------------------------
    def missing(self, trials: Sequence[FrozenTrial]) -> list[Segment]:
        """The segments to enqueue now: generation 0's members that have no trial, or, once generation g has
        ended, generation g+1's that have none."""
        outcomes = self.outcomes(trials)
        population = range(self.settings.population)
        if not all((0, m) in outcomes for m in population):
            return [Segment(m, 0, None) for m in population if (0, m) not in outcomes]
        for g in range(self.settings.generations - 1):
            if not self.generation_ended(outcomes, g):
                return []
            if any((g + 1, m) not in outcomes for m in population):
                plan = self.plan(outcomes, g)
                return [s for s in plan if (g + 1, s.member) not in outcomes]
        return []

    def plan(self, outcomes: Mapping[tuple[int, int], FrozenTrial], generation: int) -> list[Segment]:
        """Generation ``generation + 1`` as the exploit/explore step makes it from ``generation``'s results."""
        ranked = self.survivors(outcomes, generation)
        if not ranked:
            return []
        n = math.ceil(len(ranked) * self.settings.quantile)
        if n > len(ranked) / 2:
            n = len(ranked) // 2
        top = ranked[-n:] if n else ranked[-1:]
        bottom = {t.number for t in ranked[:n]}
        at = (generation + 1) * self.settings.interval
        segments: list[Segment] = []
        # (parent, values) already in the next generation: a branch equal to one of them would train the very
        # same run (same checkpoint, same RNG state), so its explore step draws again.
        taken = {(own.number, _key(own.params)) for own in ranked if own.number not in bottom}
        bandit = self._bandit(outcomes, generation) if self.settings.method == "pb2" else None
        for m in range(self.settings.population):
            own = outcomes.get((generation, m))
            if own is not None and own.state == TrialState.COMPLETE and own.number not in bottom:
                params = dict(own.params)
                schedule = extended(own.user_attrs.get(SCHEDULE) or {}, params, at, self.explored_keys)
                segments.append(Segment(m, generation + 1, params, own, exploited=False, schedule=schedule))
                continue
            rng = random.Random(f"{self.seed}:pbt:{generation + 1}:{m}")
            parent = rng.choice(top)
            mine = {k for p, k in taken if p == parent.number}
            if bandit is not None and bandit.usable:
                params = self.explore_pb2(bandit, dict(parent.params), rng, mine)
            else:  # PBT's explore (also PB2's before it has two observations to model)
                params = self.explore(dict(parent.params), rng, taken=mine)
            taken.add((parent.number, _key(params)))
            schedule = extended(parent.user_attrs.get(SCHEDULE) or {}, params, at, self.explored_keys)
            segments.append(Segment(m, generation + 1, params, parent, exploited=True, schedule=schedule))
        return segments

    # -- explore ----------------------------------------------------------------------------------------
    def _bandit(self, outcomes: Mapping[tuple[int, int], FrozenTrial], generation: int) -> pb2.Bandit:
        """PB2's GP data: every completed segment up to ``generation``, with its improvement over the segment
        it continued from (generation 0: over the worst of generation 0), higher is better."""
        sign = 1.0 if self.direction == "maximize" else -1.0
        by_number = {t.number: t for t in outcomes.values()}
        first = [t for (g, _), t in outcomes.items() if g == 0 and t.state == TrialState.COMPLETE]
        floor = min((sign * float(t.values[0]) for t in first), default=0.0)
        observations = []
        for (g, _), t in sorted(outcomes.items()):
            if g > generation or t.state != TrialState.COMPLETE:
                continue
            parent = by_number.get(t.user_attrs.get(BRANCH_OF, -1))
            if g > 0 and (parent is None or parent.state != TrialState.COMPLETE):
                continue
            before = floor if g == 0 or parent is None else sign * float(parent.values[0])
            observations.append(pb2.Observation(t.params, g, sign * float(t.values[0]) - before))
        return pb2.Bandit(observations, self.explored_keys, self.space.distributions(), generation + 1)

    def explore_pb2(
        self, bandit: pb2.Bandit, params: dict[str, Any], rng: random.Random, taken: set[tuple[Any, ...]]
    ) -> dict[str, Any]:
        """PB2's explore: the UCB's choice for the modelled keys, PBT's step for a categorical explored key;
        a choice that breaks a config rule falls back to PBT's explore."""
        out = bandit.choose(params, rng, taken)
        distributions = self.space.distributions()
        for key in self.explored_keys:
            if key in out and not pb2.modelled(distributions[key]):
                out[key] = explore_value(out[key], distributions[key], rng, self.settings)
        if _key(out) in taken or (self.feasible is not None and not self.feasible(out)):
            return self.explore(params, rng, taken=taken)
        return out

    def explore(
        self, params: dict[str, Any], rng: random.Random, taken: set[tuple[Any, ...]] | None = None
    ) -> dict[str, Any]:
        """``params`` with each explorable key resampled or perturbed (``MAX_EXPLORE_DRAWS`` tries at a point
        that passes ``feasible`` and is not in ``taken``; else ``params`` unchanged)."""
        if not self.explored_keys:
            return params
        distributions = self.space.distributions()
        for _ in range(MAX_EXPLORE_DRAWS):
            out = dict(params)
            for key in self.explored_keys:
                if key in out:
                    out[key] = explore_value(out[key], distributions[key], rng, self.settings)
            if taken and _key(out) in taken:
                continue
            if self.feasible is None or self.feasible(out):
                return out
        return params


def explore_value(value: Any, dist: BaseDistribution, rng: random.Random, settings: Settings) -> Any:
    """One key's explore step (Ray Tune's ``_explore``), within the distribution's bounds and step."""
    resample = rng.random() < settings.resample_probability
    if isinstance(dist, CategoricalDistribution):
        choices = list(dist.choices)
        if resample or value not in choices:
            return rng.choice(choices)
        i = choices.index(value)
        return choices[max(0, i - 1)] if rng.random() > 0.5 else choices[min(len(choices) - 1, i + 1)]
    if isinstance(dist, IntDistribution):
        if resample:
            return rng.randrange(dist.low, dist.high + 1, dist.step)
        moved = round(value * rng.choice(settings.perturb))
        if moved == value:  # a small int would never move: step to a neighbour in the factor's direction
            moved = value + (dist.step if rng.random() > 0.5 else -dist.step)
        snapped = dist.low + round((moved - dist.low) / dist.step) * dist.step
        return int(min(dist.high, max(dist.low, snapped)))
    if isinstance(dist, FloatDistribution):
        if resample:
            if dist.log:
                return _tidy(math.exp(rng.uniform(math.log(dist.low), math.log(dist.high))))
            moved = rng.uniform(dist.low, dist.high)
        else:
            moved = float(value) * rng.choice(settings.perturb)
        if dist.step is not None:
            moved = dist.low + round((moved - dist.low) / dist.step) * dist.step
        return _tidy(min(dist.high, max(dist.low, moved)))
    return value


def _key(params: Mapping[str, Any]) -> tuple[Any, ...]:
    return tuple(sorted(params.items()))


def _tidy(x: float) -> float:
    """Six significant digits: a perturbed 1.2e-05 stays readable in configs and the report."""
    return float(f"{x:.6g}")
