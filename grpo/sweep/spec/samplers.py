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
import random
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import optuna

from grpo.errors import UserError, did_you_mean, first_line
from grpo.sweep.spec.models import SweepSpec
from grpo.sweep.spec.space import MAX_GRID_POINTS, SearchSpace


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
    if not problems and spec.pruner.name == "hyperband" and pruning_supported(spec):
        problems += _hyperband_problems(spec)
    if not problems:  # options that construct but break sampling or pruning: ask both once
        problems += probe_sampler_and_pruner(spec, space)
    notes += option_warnings(spec)  # Optuna's own warnings, as spec warnings naming the option
    return SamplerCheck(problems, notes, trials)


def _hyperband_problems(spec: SweepSpec) -> list[str]:
    """Hyperband whose first rung (``min_resource``) is past its last (``max_resource``) builds no bracket and
    silently prunes nothing."""
    options = spec.pruner.options
    low = options.get("min_resource", max(1, spec.pruner.warmup_steps))
    high = options.get("max_resource", "auto")
    if high == "auto":
        high = _train_iters(spec)
    if isinstance(low, int) and isinstance(high, int) and low > high:
        key = "pruner.options.min_resource" if "min_resource" in options else "pruner.warmup_steps"
        return [
            f"{spec.source}: {key}: hyperband's first rung ({low}) is past its last iteration ({high}); "
            "no trial would ever be pruned"
        ]
    return []


PROBE_STEPS = 3  # intermediate values each probe trial reports
_STARTUP_DEFAULTS = {"tpe": 10, "cmaes": 1, "nsga2": 50}  # trials before the sampler's own model runs
MAX_PROBE_HISTORY = 60


def _probe_history(spec: SweepSpec) -> int:
    """How many finished trials the probe study holds before the sampler is asked: enough for the sampler
    to leave its random start-up (GP's model needs torch and is left out: it is asked on an empty study)."""
    name, options = spec.sampler.name, spec.sampler.options
    startup = options.get("population_size" if name == "nsga2" else "n_startup_trials", _STARTUP_DEFAULTS.get(name, 0))
    if not isinstance(startup, int) or isinstance(startup, bool):
        startup = _STARTUP_DEFAULTS.get(name, 0)
    return max(0, min(startup + 1, MAX_PROBE_HISTORY)) if name in _STARTUP_DEFAULTS else 0


def probe_sampler_and_pruner(spec: SweepSpec, space: SearchSpace) -> list[str]:
    """Ask the spec's sampler for one point and its pruner for one decision, on a throwaway in-memory study
    that already holds finished trials (random points with random values and curves): option values that
    construct but fail when used (a word where a number goes, a negative sigma, an ``x0`` naming no
    parameter, a hyperband whose warm-up passes the last iteration) are found here, not in the first trial.
    Returns the problems, one line each; writes nothing. A sampler that fails is probed again without each
    of its options in turn, so the line names the option at fault (``sampler.options.gamma``)."""
    problems = _probe(spec, space)
    if problems and problems[0].startswith(f"{spec.source}: sampler.options: "):
        for key in spec.sampler.options:
            options = {k: v for k, v in spec.sampler.options.items() if k != key}
            without = spec.model_copy(update={"sampler": spec.sampler.model_copy(update={"options": options})})
            if not _probe(without, space):
                prefix = f"{spec.source}: sampler.options"
                return [prefix + f".{key}" + problems[0][len(prefix) :]]
    return problems


def _probe(spec: SweepSpec, space: SearchSpace) -> list[str]:
    """``probe_sampler_and_pruner`` for the spec as it is."""
    src = spec.source
    try:
        sampler = make_sampler(spec, space)
        pruner = make_pruner(spec)
    except UserError as err:
        return err.problems
    rng = random.Random(0)
    multi = spec.multi_objective

    def values() -> float | list[float]:
        return [rng.random() for _ in spec.objectives] if multi else rng.random()

    def one_line(err: Exception) -> str:
        return first_line(err, 200, typed=True)

    level = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            directions = [optuna.study.StudyDirection[d.upper()] for d in spec.directions]
            study = optuna.create_study(directions=directions, sampler=optuna.samplers.RandomSampler(seed=0))
            for _ in range(_probe_history(spec)):
                trial = study.ask()
                space.suggest(trial)
                for step in range(PROBE_STEPS if not multi else 0):
                    trial.report(rng.random(), step)
                study.tell(trial, values())
            study.sampler, study.pruner = sampler, pruner
            try:
                trial = study.ask()
                space.suggest(trial)
            except Exception as err:  # whatever the sampler raises is the options' fault
                return [f"{src}: sampler.options: {spec.sampler.name} fails when asked for a point ({one_line(err)})"]
            try:
                for step in range(PROBE_STEPS if not multi else 0):
                    trial.report(rng.random(), step)
                    trial.should_prune()
            except Exception as err:
                return [f"{src}: pruner: {spec.pruner.name} fails when asked to prune ({one_line(err)})"]
            try:
                study.tell(trial, values())
            except Exception as err:
                return [f"{src}: sampler.options: {spec.sampler.name} fails after a trial ({one_line(err)})"]
    finally:
        optuna.logging.set_verbosity(level)
    return []


