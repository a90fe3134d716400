"""The Ray actor that runs trials. One actor runs one trial at a time and is reused for the next trial
of the same resource shape, so a trial costs a method call, not a new worker process.

Metrics travel back through Ray: the backend's ``report`` callback queues them in the actor and the
driver drains the queue (``drain``); ``stop`` makes the next ``report`` answer True (pruned / shutdown).
The actor is threaded (``max_concurrency``) so ``drain`` and ``stop`` are served while ``run`` works.
"""

from __future__ import annotations

import os
import socket
import threading
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class SeedRun:
    seed: int
    cfg: object  # GRPOConfig
    run_dir: str


@dataclass
class TrialJob:
    number: int
    backend: str
    runs: list[SeedRun]
    resume: bool = False
    env: dict = field(default_factory=dict)
    driver: dict = field(default_factory=dict)  # {host, pid} of the driver that owns the trial


class TrialWorker:
    def __init__(self):
        self._lock = threading.Lock()
        self._events: list[tuple[int, int, dict]] = []
        self._stop_reason: str | None = None

    def ready(self) -> dict:
        return _placement()

    def drain(self) -> list[tuple[int, int, dict]]:
        with self._lock:
            events, self._events = self._events, []
        return events

    def stop(self, reason: str) -> None:
        with self._lock:
            self._stop_reason = reason

    def run(self, job: TrialJob) -> dict:
        from grpo.sweep.backends import TrialFailed
        from grpo.sweep.backends.registry import load_backend

        with self._lock:
            self._events, self._stop_reason = [], None
        os.environ.update(job.env)
        started = time.process_time()
        result = {"status": "complete", "summaries": [], **_placement()}
        try:
            backend = load_backend(job.backend)
            for seed_run in job.runs:
                Path(seed_run.run_dir).mkdir(parents=True, exist_ok=True)

                def report(iteration: int, metrics: dict, _seed=seed_run.seed) -> bool:
                    with self._lock:
                        self._events.append((_seed, int(iteration), dict(metrics)))
                        if self._stop_reason is None and not _driver_alive(job.driver):
                            # An orphan must not move the checkpoint past what the dead driver persisted.
                            self._stop_reason = "driver died"
                        return self._stop_reason is not None

                summary = backend.run(seed_run.cfg, Path(seed_run.run_dir), report, job.resume)
                result["summaries"].append(summary or {})
                if self._stop_reason is not None:
                    result["status"] = "stopped"
                    result["stop_reason"] = self._stop_reason
                    break
        except TrialFailed as err:
            result.update(status="failed", reason=err.reason, last_log_lines=err.last_log_lines)
        except Exception as err:  # a bug or an unexpected crash in the trial: keep the worker alive
            lines = traceback.format_exc().splitlines()[-15:]
            result.update(status="failed", reason=f"{type(err).__name__}: {err}", last_log_lines=lines)
        result["cpu_s"] = time.process_time() - started
        result["events"] = self.drain()  # the last events travel with the result: no extra round trip
        return result


def _driver_alive(driver: dict) -> bool:
    """False once the owning driver's process is gone (checked on its own host; elsewhere Ray's
    owner fate-sharing kills the actor)."""
    if not driver or driver.get("host") != socket.gethostname():
        return True
    try:
        os.kill(int(driver["pid"]), 0)
    except ProcessLookupError:
        return False
    except (PermissionError, ValueError, KeyError):
        return True
    return True


def _placement() -> dict:
    """Where this worker runs: host, Ray node id and the accelerator ids Ray assigned."""
    info = {"node": socket.gethostname(), "pid": os.getpid(), "devices": []}
    try:
        import ray

        ctx = ray.get_runtime_context()
        info["node_id"] = ctx.get_node_id()
        info["devices"] = {k: list(v) for k, v in ctx.get_accelerator_ids().items() if v}
    except Exception:
        pass
    return info
