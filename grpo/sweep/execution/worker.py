"""The Ray actor that runs one seed of a trial. A trial with ``k`` seeds is ``k`` jobs, each on its own
actor, started together; an actor runs one job at a time and is reused for the next job of the same
resource shape, so a job costs a method call, not a new worker process.

The job carries the configured backend object itself (pickled by Ray), so a reused actor holds no
state from the previous job: no environment variables, no backend lookup by name.

Metrics travel back through Ray: the backend's ``report`` callback queues them in the actor and the
driver drains the queue (``drain``); ``stop`` makes the next ``report`` answer True (pruned, a sibling
seed failed, shutdown). The actor is threaded (``max_concurrency``) so ``drain`` and ``stop`` are served
while ``run`` works.

With ``trial_storage`` in the spec, a job runs in this node's scratch instead of its ``run_dir``: the
checkpoint it resumes from is downloaded first, each new checkpoint is uploaded from the ``report``
callback, and the run folder at the end (``grpo.sweep.execution.trial_storage``).
"""

from __future__ import annotations

import os
import socket
import threading
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

from grpo._fs import pid_alive
from grpo.config import GRPOConfig
from grpo.sweep.backends import TrialBackend, TrialFailed
from grpo.sweep.execution.seed_result import Event, SeedResult, SeedStatus, StopReason
from grpo.sweep.execution.trial_storage import RunStorage, StagedRun, TrialStorageError


@dataclass
class SeedRun:
    seed: int
    cfg: GRPOConfig
    run_dir: str  # where the run writes; with trial storage, where the driver sees it (see ``storage``)
    # With ``trial_storage``: the run is kept there and runs in node-local scratch (grpo.sweep.execution.trial_storage)
    storage: RunStorage | None = None


@dataclass
class SeedJob:
    """One seed of trial ``number``: the ``index``-th of its seeds."""

    number: int
    index: int
    backend: TrialBackend
    run: SeedRun
    resume: bool  # this seed continues from a checkpoint (``run.cfg.actor_config.load``)
    driver_host: str  # the driver that owns the trial: an orphaned seed stops itself
    driver_pid: int


class TrialWorker:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._events: list[Event] = []
        self._stop_reason: StopReason | None = None

    def drain(self) -> list[Event]:
        with self._lock:
            events, self._events = self._events, []
        return events

    def stop(self, reason: StopReason) -> None:
        with self._lock:
            self._stop_reason = reason

    def run(self, job: SeedJob) -> SeedResult:
        with self._lock:
            self._events, self._stop_reason = [], None
        started = time.process_time()
        result: SeedResult = {"status": SeedStatus.COMPLETE, "summary": {}, **_placement()}
        seed_run = job.run
        staged = StagedRun(seed_run.storage) if seed_run.storage is not None else None
        try:
            cfg, run_dir = seed_run.cfg, Path(seed_run.run_dir)
            if staged is not None:  # the engine sees scratch paths; checkpoints go up as they are saved
                cfg, run_dir = staged.prepare(cfg, job.resume), staged.run_dir
            run_dir.mkdir(parents=True, exist_ok=True)

            def report(iteration: int, metrics: dict[str, float]) -> bool:
                with self._lock:
                    self._events.append((seed_run.seed, int(iteration), dict(metrics)))
                    if self._stop_reason is None and not _driver_alive(job):
                        # An orphan must not move the checkpoint past what the dead driver persisted.
                        self._stop_reason = StopReason.DRIVER_DIED
                    stop = self._stop_reason is not None
                if staged is not None:
                    staged.sync()  # outside the lock: drain and stop are served while it uploads
                return stop

            result["summary"] = job.backend.run(cfg, run_dir, report, job.resume) or {}
            if self._stop_reason is not None:
                result["status"] = SeedStatus.STOPPED
                result["stop_reason"] = self._stop_reason
        except TrialStorageError as err:
            _failed(result, str(err), [])
        except TrialFailed as err:
            _failed(result, err.reason, err.last_log_lines)
        except Exception as err:  # a bug or an unexpected crash in the trial: keep the worker alive
            lines = traceback.format_exc().splitlines()[-15:]
            _failed(result, f"{type(err).__name__}: {err}", lines)
        if staged is not None:
            _finish(staged, result)
        result["cpu_s"] = time.process_time() - started
        result["events"] = self.drain()  # the last events travel with the result: no extra round trip
        return result


def _finish(staged: StagedRun, result: SeedResult) -> None:
    """Upload what the run left (also after a failure: its log says why) and delete its scratch; a seed whose
    results could not be kept fails."""
    try:
        staged.finish()
    except Exception as err:
        if result["status"] != SeedStatus.FAILED:
            reason = f"trial_storage {staged.where.study}: upload failed: {type(err).__name__}: {err}"
            _failed(result, reason, [])
    finally:
        staged.discard()


def _failed(result: SeedResult, reason: str, last_log_lines: list[str]) -> None:
    result["status"] = SeedStatus.FAILED
    result["reason"] = reason
    result["last_log_lines"] = last_log_lines


def _driver_alive(job: SeedJob) -> bool:
    """False once the owning driver's process is gone (checked on its own host; elsewhere Ray's
    owner fate-sharing kills the actor)."""
    return job.driver_host != socket.gethostname() or pid_alive(job.driver_pid)


def _placement() -> SeedResult:
    """Where this worker runs: host, Ray node id and the accelerator ids Ray assigned."""
    info: SeedResult = {"node": socket.gethostname(), "pid": os.getpid(), "devices": []}
    try:
        import ray

        ctx = ray.get_runtime_context()
        info["node_id"] = ctx.get_node_id()
        info["devices"] = {k: list(v) for k, v in ctx.get_accelerator_ids().items() if v}
    except Exception:
        pass
    return info
