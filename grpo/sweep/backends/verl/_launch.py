"""Launching one verl trial as its own Ray job (``JobSubmissionClient``), and stopping it.

Each trial is a separate job whose driver runs ``python -m verl.trainer.main_ppo``; it is never started
inside a Ray task that holds the GPUs its own actors need (ray#47439: a nested run waits forever on
resources its parent holds). Stopping the job ends its driver, and with it the TaskRunner and the
rollout/actor workers it created, which belong to that job.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

ENTRY_MODULE = "verl.trainer.main_ppo"
AGENT_WAIT_S = 90.0


def entrypoint(python: str, overrides: list[str], module: str = ENTRY_MODULE) -> str:
    """The job's shell entrypoint: verl's own trainer with the trial's Hydra overrides, quoted."""
    return shlex.join([python, "-m", module, *overrides, "trainer.logger=[console,file]"])


def dashboard_address(address: str | None = None) -> str:
    """The Jobs API address: ``address`` as given, else the dashboard of the Ray cluster this process is in."""
    if address:
        return address
    import ray

    if ray.is_initialized():
        # The connected cluster's dashboard, as its head wrote it into the GCS (a worker's own webui_url is
        # Ray's default port whatever the head uses; a cluster found on disk may be another one).
        from ray._private import ray_constants
        from ray.experimental import internal_kv

        url = internal_kv._internal_kv_get(
            ray_constants.DASHBOARD_ADDRESS, namespace=ray_constants.KV_NAMESPACE_DASHBOARD
        )
        if url:
            text = url.decode() if isinstance(url, bytes) else str(url)
            return text if "://" in text else f"http://{text}"
    raise RuntimeError(
        "verl trials run as Ray jobs, which need the cluster's dashboard (the Jobs API): start the cluster with "
        "`ray start --head` (its dashboard is on by default) and set cluster.address to it; a local cluster "
        "(cluster.address: local) has none"
    )


def client(address: str | None = None) -> Any:
    from ray.job_submission import JobSubmissionClient  # only where trials launch

    return JobSubmissionClient(dashboard_address(address))


def runtime_env(log_path: Path, env: dict[str, str] | None = None) -> dict[str, Any]:
    """The job's runtime env: the file logger writes this trial's JSONL (``VERL_FILE_LOGGER_PATH``)."""
    return {"env_vars": {**(env or {}), "VERL_FILE_LOGGER_PATH": str(log_path)}}


def submit(
    jobs: Any,
    submission_id: str,
    python: str,
    overrides: list[str],
    log_path: Path,
    *,
    module: str = ENTRY_MODULE,
    env: dict[str, str] | None = None,
) -> str:
    """Submit the trial's job through ``jobs`` (a ``JobSubmissionClient``); returns its submission id.

    A cluster whose dashboard agent is not up yet answers "No available agent to submit job, please try again
    later": that is retried for ``AGENT_WAIT_S``."""
    import time

    deadline = time.monotonic() + AGENT_WAIT_S
    while True:
        try:
            return str(
                jobs.submit_job(
                    entrypoint=entrypoint(python, overrides, module),
                    submission_id=submission_id,
                    runtime_env=runtime_env(log_path, env),
                )
            )
        except RuntimeError as err:
            if "No available agent" not in str(err) or time.monotonic() > deadline:
                raise
            time.sleep(1.0)


def stop(jobs: Any, submission_id: str, wait_s: float = 60.0) -> str:
    """Stop a pruned trial's job (its driver, and with it the workers it started) and wait until Ray says it
    ended; returns the job's last status."""
    import time

    jobs.stop_job(submission_id)
    deadline = time.monotonic() + wait_s
    status = jobs.get_job_status(submission_id)
    while not status.is_terminal() and time.monotonic() < deadline:
        time.sleep(0.2)
        status = jobs.get_job_status(submission_id)
    return str(status.value)
