"""Stoppers: each looks at a running trial and returns a decision (stop it, and why) or None; the driver
acts on the decision. The way Ray Tune's schedulers answer CONTINUE or STOP from ``on_trial_result``.

On the learning curve (after each step every seed reached): the collapse rule (``pruner.collapse``: held-out
below its base, then the training-dynamics rules), the curve-aware stopper (``pruner.curve``), then the
Optuna pruner (wrapped in ``PatientPruner`` with ``pruner.patience``). On the clock: the trial's time limit
(``timeout_per_trial``), then a kill when its seeds ignore the stop for ``TIMEOUT_KILL_GRACE_S``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from grpo.sweep.execution.seed_result import StopReason
from grpo.sweep.run.collapse import DYNAMICS_METRICS, collapse_reason, dynamics_reason, mean_curve, uses_dynamics
from grpo.sweep.run.curve_stop import curve_decision, incumbent_of
from grpo.sweep.run.live import LiveTrial
from grpo.sweep.spec.models import SweepSpec

TIMEOUT_KILL_GRACE_S = 30.0


@dataclass(frozen=True)
class Stop:
    """Stop the trial's seeds for ``reason``; ``note`` is what the study records (where, at what value)."""

    reason: StopReason
    note: str | None = None


@dataclass(frozen=True)
class Kill:
    """The seeds ignored the stop: kill their workers now."""


def _of_seeds(live: LiveTrial) -> str:
    seeds = len(live.plan.jobs)
    return f", mean of {seeds} seeds" if seeds > 1 else ""


def collapse_stopper(spec: SweepSpec, live: LiveTrial) -> Stop | None:
    """The collapse rule (``pruner.collapse``) stops the trial now."""
    rule = spec.pruner.collapse
    if rule is None:
        return None
    step, iters = live.common_step(), live.plan.train_iters
    reason = collapse_reason(rule, _seed_curves(live, rule.metric), step, iters)
    if reason is None and uses_dynamics(rule):
        reason = dynamics_reason(rule, {m: _seed_curves(live, m) for m in DYNAMICS_METRICS}, step, iters)
    return Stop(StopReason.PRUNED, reason + _of_seeds(live)) if reason is not None else None


def _seed_curves(live: LiveTrial, metric: str) -> list[list[tuple[int, float]]]:
    return [live.curves.get(run.seed, {}).get(metric) or [] for run in live.plan.runs]


def curve_stopper(spec: SweepSpec, live: LiveTrial) -> Stop | None:
    """The curve-aware stopper (``pruner.curve``): the fitted curve cannot catch the best finished trial."""
    rule = spec.pruner.curve
    if rule is None:
        return None
    objective = spec.objectives[0]
    curve = _mean_over_seeds(live, objective.metric)
    if len(curve) < rule.min_points + 1:  # before reading the study: the common case, and cheap
        return None
    maximize = objective.direction == "maximize"
    reduce = None if objective.reduce in ("last", "final_fit") else objective.reducer()
    decision = curve_decision(
        curve, live.plan.train_iters, incumbent_of(live.trial.study, maximize), rule, maximize, reduce
    )
    return Stop(StopReason.PRUNED, decision.reason + _of_seeds(live)) if decision.reason is not None else None


def _mean_over_seeds(live: LiveTrial, metric: str) -> list[tuple[int, float]]:
    return mean_curve(_seed_curves(live, metric), live.common_step())


def pruner_stopper(spec: SweepSpec, live: LiveTrial) -> Stop | None:
    """Optuna's pruner, on the intermediate values reported so far."""
    if not live.trial.should_prune() or live.last_report is None:
        return None
    objective = spec.objectives[0]
    step, value = live.last_report
    name, patience = spec.pruner.name, spec.pruner.patience
    pruner = (
        f"{name} pruner"
        if patience is None
        else f"{'patient' if name == 'none' else name} pruner (patience {patience})"
    )
    note = (
        f"pruned by the {pruner} at iteration {step} of {live.plan.train_iters}: "
        f"{objective.metric} ({objective.reduce}) so far {value:.4g}" + _of_seeds(live)
    )
    return Stop(StopReason.PRUNED, note)


CURVE_STOPPERS: Sequence[Callable[[SweepSpec, LiveTrial], Stop | None]] = (
    collapse_stopper,
    curve_stopper,
    pruner_stopper,
)


def curve_stop(spec: SweepSpec, live: LiveTrial, pruning: bool) -> Stop | None:
    """The first curve stopper's decision, for a trial that may be pruned now: a search trial (confirmation
    trials exist to measure the winner) that is not stopping already and has steps left (one that ran all
    its iterations completes; it is never pruned at its last step)."""
    if not pruning or live.stop_reason is not None or live.confirmation_of is not None:
        return None
    if live.common_step() >= live.plan.train_iters or live.last_report is None:
        return None
    for stopper in CURVE_STOPPERS:
        decision = stopper(spec, live)
        if decision is not None:
            return decision
    return None


def timeout_stop(
    live: LiveTrial, limit: float, started: list[float], stop_sent: list[float], now: float
) -> Stop | Kill | None:
    """The time limit: ``started`` are its running seeds' start times, ``stop_sent`` when each was asked to
    stop (monotonic clock)."""
    if not started or now - min(started) <= limit:
        return None
    if live.stop_reason not in (StopReason.TIMEOUT, StopReason.FAILED):  # a failed seed's siblings stop already
        return Stop(StopReason.TIMEOUT)
    if now - min(stop_sent, default=now) > min(TIMEOUT_KILL_GRACE_S, limit):
        return Kill()
    return None
