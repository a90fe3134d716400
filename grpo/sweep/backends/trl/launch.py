"""``trl.launcher: accelerate``: a trial as ``accelerate launch ... -m grpo.sweep.backends.trl.worker JOB``.

The Ray worker writes the job (the trial config, its run dir, a stop file, a result file, its own pid) into the
run dir and starts accelerate in a process group of its own (``start_new_session``). The launched processes run
the same TRL training as the in-worker backend (``TrlBackend.run_here``); the main one's ``SweepCallback`` appends
each iteration's row to the run dir's ``metrics.jsonl``, which this module tails and reports to the driver. When
``report`` says stop (pruned, interrupted, timed out), the stop file is written; the callback checks it at every
optimizer step (``control.should_training_stop``), and a run that has not ended ``trl.stop_grace`` s later is killed
with its whole process group. The launched processes also stop when this worker's pid is gone (a SIGKILLed driver
takes its Ray workers with it; the accelerate group, in a session of its own, would train on).

Command: ``python -m accelerate.commands.launch`` (accelerate's ``accelerate launch``) with ``--config_file`` when
set (a DeepSpeed or FSDP config), else ``--cpu`` on engine.device cpu or ``--multi_gpu`` for several processes;
then ``--num_processes N``, ``trl.extra_args``, ``-m`` and the worker module. Rows before a resume's checkpoint are
kept (``truncate_jsonl_after``), as in the worker.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from grpo._fs import group_alive, tail_lines, truncate_jsonl_after
from grpo.config import GRPOConfig
from grpo.sweep.backends._base import ReportFn, TrialFailed
from grpo.sweep.spec.models import TrlSpec

WORKER = "grpo.sweep.backends.trl.worker"
JOB, STOP, RESULT, LOG = "trl_job.json", "trl_stop", "trl_result.json", "accelerate.log"
POLL_S = 0.25
RAY_INTERNAL_ENV = ("RAY_JOB_ID", "RAY_RAYLET_PID", "RAY_OVERRIDE_NODE_ID_FOR_TESTING")


def accelerate_command(settings: TrlSpec, cfg: GRPOConfig, job: Path) -> list[str]:
    cmd = [sys.executable, "-m", "accelerate.commands.launch"]
    if settings.config_file:
        cmd += ["--config_file", settings.config_file]
    elif cfg.engine.device == "cpu":
        cmd += ["--cpu"]
    elif settings.num_processes > 1:
        cmd += ["--multi_gpu"]
    if not settings.config_file:  # accelerate's defaults, said (it warns about each one it has to pick)
        cmd += ["--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no"]
    return [*cmd, "--num_processes", str(settings.num_processes), *settings.extra_args, "-m", WORKER, str(job)]


def stop_group(proc: subprocess.Popen, grace: float) -> None:
    """SIGTERM the process group, SIGKILL what is left of it after ``grace`` s."""
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            proc.poll()
            if proc.returncode is not None and not group_alive(proc.pid):
                return
            time.sleep(0.05)


class _Tail:
    """New complete lines of a JSONL file from a byte offset (a partial last line waits for its newline)."""

    def __init__(self, path: Path):
        self.path, self.offset = path, path.stat().st_size if path.exists() else 0

    def rows(self) -> list[dict[str, Any]]:
        try:
            with open(self.path, "rb") as fh:
                fh.seek(self.offset)
                data = fh.read()
        except OSError:
            return []
        end = data.rfind(b"\n") + 1
        self.offset += end
        return [json.loads(line) for line in data[:end].splitlines() if line.strip()]


def run_accelerate(
    settings: TrlSpec, cfg: GRPOConfig, run_dir: Path, report: ReportFn, start_iteration: int
) -> dict[str, Any]:
    """The trial under accelerate launch (module docstring); ``start_iteration``: the checkpoint it resumes (0)."""
    if not _importable("accelerate"):
        raise TrialFailed("backend trl: trl.launcher accelerate: accelerate is not installed here")
    run_dir.mkdir(parents=True, exist_ok=True)
    save_dir = Path(str(cfg.actor_config.save or run_dir / "ckpt")).expanduser()
    metrics = run_dir / "metrics.jsonl"
    truncate_jsonl_after(metrics, start_iteration)  # the rows up to the checkpoint stay; the worker does the same
    tail = _Tail(metrics)
    stop_file, result_file, log_path = run_dir / STOP, run_dir / RESULT, run_dir / LOG
    stop_file.unlink(missing_ok=True)
    result_file.unlink(missing_ok=True)
    job = run_dir / JOB
    job.write_text(json.dumps({
        "config": cfg.to_dict(), "run_dir": str(run_dir), "stop_file": str(stop_file),
        "result_file": str(result_file), "watch_pid": os.getpid(), "num_processes": settings.num_processes,
        "trl_args": settings.args,  # the config's trl.args travel in "config"
    }))  # fmt: skip
    cmd = accelerate_command(settings, cfg, job)
    env = {k: v for k, v in os.environ.items() if k not in RAY_INTERNAL_ENV}
    env.update(PYTHONUNBUFFERED="1", OMP_NUM_THREADS=str(max(1, int(cfg.engine.num_threads))))
    with open(log_path, "a", encoding="utf-8") as log:
        log.write(f"# grpo-sweep: {' '.join(cmd)} (from iteration {start_iteration})\n")
        log.flush()
        proc = subprocess.Popen(
            cmd, cwd=run_dir, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
        log.write(f"# grpo-sweep: process group {proc.pid}\n")
    last, last_metrics, stopped, killed, deadline = start_iteration, {}, False, False, math.inf
    try:
        while True:
            exited = proc.poll() is not None
            for row in tail.rows():
                iteration = int(row.pop("iteration", 0))
                row.pop("seed", None)
                if stopped or (iteration <= last and not (iteration == 0 == last)):
                    continue  # after the stop, or a row already reported
                last, last_metrics = iteration, {k: float(v) for k, v in row.items() if math.isfinite(float(v))}
                if report(iteration, last_metrics):
                    stopped, deadline = True, time.monotonic() + settings.stop_grace
                    stop_file.touch()
            if exited:
                break
            if time.monotonic() > deadline:  # told to stop, still running
                killed = True
                stop_group(proc, 5.0)
                break
            time.sleep(POLL_S)
    finally:
        if proc.poll() is None or group_alive(proc.pid):
            killed = True
            stop_group(proc, 5.0)
    with open(log_path, "a", encoding="utf-8") as log:
        if stopped:
            log.write(f"# grpo-sweep: stopped at iteration {last}" + (" (process group killed)\n" if killed else "\n"))
    result = json.loads(result_file.read_text()) if result_file.is_file() else {}
    summary = {
        "run_dir": str(run_dir), "iterations": last, "stopped_early": stopped, "killed": killed,
        "start_iteration": start_iteration, "checkpoint": str(save_dir), "metrics": last_metrics,
        "launcher": "accelerate", "returncode": proc.returncode, "pid": proc.pid,
    }  # fmt: skip
    if stopped:
        return summary
    if "failed" in result:
        raise TrialFailed(result["failed"], result.get("lines") or tail_lines(log_path))
    if proc.returncode != 0 or "summary" not in result:
        raise TrialFailed(f"accelerate launch exited with {proc.returncode} (see {LOG})", tail_lines(log_path))
    return {**result["summary"], **summary, "exited_at": result["summary"].get("exited_at")}


def _importable(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(name) is not None
