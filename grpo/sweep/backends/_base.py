"""The trial backend contract: everything the driver needs to know about how a trial runs.

A backend is an object built once per study from the spec (``TrialBackend.from_spec``), checked in the
driver before anything launches, and shipped to the Ray worker inside the trial's job (it is pickled:
its settings travel with it, nothing goes through environment variables). The driver never names a
backend: what differs between them is declared here.
"""

from __future__ import annotations

import abc
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

from grpo.config import GRPOConfig
from grpo.sweep.spec.models import SweepSpec


class TrialFailed(Exception):
    """A trial run failed for a reason worth showing the user (exit code, OOM, HCCL timeout, NaN ...)."""

    def __init__(self, reason: str, last_log_lines: list[str] | None = None):
        self.reason = reason
        self.last_log_lines = list(last_log_lines or [])
        super().__init__(reason)


ReportFn = Callable[[int, dict[str, float]], bool]
RayOptions = dict[str, Any]  # {"num_cpus": 1, "num_gpus": 1, "resources": {"NPU": 8}}


class TrialBackend(abc.ABC):
    """Runs one trial's GRPO training and streams its per-iteration metrics.

    ``run`` is the one abstract method: it executes inside a Ray worker, calls ``report(iteration, metrics)``
    once per iteration (True back means stop now: the trial was pruned or the driver is shutting down),
    and raises ``TrialFailed`` with a reason when the run fails. The rest has defaults for a backend that
    trains in the worker process on CPUs:

    - ``resources(cfg)``: the Ray options of the trial's worker;
    - ``devices_held(options)``: accelerators a trial with those options holds (for device-seconds);
    - ``check(cfg)``: every reason a config cannot run, found before launch (the preflight and each
      sampled point call it; a point with problems is pruned, never launched);
    - ``launch_warnings(cfg)``: what the machine running the check lacks to launch ``cfg`` when that
      machine need not be where trials launch (a driver away from the accelerator nodes: no checkout,
      interpreter or weights here). Preflight shows them as warnings and launches anyway; ``run``
      must check them again on the node that launches and raise ``TrialFailed`` with the reason;
    - ``plans_memory``: whether the layout memory planner (``grpo.plan``) applies to its trials;
    - ``reads_data_here``: the dataset files a config names are read on the machine running the check (False:
      trials read them where they launch; preflight then skips a dataset missing here, and ``launch_warnings``
      names it);
    - ``keeps_relative_paths``: relative data/tokenizer/checkpoint paths in a config are left as
      written (the backend resolves them itself); otherwise the driver makes them absolute against its
      working directory, since a Ray worker may run elsewhere.
    """

    plans_memory: ClassVar[bool] = False
    keeps_relative_paths: ClassVar[bool] = False
    reads_data_here: ClassVar[bool] = True

    @classmethod
    def from_spec(cls, spec: SweepSpec) -> TrialBackend:
        """The backend for ``spec`` (its settings taken from the spec); the default takes none."""
        return cls()

    def resources(self, cfg: GRPOConfig) -> RayOptions:
        """Ray options for the trial's worker, e.g. ``{"num_cpus": 1}``."""
        return {"num_cpus": max(1, int(cfg.engine.num_threads))}

    def devices_held(self, options: RayOptions) -> float:
        """Accelerators a trial started with ``options`` holds while it runs (0 for a CPU trial)."""
        resources = options.get("resources") or {}
        return float(options.get("num_gpus", 0) or resources.get("NPU", 0) or resources.get("GPU", 0))

    def check(self, cfg: GRPOConfig) -> list[str]:
        """Problems that must stop a trial before launch (beyond the config's own rules)."""
        return []

    def launch_warnings(self, cfg: GRPOConfig) -> list[str]:
        """Problems of this machine, not of ``cfg``, that only matter where trials launch (default: none)."""
        return []

    def check_search(self, keys: list[str], source: str) -> list[str]:
        """Searched keys this backend would not vary (refused, or no effect on its training): errors (default: none)."""
        return []

    @classmethod
    def unreported_metric(cls, metric: str) -> str | None:
        """Why this backend's trials never report ``metric`` (a spec's objective or collapse metric would then never
        get a value: refused at validate), or None when they do or the backend cannot tell (the default)."""
        return None

    def branch_problems(self, cfg: GRPOConfig) -> list[str]:
        """Why trials of ``cfg`` cannot run as pbt segments (resumed from another trial's checkpoint, stopped at
        ``engine.exit_interval``); [] when they can. Retries already resume from checkpoints, so by default they can."""
        return []

    @abc.abstractmethod
    def run(self, cfg: GRPOConfig, trial_dir: Path, report: ReportFn, resume: bool) -> dict[str, Any]:
        """Run the trial to the end (or until ``report`` says stop); return a summary dict."""
