"""Dispatching seed jobs to Ray: gang admission by resources, a pool of reusable worker actors, polling.

A trial with ``k`` seeds is ``k`` jobs, keyed ``(trial number, seed index)``. Each job runs on a
``TrialWorker`` actor created with the Ray options the trial's backend asks for (``{"num_cpus": 1}``
for a CPU trial, ``{"resources": {"NPU": 8}}`` for an NPU one). The actor holds those resources for as
long as it lives, so Ray's own accounting keeps jobs (and MindSpeed-RL's placement groups inside them)
from fighting over devices. The driver admits a trial only when all its seeds fit at once
(``fits(options, count=k)``): a half-started trial would hold resources while its other seeds wait,
and two such trials could wait on each other forever. Idle actors are kept for the next job of the
same shape (no new worker process per job) and killed when another shape needs their room.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from grpo.sweep.execution.connect import connect, disconnect
from grpo.sweep.execution.seed_result import SeedResult, StopReason
from grpo.sweep.execution.worker import SeedJob, TrialWorker

JobKey = tuple[int, int]  # (trial number, seed index)

DRAIN_EVERY_S = 0.5  # metrics latency for pruning: an iteration of a real trial takes seconds at least


def _shape(options: dict) -> tuple:
    res = tuple(sorted((options.get("resources") or {}).items()))
    return (float(options.get("num_cpus", 1)), float(options.get("num_gpus", 0)), res)


def _demand(shape: tuple) -> dict[str, float]:
    cpus, gpus, res = shape
    need = {"CPU": cpus, "GPU": gpus, **dict(res)}
    return {k: v for k, v in need.items() if v}


@dataclass
class _Slot:
    actor: Any  # a Ray actor handle of TrialWorker
    shape: tuple
    ref: Any = None  # the ObjectRef of its current run
    key: JobKey | None = None
    started: float = 0.0
    stop_sent: float | None = None


@dataclass
class Finished:
    key: JobKey
    result: SeedResult | None
    error: str | None = None  # the worker process died (killed, OOM-killed, node lost)


@dataclass
class RayScheduler:
    """Runs seed jobs on a Ray cluster: ``local`` (started here), ``auto``, ``host:port`` or ``ray://host:port``."""

    address: str = "local"
    num_cpus: int | None = None
    resources: dict = field(default_factory=dict)
    _busy: dict = field(default_factory=dict)
    _idle: list = field(default_factory=list)
    _started_ray: bool = False
    _last_drain: float = 0.0
    _drains: dict = field(default_factory=dict)  # job -> drain ref in flight

    def __post_init__(self) -> None:
        import ray

        # grpo.sweep.execution.connect: the address resolved and probed as Ray's own tools do (one-line errors),
        # a remote cluster announced in one line; when `grpo-sweep run` joined it already, the connection is reused.
        self._started_ray = connect(self.address, num_cpus=self.num_cpus, resources=self.resources)
        self._actor_cls = ray.remote(max_concurrency=4)(TrialWorker)  # type: ignore[call-overload]  # Ray's stubs lack actor options
        self._total = {k: float(v) for k, v in ray.cluster_resources().items()}

    # -- admission -------------------------------------------------------------------------------------
    def _used(self) -> dict[str, float]:
        used: dict[str, float] = {}
        for slot in list(self._busy.values()) + self._idle:
            for k, v in _demand(slot.shape).items():
                used[k] = used.get(k, 0.0) + v
        return used

    def can_ever_fit(self, options: dict, count: int = 1) -> bool:
        """True when ``count`` jobs with these options fit the empty cluster at once."""
        return all(self._total.get(k, 0.0) >= v * count - 1e-9 for k, v in _demand(_shape(options)).items())

    def fits(self, options: dict, count: int = 1) -> bool:
        """True when ``count`` jobs with these options can all start now (a trial's seeds start together).

        Idle actors of the same shape are reused; idle actors of other shapes can be evicted for room.
        """
        shape = _shape(options)
        reused = min(count, sum(1 for slot in self._idle if slot.shape == shape))
        if reused == count:
            return True
        used = self._used()
        spare = [slot for slot in self._idle if slot.shape != shape]
        spare += [slot for slot in self._idle if slot.shape == shape][reused:]
        for slot in spare:  # evictable: their room counts as free
            for k, v in _demand(slot.shape).items():
                used[k] -= v
        need = {k: v * (count - reused) for k, v in _demand(shape).items()}
        return self._has_room(need, used)

    def _has_room(self, need: dict[str, float], used: dict[str, float]) -> bool:
        return all(self._total.get(k, 0.0) - used.get(k, 0.0) >= v - 1e-9 for k, v in need.items())

    @property
    def total(self) -> dict[str, float]:
        """The cluster's resources as Ray reported them when the scheduler started."""
        return dict(self._total)

    # -- lifecycle -------------------------------------------------------------------------------------
    def submit(self, key: JobKey, job: SeedJob, options: dict) -> None:
        shape = _shape(options)
        slot = next((s for s in self._idle if s.shape == shape), None)
        if slot is not None:
            self._idle.remove(slot)
        else:
            self._evict_for(shape)
            ray_options = {k: v for k, v in options.items() if k in ("num_cpus", "num_gpus", "resources")}
            slot = _Slot(actor=self._actor_cls.options(**ray_options).remote(), shape=shape)
        slot.key, slot.started, slot.stop_sent = key, time.monotonic(), None
        slot.ref = slot.actor.run.remote(job)
        self._busy[key] = slot

    def _evict_for(self, shape: tuple) -> None:
        import ray

        need = _demand(shape)
        while self._idle:
            if self._has_room(need, self._used()):
                return
            ray.kill(self._idle.pop(0).actor)

    def poll(self, timeout: float) -> tuple[list[Finished], dict[JobKey, list]]:
        """Wait up to ``timeout`` s; return finished jobs and the metrics events of every busy job."""
        import ray

        finished: list[Finished] = []
        events: dict[JobKey, list] = {}
        if self._busy:
            refs = {slot.ref: key for key, slot in self._busy.items()}
            ready, _ = ray.wait(list(refs), num_returns=len(refs), timeout=timeout)
            for ref in ready:
                key = refs[ref]
                slot = self._busy.pop(key)
                try:
                    result = ray.get(ref)
                except Exception as err:  # RayActorError: the worker process is gone
                    finished.append(Finished(key, None, error=_death_reason(err)))
                    continue
                early = self._drains.pop(key, None)  # a drain in flight holds events older than the result's
                events[key] = (_get_or_empty(early) if early is not None else []) + result.pop("events", [])
                finished.append(Finished(key, result))
                slot.key = None
                self._idle.append(slot)
        else:
            time.sleep(timeout)
        for key, evs in self._collect_drains().items():
            events[key] = evs + events.get(key, [])
        now = time.monotonic()
        if self._busy and now - self._last_drain >= DRAIN_EVERY_S:
            self._last_drain = now
            for key, slot in self._busy.items():
                if key not in self._drains:  # one drain in flight per job; never block on a busy actor
                    self._drains[key] = slot.actor.drain.remote()
        return finished, events

    def _collect_drains(self) -> dict[JobKey, list]:
        import ray

        if not self._drains:
            return {}
        by_ref = {ref: key for key, ref in self._drains.items()}
        ready, _ = ray.wait(list(by_ref), num_returns=len(by_ref), timeout=0)
        out: dict[JobKey, list] = {}
        for ref in ready:
            key = by_ref[ref]
            del self._drains[key]
            try:
                out[key] = ray.get(ref)
            except Exception:  # the worker died meanwhile; its run ref reports that
                out[key] = []
        return out

    def stop(self, key: JobKey, reason: StopReason) -> None:
        slot = self._busy.get(key)
        if slot is not None and slot.stop_sent is None:
            slot.actor.stop.remote(reason)
            slot.stop_sent = time.monotonic()

    def stop_sent_at(self, key: JobKey) -> float | None:
        slot = self._busy.get(key)
        return slot.stop_sent if slot else None

    def started_at(self, key: JobKey) -> float | None:
        slot = self._busy.get(key)
        return slot.started if slot else None

    def kill(self, key: JobKey) -> None:
        """Kill a job's worker now (timeout, second Ctrl-C); its ``poll`` result becomes a death."""
        import ray

        slot = self._busy.get(key)
        if slot is not None:
            ray.kill(slot.actor, no_restart=True)

    def shutdown(self) -> None:
        import ray

        for slot in list(self._busy.values()) + self._idle:
            try:
                ray.kill(slot.actor, no_restart=True)
            except Exception:
                pass
        self._busy.clear()
        self._idle.clear()
        if self._started_ray:
            disconnect()


def _get_or_empty(ref: Any) -> list[Any]:
    import ray

    try:
        return ray.get(ref, timeout=30)
    except Exception:
        return []


def _death_reason(err: Exception) -> str:
    text = str(err).strip().splitlines()
    detail = next(
        (line for line in text if "killed" in line.lower() or "died" in line.lower() or "exit" in line.lower()),
        text[0] if text else "",
    )
    return f"worker process died ({type(err).__name__}): {detail[:300]}"
