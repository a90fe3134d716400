"""Launching and stopping MindSpeed-RL's process: its command line, environment and process group."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import time
from typing import IO

from grpo._fs import group_alive
from grpo.sweep.backends.mindspeed._render import LaunchPlan
from grpo.sweep.spec.models import MindSpeedSpec

# Ray's internal per-process flags (ray_constants.RAY_INTERNAL_FLAGS): a new driver must not inherit them.
RAY_INTERNAL_ENV = ("RAY_JOB_ID", "RAY_RAYLET_PID", "RAY_OVERRIDE_NODE_ID_FOR_TESTING")


def launch_command(settings: MindSpeedSpec, plan: LaunchPlan) -> list[str]:
    """``<python> <entry> --config-path <rendered dir> --config-name grpo_trainer``.

    ``--config-path``, not ``--config-dir``: MindSpeed-RL's entry point declares
    ``@hydra.main(config_path='../configs', ...)``, and Hydra searches that folder of the checkout first;
    ``--config-dir`` is only inserted after it (hydra/_internal/utils.py, ``_run_hydra``: prepended
    before the ``schema`` entry). A checkout file with the same name as a rendered one (its
    ``configs/model/qwen25_7b.yaml``, or a ``configs/grpo_trainer.yaml``) then replaced ours, and a swept
    model key was silently lost. ``--config-path`` replaces the ``config_path`` of ``hydra.main``
    (same function), so the rendered folder is the only config folder on the search path: no file of
    any checkout can shadow the rendered trainer or its model files, whatever they are named, and the
    rendered layout stays MindSpeed-RL's own (defaults list ``model: [<name>]``, composed key
    ``model.<name>``). Nothing else is lost: the rendered folder holds every file the defaults list names.
    """
    return [
        settings.interpreter,
        settings.entry,
        "--config-path",
        str(plan.config_dir),
        "--config-name",
        plan.config_name,
    ]


def _in_ray_worker() -> bool:
    if "ray" not in sys.modules:
        return False
    import ray

    return ray.is_initialized()


def _ray_context() -> tuple[str | None, list[str]]:
    """(GCS address of the cluster this worker is in, NPU ids Ray assigned to it); (None, []) outside Ray."""
    if not _in_ray_worker():
        return None, []
    import ray

    try:
        ctx = ray.get_runtime_context()
        return ctx.gcs_address, [str(i) for i in ctx.get_accelerator_ids().get("NPU", [])]
    except Exception:  # a half-initialised Ray: launch without it rather than fail the trial
        return None, []


def launch_env(settings: MindSpeedSpec, ray_address: str | None = None) -> dict[str, str]:
    """The subprocess environment: ours, plus what MindSpeed-RL needs, then the spec's ``mindspeed.env``.

    ``RAY_ADDRESS`` is the cluster this worker runs in (its GCS address), else ``ray_address`` (the
    study's ``cluster.address``) when it is a concrete one; ``local``/``auto`` are resolved inside Ray
    only. ``ASCEND_RT_VISIBLE_DEVICES`` lists the NPUs Ray gave this worker, when it was given any.
    """
    env = {k: v for k, v in os.environ.items() if k not in RAY_INTERNAL_ENV}
    env["HYDRA_FULL_ERROR"] = "1"
    env["PYTHONUNBUFFERED"] = "1"  # lines arrive as printed: stall detection and pruning see them live
    env["RAY_DEDUP_LOGS"] = "0"  # every line reaches the log (MindSpeed-RL's own scripts do the same)
    gcs_address, npus = _ray_context()
    if gcs_address:
        env["RAY_ADDRESS"] = gcs_address
    elif ray_address and ray_address not in ("local", "auto"):
        env["RAY_ADDRESS"] = ray_address
    if npus:
        env["ASCEND_RT_VISIBLE_DEVICES"] = ",".join(npus)
    env.update(settings.env)
    return env


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def stop_process_group(proc: subprocess.Popen, grace: float) -> None:
    """SIGTERM the process group, wait up to ``grace`` s for all of it to exit, then SIGKILL what is left."""
    pgid = proc.pid  # start_new_session=True: the child leads its own group
    _signal_group(pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        proc.poll()
        if proc.returncode is not None and not group_alive(pgid):
            return
        time.sleep(0.05)
    _signal_group(pgid, signal.SIGKILL)
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass
    deadline = time.monotonic() + 5
    while group_alive(pgid) and time.monotonic() < deadline:  # a killed member may linger a moment
        time.sleep(0.05)


def pump_lines(stream: IO[bytes], lines: queue.Queue[bytes | None]) -> None:
    for raw in iter(stream.readline, b""):
        lines.put(raw)
    lines.put(None)
