"""What a finished trial means: a pure decision from what the worker returned and what the driver saw.

``decide`` turns the worker's result (or its death), the reason the driver asked it to stop (if it did)
and the objective values computed from the streamed curves into one of four outcomes; the driver then
records it in the study. Nothing here touches Optuna, Ray or files, so every branch is tested directly
(tests/test_sweep_outcome.py).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Complete:
    """The trial ran to its end: one value per objective (the mean over seeds), the seeds' values, their spread."""

    values: list[float]
    per_seed: list[list[float]]
    spreads: list[float]


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


def decide(
    *,
    worker_error: str | None,
    result: dict[str, Any],
    stop_reason: str | None,
    timeout_s: float | None,
    objectives: Sequence[str],
    seed_values: Sequence[Sequence[float | None]],
    reported: Sequence[str],
    log_lines: list[str],
) -> Outcome:
    """The outcome of a finished trial.

    ``worker_error``: why the worker process died (None when it returned ``result``); ``stop_reason``:
    why the driver asked the trial to stop (``pruned``, ``timeout``, ``interrupted``), if it did;
    ``seed_values[i][k]``: objective ``i`` reduced over seed ``k``'s curve (None: never reported);
    ``reported``: the metric names the trial did report (for the message when an objective is missing).
    """
    if worker_error is not None:
        if stop_reason == "timeout":
            return Failed(f"timeout after {timeout_s} s (killed)", log_lines)
        if stop_reason == "interrupted":  # a second Ctrl-C (or SIGTERM) killed it: not the trial's fault
            return Interrupted(log_lines=log_lines)
        return Failed(worker_error, log_lines)
    status = result.get("status")
    if status == "failed":
        return Failed(str(result.get("reason") or "failed"), list(result.get("last_log_lines") or log_lines))
    if status == "stopped" or stop_reason:
        why = result.get("stop_reason") or stop_reason
        if why == "pruned":
            return Pruned()
        if why == "timeout":
            return Failed(f"timeout after {timeout_s} s", log_lines)
        return Interrupted(log_lines=log_lines)
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
    return Complete(means, per_seed, spreads)
