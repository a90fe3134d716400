"""The Optuna sampler and pruner a spec asks for, and the checks that refuse impossible combinations.

Samplers (``sampler.name``), built with ``sampler.seed`` and then ``sampler.options`` as keyword
arguments of the Optuna class (an unknown option is an error with a did-you-mean):

- ``tpe``: ``TPESampler(multivariate=True, constant_liar=concurrency > 1, group=<space has when:>)``.
  Multivariate TPE models interactions (KL coefficient x estimator); the constant liar keeps
  parallel workers from proposing the same point while earlier trials still run; ``group`` is what
  Optuna needs for conditional spaces.
- ``random``, ``nsga2``, ``gp``: Optuna's ``RandomSampler``, ``NSGAIISampler``, ``GPSampler``
  (all three accept single- and multi-objective studies).
- ``grid``: ``GridSampler`` over ``SearchSpace.grid_values()``; refused when a dimension is
  continuous or a parameter is conditional (Optuna's grid would run duplicate configs). ``trials``
  is capped at the number of grid points (with a warning).
- ``cmaes``: ``CmaEsSampler``; single-objective only (Optuna raises otherwise), so a multi-objective
  spec is refused up front. Categorical parameters are sampled independently (a warning says so).

Pruners (``pruner.name``): ``median`` (``MedianPruner(n_warmup_steps=warmup_steps)``),
``successive_halving`` (``min_resource=warmup_steps`` or ``auto``), ``hyperband``
(``min_resource=max(1, warmup_steps)``, ``max_resource`` = the base config's
``megatron_training.train_iters`` unless given), ``none`` (``NopPruner``). Optuna's
``Trial.report``/``should_prune`` do not exist for multi-objective studies, so there the pruner is
always ``NopPruner`` and ``spec.warnings`` says so.
"""

from __future__ import annotations

import inspect
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import optuna

from grpo.errors import UserError, did_you_mean
from grpo.sweep.space import MAX_GRID_POINTS, SearchSpace
from grpo.sweep.spec import SweepSpec


class AskTellGridSampler(optuna.samplers.GridSampler):
    """Optuna's GridSampler without its ``study.stop()`` after the last point.

    GridSampler stops the study from ``after_trial``, which raises a RuntimeError outside
    ``study.optimize`` (our driver uses ask/tell, so the final ``tell`` would raise after storing the
    result). The driver stops on its own at ``spec.trials``, which ``load_spec`` caps at the grid size.
    """

    def after_trial(
        self,
        study: optuna.Study,
        trial: optuna.trial.FrozenTrial,
        state: optuna.trial.TrialState,
        values: Sequence[float] | None,
    ) -> None:
        return None


SAMPLER_CLASSES: dict[str, type[optuna.samplers.BaseSampler]] = {
    "tpe": optuna.samplers.TPESampler,
    "random": optuna.samplers.RandomSampler,
    "grid": AskTellGridSampler,
    "cmaes": optuna.samplers.CmaEsSampler,
    "nsga2": optuna.samplers.NSGAIISampler,
    "gp": optuna.samplers.GPSampler,
}
PRUNER_CLASSES: dict[str, type[optuna.pruners.BasePruner]] = {
    "median": optuna.pruners.MedianPruner,
    "successive_halving": optuna.pruners.SuccessiveHalvingPruner,
    "hyperband": optuna.pruners.HyperbandPruner,
    "none": optuna.pruners.NopPruner,
}
SINGLE_OBJECTIVE_ONLY = ("cmaes",)
# Set from other spec keys; an option of the same name would silently fight them.
_RESERVED = {"seed": "sampler.seed", "search_space": "search", "n_warmup_steps": "pruner.warmup_steps"}


def _option_problems(section: str, cls: type, options: dict[str, Any], source: str) -> list[str]:
    accepted = [n for n in inspect.signature(cls).parameters if n not in ("self", "args", "kwargs")]
    problems = []
    for name in options:
        where = f"{source}: {section}.options.{name}"
        if name in _RESERVED:
            problems.append(f"{where}: set it with {_RESERVED[name]}, not as an option")
        elif name not in accepted:
            hint = did_you_mean(name, accepted)
            more = (
                f"; did you mean {section}.options.{hint}?" if hint else f" (options: {', '.join(accepted) or 'none'})"
            )
            problems.append(f"{where}: unknown option of {cls.__name__}{more}")
    return problems


def pruning_supported(spec: SweepSpec) -> bool:
    """Optuna prunes single-objective studies only (no report/should_prune with several objectives)."""
    return not spec.multi_objective


@dataclass
class SamplerCheck:
    """What ``check_sampler_and_pruner`` found: problems (errors), warnings, and the trials the study can run."""

    problems: list[str]
    warnings: list[str]
    trials: int  # ``spec.trials``, capped at the number of grid points for the grid sampler


