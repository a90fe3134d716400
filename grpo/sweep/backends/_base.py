"""The trial backend interface: how one trial's GRPO run is executed inside a Ray worker."""

from __future__ import annotations

import abc
from collections.abc import Callable
from pathlib import Path


class TrialFailed(Exception):
    """A trial run failed for a reason worth showing the user (exit code, OOM, HCCL timeout, NaN ...)."""

    def __init__(self, reason: str, last_log_lines: list[str] | None = None):
        self.reason = reason
        self.last_log_lines = list(last_log_lines or [])
        super().__init__(reason)


ReportFn = Callable[[int, dict], bool]


class TrialBackend(abc.ABC):
    """Runs one trial's GRPO training and streams its per-iteration metrics.

    ``run`` is the one abstract method: it executes inside a Ray worker, calls ``report(iteration, metrics)``
    once per iteration (True back means stop now: the trial was pruned or the driver is shutting down),
    and raises ``TrialFailed`` with a reason when the run fails.
    """

    name: str = "base"

    def resources(self, cfg) -> dict:
        """Ray options for the trial's task/actor, e.g. ``{"num_cpus": 1}``."""
        return {"num_cpus": max(1, int(getattr(cfg.engine, "num_threads", 1)))}

    @staticmethod
    def job_env(spec) -> dict[str, str]:
        """Environment variables the driver sets in the trial's worker (e.g. the spec's backend section)."""
        return {}

    def check(self, cfg, spec) -> list[str]:
        """Problems that must stop a trial before launch (beyond the config's own rules)."""
        return []

    @abc.abstractmethod
    def run(self, cfg, trial_dir: Path, report: ReportFn, resume: bool) -> dict:
        """Run the trial to the end (or until ``report`` says stop); return a summary dict."""
