"""What a finished trial means: a pure decision from what its seed jobs returned and what the driver saw.

A trial runs its seeds as parallel jobs. ``trial_outcome`` turns each seed's result (or its worker's death),
the reason the driver asked the trial to stop (if it did) and the objective values computed from the
streamed curves into one of four outcomes; the driver then records it in the study. Nothing here
touches Optuna, Ray or files, so every branch is tested directly (tests/test_sweep_outcome.py).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field

from grpo.report.stats import mean_interval
from grpo.sweep.execution.seed_result import SeedResult, SeedStatus, StopReason


@dataclass(frozen=True)
class SeedEnd:
    """How one seed job ended: ``result`` is what its worker returned (empty when ``worker_error``: the
    worker process died)."""

    seed: int
    worker_error: str | None
    result: SeedResult


@dataclass(frozen=True)
class Complete:
    """The trial ran to its end: one value per objective (the mean over seeds), the seeds' values, their
    spread (population standard deviation) and a 95 % bootstrap interval of the mean ([low, high], None
    for one seed)."""

    values: list[float]
    per_seed: list[list[float]]
    spreads: list[float]
    intervals: list[list[float] | None] = field(default_factory=list)


@dataclass(frozen=True)
class Pruned:
    """Stopped by the pruner on its learning curve."""

    reason: str = "pruned by the pruner on its learning curve"


@dataclass(frozen=True)
class Failed:
    """Failed for ``reason``; it uses one of the trial's attempts."""

    reason: str
    log_lines: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Interrupted:
    """Stopped for a reason that is not the trial's fault (Ctrl-C, the driver going away): resumes, no attempt used."""

    reason: str = "interrupted (Ctrl-C); resumes on the next run"
    log_lines: list[str] = field(default_factory=list)


Outcome = Complete | Pruned | Failed | Interrupted


def trial_outcome(
    *,
    seeds: Sequence[SeedEnd],
    stop_reason: StopReason | None,
    timeout_s: float | None,
    objectives: Sequence[str],
    seed_values: Sequence[Sequence[float | None]],
    reported: Sequence[str],
    log_lines: list[str],
) -> Outcome:
    """The outcome of a finished trial.

    ``seeds``: how each seed job ended, in the order they finished; ``stop_reason``: why the driver asked
    the trial's seeds to stop (``pruned``, ``timeout``, ``interrupted``, ``failed`` when a sibling seed
    failed), if it did; ``seed_values[i][k]``: objective ``i`` reduced over seed ``k``'s curve (None:
    never reported); ``reported``: the metric names the trial did report (for the message when an
    objective is missing).

    A seed that failed fails the trial, the first to fail naming the reason (its siblings were only
    stopped because of it); then an interruption (the trial resumes), then the pruner's stop.
    """
    ends = [seed_outcome(s, stop_reason, timeout_s, log_lines) for s in seeds]
    failed = [(s, o) for s, o in zip(seeds, ends, strict=True) if isinstance(o, Failed)]
    if failed:
        seed, first = failed[0]
        timed_out = stop_reason == StopReason.TIMEOUT and seed.result.get("status") != SeedStatus.FAILED
        if timed_out or len(seeds) == 1:  # the trial's own time limit: no one seed to blame
            return first
        return Failed(f"seed {seed.seed}: {first.reason}", first.log_lines)
    for end in ends:
        if isinstance(end, Interrupted):
            return end
    if any(isinstance(end, Pruned) for end in ends):
        return Pruned()
    per_seed: list[list[float]] = []
    for metric, values in zip(objectives, seed_values, strict=True):
        known = [v for v in values if v is not None]
        if len(known) < len(values) or not values:
            shown = ", ".join(sorted(reported)[:12])
            return Failed(f"objective metric {metric!r} was never reported; reported: {shown}", log_lines)
        if not all(math.isfinite(v) for v in known):
            return Failed(f"objective {metric} is not finite: {known}", log_lines)
        per_seed.append(known)
    means = [statistics.fmean(v) for v in per_seed]
    spreads = [statistics.pstdev(v) if len(v) > 1 else 0.0 for v in per_seed]
    return Complete(means, per_seed, spreads, [interval(v) for v in per_seed])


def seed_outcome(
    end: SeedEnd, stop_reason: StopReason | None, timeout_s: float | None, log_lines: list[str]
) -> Outcome | None:
    """What one seed's end says on its own: Failed, Pruned, Interrupted, or None (it ran to its end)."""
    if end.worker_error is not None:
        if stop_reason == StopReason.TIMEOUT:
            return Failed(f"timeout after {timeout_s} s (killed)", log_lines)
        if stop_reason == StopReason.INTERRUPTED:  # a second Ctrl-C (or SIGTERM) killed it: not the trial's fault
            return Interrupted(log_lines=log_lines)
        return Failed(end.worker_error, log_lines)
    result = end.result
    status = result.get("status")
    if status == SeedStatus.FAILED:
        return Failed(str(result.get("reason") or "failed"), list(result.get("last_log_lines") or log_lines))
    if status == SeedStatus.STOPPED or stop_reason:
        why = result.get("stop_reason") or stop_reason
        if why == StopReason.PRUNED:
            return Pruned()
        if why == StopReason.TIMEOUT:
            return Failed(f"timeout after {timeout_s} s", log_lines)
        return Interrupted(log_lines=log_lines)
    return None


def interval(values: Sequence[float]) -> list[float] | None:
    """The 95 % percentile-bootstrap interval of the mean of ``values`` as [low, high]; None for one value."""
    found = mean_interval(values)
    if found.low is None or found.high is None:
        return None
    return [found.low, found.high]