def check_sampler_and_pruner(spec: SweepSpec, space: SearchSpace) -> SamplerCheck:
    """Check the sampler and pruner of ``spec`` over ``space`` (builds both to check values); changes nothing."""
    src, name = spec.source, spec.sampler.name
    problems = _option_problems("sampler", SAMPLER_CLASSES[name], spec.sampler.options, src)
    problems += _option_problems("pruner", PRUNER_CLASSES[spec.pruner.name], spec.pruner.options, src)
    notes: list[str] = []
    trials = spec.trials

    if name == "grid":
        continuous = space.continuous_keys()
        conditional = [p.key for p in space.params if p.when]
        if continuous:
            problems.append(
                f"{src}: sampler.name: grid needs discrete dimensions, but search.{continuous[0]} is continuous "
                "(use choice(...) or range(...), or another sampler)"
            )
        elif conditional:
            problems.append(
                f"{src}: sampler.name: grid cannot sample conditional parameters (search.{conditional[0]} has when:); "
                "use random or tpe, or drop when:"
            )
        elif (space.grid_size() or 0) > MAX_GRID_POINTS:
            problems.append(
                f"{src}: sampler.name: grid over {space.grid_size():,} points is more than grid sampling can "
                f"enumerate ({MAX_GRID_POINTS:,}); use random or tpe, or fewer values"
            )
        else:
            n = len(space.grid_points() or [])
            if spec.trials > n:
                notes.append(
                    f"{src}: trials: {spec.trials} asked but the grid has {n} points; the study stops after {n}"
                )
                trials = n
    if name in SINGLE_OBJECTIVE_ONLY and spec.multi_objective:
        problems.append(
            f"{src}: sampler.name: {name} is single-objective only; "
            f"use nsga2, tpe or gp for {len(spec.objectives)} objectives"
        )
    if name == "cmaes":
        categorical = [
            p.key for p in space.params if isinstance(p.distribution, optuna.distributions.CategoricalDistribution)
        ]
        if categorical:
            notes.append(
                f"{src}: sampler.name: cmaes samples categorical parameters ({', '.join(categorical)}) "
                "independently at random"
            )
    if spec.multi_objective and spec.pruner.name != "none":
        notes.append(
            f"{src}: pruner.name: {spec.pruner.name} is ignored: Optuna cannot prune multi-objective studies "
            "(Trial.report/should_prune are single-objective), so every trial runs to its end"
        )
    for obj in spec.objectives:
        if obj.reduce == "max" and obj.direction == "minimize":
            notes.append(f"{src}: objective: {obj.metric} is minimized but reduced with max; did you mean reduce: min?")
        elif obj.reduce == "min" and obj.direction == "maximize":
            notes.append(f"{src}: objective: {obj.metric} is maximized but reduced with min; did you mean reduce: max?")

    if not problems:  # the option values themselves: let Optuna check them
        try:
            make_sampler(spec, space)
        except UserError as err:
            problems += err.problems
        try:
            make_pruner(spec, max_resource=spec.pruner.options.get("max_resource", "auto"))
        except UserError as err:
            problems += err.problems
    return SamplerCheck(problems, notes, trials)


def make_sampler(spec: SweepSpec, space: SearchSpace, seed: int | None = None) -> optuna.samplers.BaseSampler:
    """The Optuna sampler of ``spec`` (see the module doc for the defaults of each name); ``seed``, when
    given, replaces ``sampler.seed`` (the driver derives one per run: ``grpo.sweep.driver.sampler_seed``)."""
    name, src = spec.sampler.name, spec.source
    kwargs: dict[str, Any] = {"seed": spec.sampler.seed if seed is None else seed}
    if name == "tpe":
        kwargs |= {"multivariate": True, "constant_liar": spec.concurrency > 1, "group": space.has_conditionals}
    elif name == "grid":
        grid = space.grid_values()
        if grid is None or space.has_conditionals:
            raise UserError(f"{src}: sampler.name: grid needs a discrete, unconditional search space")
        kwargs["search_space"] = grid
    kwargs |= spec.sampler.options
    try:
        with warnings.catch_warnings():
            # multivariate/group/constant_liar are flagged experimental; using them is deliberate.
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            return SAMPLER_CLASSES[name](**kwargs)
    except (TypeError, ValueError) as err:
        raise UserError(f"{src}: sampler.options: {err}") from None


def make_pruner(spec: SweepSpec, max_resource: int | str | None = None) -> optuna.pruners.BasePruner:
    """The Optuna pruner of ``spec``; ``NopPruner`` for multi-objective studies.

    ``max_resource`` (hyperband) defaults to the base config's ``megatron_training.train_iters``,
    read by composing the base config with the spec's overrides.
    """
    name, warmup, src = spec.pruner.name, spec.pruner.warmup_steps, spec.source
    if name == "none" or not pruning_supported(spec):
        return optuna.pruners.NopPruner()
    kwargs: dict[str, Any] = {}
    if name == "median":
        kwargs = {"n_warmup_steps": warmup}
    elif name == "successive_halving":
        kwargs = {"min_resource": warmup if warmup > 0 else "auto"}
    elif name == "hyperband":
        if "max_resource" not in spec.pruner.options and max_resource is None:
            max_resource = _train_iters(spec)
        kwargs = {"min_resource": max(1, warmup)}
        if max_resource is not None:
            kwargs["max_resource"] = max_resource
    kwargs |= spec.pruner.options
    try:
        return PRUNER_CLASSES[name](**kwargs)
    except (TypeError, ValueError) as err:
        raise UserError(f"{src}: pruner.options: {err}") from None


def _train_iters(spec: SweepSpec) -> int:
    from grpo.config import load_config

    return int(load_config(spec.base, overrides=list(spec.overrides)).megatron_training.train_iters)
