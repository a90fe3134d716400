"""A trial this driver runs: its Optuna handle, its seed jobs and the curves streamed back so far.

``LiveTrial`` owns what the driver knows of a running trial's curves: it appends each metric event to the
trial's ``metrics.jsonl``, reduces each seed's curve to the objective (``Objectives``) and reports the mean
over seeds to Optuna at the step every seed has reached.
"""

from __future__ import annotations

import json
import math
import statistics
from bisect import bisect_right
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import optuna

from grpo._fs import tail_lines
from grpo.sweep.execution.scheduler import JobKey
from grpo.sweep.execution.seed_result import SeedResult, SeedStatus, StopReason
from grpo.sweep.execution.trial_storage import stored_tail
from grpo.sweep.run.outcome import SeedEnd
from grpo.sweep.run.trial_builder import TrialPlan
from grpo.sweep.spec.models import SweepSpec
from grpo.sweep.spec.objectives import CurveReducer


@dataclass(frozen=True)
class Objectives:
    """The spec's objectives as the driver scores curves: each one's metric and curve reducer."""

    metrics: list[str]
    reducers: list[CurveReducer]

    @classmethod
    def of(cls, spec: SweepSpec) -> Objectives:
        return cls([o.metric for o in spec.objectives], [o.reducer() for o in spec.objectives])


@dataclass
class LiveTrial:
    """A trial this driver runs: its Optuna handle, its seed jobs and the curves streamed back so far."""

    trial: optuna.Trial
    number: int
    params: dict[str, Any]
    trial_dir: Path
    plan: TrialPlan
    started_wall: float
    confirmation_of: int | None = None  # the search trial it reruns on fresh seeds (never pruned)
    curves: dict[int, dict[str, list[tuple[int, float]]]] = field(default_factory=dict)  # seed -> metric -> points
    last_iteration: dict[int, int] = field(default_factory=dict)  # seed -> iteration
    running: set[int] = field(default_factory=set)  # indices of the seed jobs still running
    ends: list[SeedEnd] = field(default_factory=list)  # the seed jobs that ended, in the order they did
    results: dict[int, tuple[float, SeedResult]] = field(default_factory=dict)  # index -> (end time, result)
    stop_reason: StopReason | None = None
    pruned_note: str | None = None  # where and at what value the pruner stopped it
    stepped: int = 0  # the common step the intermediate values have been reported up to
    last_report: tuple[int, float] | None = None  # (step, value) of the last intermediate value reported
    passed_over: int = 0  # trials asked after it that started first while it waited for room (backfill)

    def job_keys(self) -> list[JobKey]:
        """The scheduler keys of the seed jobs still running."""
        return [(self.number, index) for index in sorted(self.running)]

    def common_step(self) -> int:
        """The furthest iteration every seed has reached (a seed that ended keeps its last one)."""
        return min(self.last_iteration.get(run.seed, 0) for run in self.plan.runs)

    def record(self, seed: int, iteration: int, metrics: dict[str, Any]) -> None:
        """One metric event: kept in the curves and appended to the trial's ``metrics.jsonl``."""
        if iteration <= self.last_iteration.get(seed, -1):  # -1: iteration 0 is the base policy's evaluation
            return  # already have it (a resumed run re-reporting, or a duplicate)
        self.last_iteration[seed] = iteration
        curves = self.curves.setdefault(seed, {})
        for name, value in metrics.items():
            if isinstance(value, (int, float)):
                curves.setdefault(name, []).append((iteration, float(value)))
        with open(self.trial_dir / "metrics.jsonl", "a") as fh:
            fh.write(json.dumps({"iteration": iteration, "seed": seed, **metrics}) + "\n")

    def seed_value(self, objectives: Objectives, seed: int, index: int, upto: int | None = None) -> float | None:
        """Objective ``index`` reduced over one seed's curve (up to iteration ``upto`` when given)."""
        points = self.curves.get(seed, {}).get(objectives.metrics[index])
        if points and upto is not None:
            points = points[: bisect_right(points, upto, key=lambda p: p[0])]  # iterations ascend
        if not points or [t for t, _ in points] == [0]:  # iteration 0 alone: the base policy, nothing achieved
            return None
        return objectives.reducers[index].reduce_curve(points, self.plan.train_iters)

    def seed_values(self, objectives: Objectives) -> list[list[float | None]]:
        """``[i][k]``: objective ``i`` reduced over seed ``k``'s whole curve (None: never reported)."""
        runs = self.plan.runs
        return [[self.seed_value(objectives, r.seed, i) for r in runs] for i in range(len(objectives.metrics))]

    def objective_so_far(self, objectives: Objectives, index: int, upto: int) -> float | None:
        """The mean over seeds of objective ``index`` reduced over each seed's curve up to ``upto``."""
        values = [self.seed_value(objectives, run.seed, index, upto) for run in self.plan.runs]
        known = [v for v in values if v is not None]
        return statistics.fmean(known) if known and len(known) == len(values) else None

    def report_progress(self, objectives: Objectives, pruning: bool) -> bool:
        """Report the mean over seeds at each step every seed has now reached; True when the step moved.

        Seeds run in parallel and drift apart: the pruner sees a step only once the slowest seed is
        there, so each intermediate value averages the same iterations of every seed.
        """
        step = self.common_step()
        if step <= self.stepped:
            return False
        if pruning:
            for t in range(self.stepped + 1, step + 1):
                value = self.objective_so_far(objectives, 0, t)
                if value is not None and math.isfinite(value):
                    self.trial.report(value, step=t)
                    self.last_report = (t, value)
        self.stepped = step
        return True

    def log_tail(self, n: int = 20) -> list[str]:
        """The last log lines of the seed that failed first, else of the last seed run that wrote any."""
        failed = [
            e.seed for e in self.ends if e.worker_error is not None or e.result.get("status") == SeedStatus.FAILED
        ]
        runs = self.plan.runs
        order = [r for r in runs if failed and r.seed == failed[0]] or list(reversed(runs))
        for run in order:
            log = Path(run.run_dir) / "train.log"
            lines = stored_tail(run.storage, "train.log", n) if run.storage else tail_lines(log, n)
            if lines:
                return lines
        return []
