"""Checks before anything runs: the base config, the search space's feasible points, per-trial problems.

A spec whose every point breaks a config rule, or that the backend cannot run, is refused up front
(UserError, exit 2); single infeasible points are pruned at sampling time with the reason (see the
trial builder).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import optuna

from grpo.config import GRPOConfig, load_config
from grpo.config.inert import lint_points
from grpo.config.schedule import SCHEDULABLE
from grpo.engine.check import own_run_checks
from grpo.errors import UserError
from grpo.sweep.backends import TrialBackend
from grpo.sweep.run.pbt import explored_keys
from grpo.sweep.spec.models import SweepSpec
from grpo.sweep.spec.space import SearchSpace
from grpo.sweep.study.store import check_storage
from grpo.sweep.study.transfer import TransferPoint, transfer_points

MAX_POINTS_CHECKED = 64


def trial_problems(spec: SweepSpec, cfg: GRPOConfig, backend: TrialBackend, *, no_plan: bool) -> list[str]:
    """Problems that keep one trial config from launching: the backend's and the memory planner's."""
    problems = list(backend.check(cfg))
    if backend.plans_memory and spec.plan.enabled and not no_plan:
        from grpo.plan import estimate

        est = estimate(cfg, spec.plan.device_memory_gb)
        if not est.feasible:
            problems.append(f"layout does not fit in {spec.plan.device_memory_gb:g} GB per NPU: {est.reason}")
    return problems


def sample_points(space: SearchSpace, limit: int = MAX_POINTS_CHECKED) -> list[dict[str, Any]]:
    """Up to ``limit`` points of the space: the whole grid when small, random points otherwise."""
    grid = space.grid_points()
    if grid is not None and len(grid) <= limit:
        return grid
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    points = []
    for _ in range(limit):
        trial = study.ask()
        points.append(space.suggest(trial))
        study.tell(trial, state=optuna.trial.TrialState.PRUNED)
    return points


def check_point(
    spec: SweepSpec, space: SearchSpace, backend: TrialBackend, params: dict[str, Any], *, no_plan: bool
) -> list[str]:
    """Every reason the point ``params`` cannot run ([] when it can)."""
    return _check_point(spec, space, backend, params, no_plan=no_plan)[0]


def _check_point(
    spec: SweepSpec, space: SearchSpace, backend: TrialBackend, params: dict[str, Any], *, no_plan: bool
) -> tuple[list[str], GRPOConfig | None]:
    try:
        cfg = load_config(spec.base, [*spec.overrides, *space.to_overrides(params)])
    except UserError as err:
        return err.problems, None
    return trial_problems(spec, cfg, backend, no_plan=no_plan), cfg


def launch_warnings(backend: TrialBackend, configs: list[GRPOConfig]) -> list[str]:
    """The backend's ``launch_warnings`` for ``configs``, each line once, in order of first appearance."""
    return list(dict.fromkeys(line for cfg in configs for line in backend.launch_warnings(cfg)))


@dataclass
class Preflight:
    base_cfg: GRPOConfig  # the base config with the spec's fixed overrides
    checked: list[tuple[dict[str, Any], list[str]]]  # (point, its problems) for each point checked
    # What this machine lacks to launch trials (the backend's launch_warnings): not errors, since trials
    # may launch elsewhere; the backend refuses them on a node that lacks them.
    warnings: list[str] = field(default_factory=list)
    # Searched keys their own configs keep from changing training (grpo.config.inert), also in ``warnings``.
    inert: list[str] = field(default_factory=list)
    # The source study's best configurations that ``transfer`` enqueues (read from it, read-only).
    transfer: list[TransferPoint] = field(default_factory=list)
    # The user's own data and reward functions as read (format, first record, what each function returned).
    notes: list[str] = field(default_factory=list)
    # The configs of the feasible points checked (validate shows the ranges the search spans).
    configs: list[GRPOConfig] = field(default_factory=list)


