"""What ``accelerate launch -m grpo.sweep.backends.trl.worker JOB`` runs in each process (``launch.py``).

Every process trains (TRL's GRPOTrainer under accelerate: ``RANK`` / ``WORLD_SIZE`` from the launcher); the main
one (rank 0) writes the run dir's ``metrics.jsonl`` (the rows the backend tails) and the result file, the others
keep their logs in ``rank<k>/`` under it. Each process stops at the next optimizer step once the stop file exists
or the Ray worker that launched it is gone.

    python -m accelerate.commands.launch --cpu --num_processes 1 -m grpo.sweep.backends.trl.worker run/trl_job.json
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from grpo._fs import atomic_write_text
from grpo.config import config_from_dict
from grpo.sweep.backends._base import TrialFailed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def main(argv: list[str] | None = None) -> int:
    from grpo.sweep.backends.trl.backend import TrlBackend

    (job_path,) = argv if argv is not None else sys.argv[1:]
    job = json.loads(Path(job_path).read_text())
    cfg = config_from_dict(job["config"])
    rank = int(os.environ.get("RANK", "0"))
    run_dir = Path(job["run_dir"]) if rank == 0 else Path(job["run_dir"]) / f"rank{rank}"
    stop_file, watched = Path(job["stop_file"]), int(job["watch_pid"])

    def should_stop() -> bool:
        return stop_file.exists() or not _alive(watched)

    try:
        processes = int(job.get("num_processes", 1))  # the batch plan divides by them (backend.batch_plan)
        native = {**(job.get("trl_args") or {}), **((cfg.trl or {}).get("args") or {})}  # spec's, config's trl.args
        summary = TrlBackend().run_here(cfg, run_dir, lambda i, m: should_stop(), should_stop, processes, native)
        out: dict = {"summary": summary}
        code = 0
    except TrialFailed as err:
        out, code = {"failed": err.reason, "lines": err.last_log_lines}, 1
    if rank == 0:
        atomic_write_text(Path(job["result_file"]), json.dumps(out))
    return code


if __name__ == "__main__":
    sys.exit(main())