def make_sampler(spec: SweepSpec, space: SearchSpace, seed: int | None = None) -> optuna.samplers.BaseSampler:
    """The Optuna sampler of ``spec`` (see the module doc for the defaults of each name); ``seed``, when
    given, replaces ``sampler.seed`` (the driver derives one per run: ``grpo.sweep.run.driver.sampler_seed``)."""
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
            # multivariate/group/constant_liar are flagged experimental (deliberate); a deprecated option is
            # said once, by option_warnings at load, never as a stray library line.
            warnings.simplefilter("ignore")
            return SAMPLER_CLASSES[name](**kwargs)
    except (TypeError, ValueError) as err:
        raise UserError(f"{src}: sampler.options: {err}") from None


def make_pruner(spec: SweepSpec, max_resource: int | str | None = None) -> optuna.pruners.BasePruner:
    """The Optuna pruner of ``spec``; ``NopPruner`` for multi-objective studies.

    ``max_resource`` (hyperband) defaults to the base config's ``megatron_training.train_iters``,
    read by composing the base config with the spec's overrides.
    """
    name, warmup, src = spec.pruner.name, spec.pruner.warmup_steps, spec.source
    if not pruning_supported(spec):
        return optuna.pruners.NopPruner()
    if name == "none":
        return _patient(spec, None) if spec.pruner.patience is not None else optuna.pruners.NopPruner()
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
        with warnings.catch_warnings():  # said by option_warnings at load
            warnings.simplefilter("ignore")
            return _patient(spec, PRUNER_CLASSES[name](**kwargs))
    except (TypeError, ValueError) as err:
        raise UserError(f"{src}: pruner.options: {err}") from None


def _patient(spec: SweepSpec, pruner: optuna.pruners.BasePruner | None) -> optuna.pruners.BasePruner:
    """``pruner`` wrapped in ``PatientPruner`` when ``pruner.patience`` is set: it may prune only after
    ``patience`` reported steps without improvement (``min_delta``); with ``name: none``, that alone prunes."""
    patience = spec.pruner.patience
    if patience is None:
        assert pruner is not None
        return pruner
    with warnings.catch_warnings():  # ExperimentalWarning: chosen deliberately (docs/sweep_spec.md says so)
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return optuna.pruners.PatientPruner(pruner, patience=patience, min_delta=spec.pruner.min_delta or 0.0)


def _train_iters(spec: SweepSpec) -> int:
    from grpo.config import load_config

    return int(load_config(spec.base, overrides=list(spec.overrides)).megatron_training.train_iters)


def option_warnings(spec: SweepSpec) -> list[str]:
    """The warnings Optuna raises for the spec's own sampler and pruner options (a deprecated ``gamma``, an
    experimental option), one line each naming the option: what would otherwise reach the terminal as
    library lines. Builds both classes with the options alone; an error there is the checks' business."""
    lines: list[str] = []
    for section, cls, options in (
        ("sampler", SAMPLER_CLASSES[spec.sampler.name], spec.sampler.options),
        ("pruner", PRUNER_CLASSES[spec.pruner.name], spec.pruner.options),
    ):
        if not options:
            continue
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                cls(**options)
            except Exception:  # refused options are reported by the checks above
                continue
        for warning in caught:
            text = first_line(str(warning.message))
            named = [o for o in options if f"`{o}`" in text or f"'{o}'" in text or text.startswith(f"{o} ")]
            where = f"{section}.options.{named[0]}" if named else f"{section}.options"
            line = f"{spec.source}: {where}: {text}"
            if line not in lines:
                lines.append(line)
    return lines
