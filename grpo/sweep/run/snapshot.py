"""What the driver shows: the live view's snapshot of a running study, the lines it prints, what it returns.

The view (grpo.sweep.commands.progress) reads a ``ProgressSnapshot``, never the driver itself.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import optuna

TrialFinished = Callable[[optuna.Study], None]


@dataclass(frozen=True)
class RunningTrial:
    number: int
    params: dict[str, Any]
    seeds: int  # seeds running in parallel
    iteration: int  # the step every seed has reached
    objective_so_far: float | None  # mean over seeds of the objective up to that step
    confirmation_of: int | None = None
    iterations: int = 0  # the iterations it runs (train_iters); 0: unknown
    elapsed_s: float = 0.0  # since its seeds were submitted

    def left_s(self, mean_wall_s: float) -> float:
        """Seconds it still needs: its own pace once it has done an iteration, else a finished trial's mean."""
        if self.iteration > 0 and self.iterations > 0 and self.elapsed_s > 0:
            return max(0.0, self.elapsed_s * (self.iterations - self.iteration) / self.iteration)
        return max(0.0, mean_wall_s - self.elapsed_s)


@dataclass(frozen=True)
class ProgressSnapshot:
    """What the live view shows, read from the driver at one moment (the view never reaches into it)."""

    counted: int  # trials that count toward the budget
    running: list[RunningTrial]
    best: tuple[int, float] | None  # (number, value); None before the first complete trial or multi-objective
    total: int = 0  # the budget (spec.trials)
    done: dict[str, int] = field(default_factory=dict)  # counted trials by state: complete, pruned, fail
    mean_wall_s: float | None = None  # mean wall time of the finished trials; None before the first one
    to_start: int = 0  # trials not started yet: the budget left, those waiting for room, confirmations to come
    concurrency: int = 1

    @property
    def eta_s(self) -> float | None:
        """Seconds until the study ends; None until a trial has finished (nothing to estimate from).

        Running trials need what their pace says; each trial still to start a finished trial's mean wall
        time; the work is shared by ``concurrency`` slots, and the study lasts at least as long as its
        slowest running trial."""
        if self.mean_wall_s is None:
            return None
        left = [t.left_s(self.mean_wall_s) for t in self.running]
        work = sum(left) + self.to_start * self.mean_wall_s
        return max(max(left, default=0.0), work / max(1, self.concurrency))


class Progress(Protocol):
    def due(self) -> bool: ...
    def update(self, snapshot: ProgressSnapshot) -> None: ...
    def log(self, message: str) -> None: ...


@dataclass(frozen=True)
class StudyRun:
    """What ``run_study`` leaves: the study, and whether a Ctrl-C or SIGTERM cut it short."""

    study: optuna.Study
    interrupted: bool


class Messages:
    """The driver's lines: in the live view when there is one, else printed (``say`` not with ``quiet``)."""

    def __init__(self, progress: Progress | None, quiet: bool) -> None:
        self.progress, self.quiet = progress, quiet

    def say(self, message: str) -> None:
        if self.progress is not None:
            self.progress.log(message)
        elif not self.quiet:
            print(message, flush=True)

    def warn(self, message: str) -> None:
        """A warning line: in the live view, else on stderr (also with ``--quiet``)."""
        if self.progress is not None:
            self.progress.log(f"warning: {message}")
        else:
            print(f"warning: {message}", file=sys.stderr, flush=True)
