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


def entrypoint(python: str, overrides: list[str]) -> str:
    """The job's shell entrypoint: verl's own trainer with the trial's Hydra overrides, quoted."""
    return shlex.join([python, "-m", ENTRY_MODULE, *overrides, "trainer.logger=[console,file]"])


def runtime_env(log_path: Path, env: dict[str, str] | None = None) -> dict[str, Any]:
    """The job's runtime env: the file logger writes this trial's JSONL (``VERL_FILE_LOGGER_PATH``)."""
    return {"env_vars": {**(env or {}), "VERL_FILE_LOGGER_PATH": str(log_path)}}


def submit(address: str, submission_id: str, python: str, overrides: list[str], log_path: Path) -> str:
    """Submit the trial's job to the Ray cluster at ``address``; returns its submission id."""
    from ray.job_submission import JobSubmissionClient  # only where trials launch

    client = JobSubmissionClient(address)
    return client.submit_job(
        entrypoint=entrypoint(python, overrides), submission_id=submission_id, runtime_env=runtime_env(log_path)
    )


def stop(address: str, submission_id: str) -> bool:
    """Stop a pruned trial's job (its driver and the workers it started); True if Ray stopped it."""
    from ray.job_submission import JobSubmissionClient

    return bool(JobSubmissionClient(address).stop_job(submission_id))
