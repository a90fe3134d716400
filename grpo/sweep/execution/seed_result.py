"""What crosses the Ray boundary for one seed: its metric events, why it was stopped, what it returned.

Standard library only, so the pure parts of the driver (grpo.sweep.run.outcome) read these types without
importing the worker, its storage or Ray.
"""

from __future__ import annotations

from enum import Enum
from typing import Any, TypedDict

Event = tuple[int, int, dict[str, Any]]  # (seed, iteration, metrics)


class StopReason(str, Enum):
    """Why the driver (or the worker itself) stops a running seed; the value travels through Ray as a str."""

    PRUNED = "pruned"
    TIMEOUT = "timeout"
    INTERRUPTED = "interrupted"  # Ctrl-C, SIGTERM, an I/O error in the driver: the trial resumes
    FAILED = "failed"  # a sibling seed failed: the trial fails with it
    DRIVER_DIED = "driver died"  # the worker found its driver's process gone

    def __str__(self) -> str:  # f-strings show the value on every Python (3.11 changed mixed-in enums)
        return self.value


class SeedStatus(str, Enum):
    COMPLETE = "complete"  # the backend returned
    STOPPED = "stopped"  # the backend returned after a stop (``stop_reason`` says why)
    FAILED = "failed"  # ``reason`` and ``last_log_lines`` say why

    def __str__(self) -> str:
        return self.value


class SeedResult(TypedDict, total=False):
    """What ``TrialWorker.run`` returns through Ray for one seed."""

    status: SeedStatus
    summary: dict[str, Any]  # the backend's return value
    stop_reason: StopReason  # status STOPPED
    reason: str  # status FAILED
    last_log_lines: list[str]  # status FAILED
    cpu_s: float
    events: list[Event]  # the last metrics, drained with the result
    node: str  # host name
    node_id: str  # Ray's node id
    pid: int
    devices: Any  # accelerator ids Ray assigned, by kind