def preflight(
    spec: SweepSpec,
    space: SearchSpace,
    backend: TrialBackend,
    *,
    no_plan: bool,
    check_all: bool = False,
) -> Preflight:
    """Raise UserError when the base config is broken, no checked point of the space is feasible, or the
    study's storage cannot be opened (``check_storage``: nothing is created).

    A run stops at the first feasible point (``check_all=False``): the rest are checked as they are
    sampled; ``validate`` checks them all to show them. What this machine lacks to launch the checked
    configs (``TrialBackend.launch_warnings``) is returned in ``warnings`` for the caller to show.
    """
    base_cfg = load_config(spec.base, list(spec.overrides))  # the base itself must be valid
    # The user's dataset and reward functions (issue 41): read, imported in a child and tried on a few records.
    own, notes = own_run_checks(
        base_cfg, spec.path.parent if spec.path else None, data_here=backend.reads_data_here, source=spec.source
    )
    if own:
        raise UserError(own[0], own)
    searched = backend.check_search(space.keys, spec.source)  # a key the backend would not vary
    searched += metric_problems(spec, backend)  # a metric its trials never report: no value, no pruning
    if searched:
        raise UserError(searched[0], searched)
    branching = branch_problems(spec, space, backend, base_cfg)
    if branching.problems:
        raise UserError(branching.problems[0], branching.problems)
    promoted = promotion_problems(spec, backend, no_plan=no_plan)
    if promoted:
        raise UserError(promoted[0], promoted)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    checked: list[tuple[dict[str, Any], list[str]]] = []
    configs = [base_cfg]
    for params in sample_points(space):
        problems, cfg = _check_point(spec, space, backend, params, no_plan=no_plan)
        checked.append((params, problems))
        if cfg is not None and not problems:
            configs.append(cfg)
        if not checked[-1][1] and not check_all:
            break
    warnings = launch_warnings(backend, configs)
    inert = lint_points(configs[1:] or configs, space.keys)
    if checked and all(problems for _, problems in checked):
        # Lines every point shares do not depend on the point (a backend package missing here, a fixed override
        # the backend cannot run): they alone, not a "no feasible point" in front of the reason.
        shared = [line for line in checked[0][1] if all(line in problems for _, problems in checked[1:])]
        if shared and len(checked) > 1:
            raise UserError(shared[0], shared)
        first = sorted({line for _, problems in checked for line in problems})
        raise UserError(
            f"{spec.path}: search: no point of the search space is feasible ({len(checked)} checked); e.g. {first[0]}",
            [f"{spec.path}: search: no point of the search space is feasible ({len(checked)} checked)", *first[:10]],
        )
    check_storage(spec)  # what opening the study would find (a folder in its place, no driver, no answer)
    transferred = transfer_points(spec, space)  # a missing or unusable source study is one line
    warnings += branching.warnings
    lines = warnings + [f"{spec.source}: {line}" for line in inert]
    return Preflight(base_cfg, checked, lines, inert, transferred, notes, configs[1:])


def metric_problems(spec: SweepSpec, backend: TrialBackend) -> list[str]:
    """The spec's objective and collapse metrics the backend says its trials never report, one line each."""
    named = [("objective", o.metric) for o in spec.objectives]
    collapse = spec.pruner.collapse
    if collapse is not None and collapse.below_base is not None:
        named.append(("pruner.collapse.metric", collapse.metric))
    out = []
    for key, metric in named:
        reason = backend.unreported_metric(metric)
        if reason:
            out.append(f"{spec.source}: {key}: {metric}: {reason}")
    return out


@dataclass
class Branching:
    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def branch_problems(spec: SweepSpec, space: SearchSpace, backend: TrialBackend, base_cfg: GRPOConfig) -> Branching:
    """What keeps a pbt spec from running (its population branches every ``interval`` iterations of a run of
    the base config's ``train_iters``), and what it would explore (a warning when nothing)."""
    out = Branching()
    if spec.scheduler is None:
        return out
    where, interval = f"{spec.source}: scheduler.interval", spec.scheduler.interval
    train_iters = base_cfg.megatron_training.train_iters
    if "megatron_training.train_iters" in space.keys:
        out.problems.append(
            f"{spec.source}: search.megatron_training.train_iters: a pbt population trains one length, not searched"
        )
    elif interval >= train_iters:
        out.problems.append(
            f"{where}: {interval} is not shorter than megatron_training.train_iters ({train_iters}): "
            "nothing would branch"
        )
    out.problems += [f"{spec.source}: scheduler: {line}" for line in backend.branch_problems(base_cfg)]
    if not explored_keys(space.keys):
        out.warnings.append(
            f"{spec.source}: scheduler: no searched key can change during a run (schedulable: "
            f"{', '.join(sorted(SCHEDULABLE))}): branches copy the top members and explore nothing"
        )
    return out


def promotion_problems(spec: SweepSpec, backend: TrialBackend, *, no_plan: bool) -> list[str]:
    """``confirm.base`` (with ``confirm.overrides``) must compose and be a config the backend can run: the
    confirmation stage would otherwise fail hours into the study."""
    confirm = spec.confirm
    if confirm is None or confirm.base is None:
        return []
    where = f"{spec.source}: confirm.base: {confirm.base}"
    try:
        cfg = load_config(confirm.base, list(confirm.overrides))
    except UserError as err:
        return [f"{where}: {line}" for line in err.problems]
    return [f"{where}: {line}" for line in trial_problems(spec, cfg, backend, no_plan=no_plan)]
