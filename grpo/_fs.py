"""File and process helpers shared by the engine, the sweep and the report (the bottom layer: no grpo imports).

- ``atomic_write`` / ``atomic_write_text``: a reader never sees half a file (temp file + ``os.replace``).
- ``read_jsonl`` / ``truncate_jsonl_after``: the ``metrics.jsonl`` format (one JSON object per iteration;
  a last line cut short by a crash is skipped, never an error).
- ``checkpoint_iteration``: Megatron's tracker file, which both checkpoint writers (the embedded engine
  and MindSpeed-RL) keep in a save dir.
- ``tail_lines``: the last lines of a log, for failure reasons.
- ``pid_alive`` / ``group_alive``: process liveness without sending a signal.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

# Megatron's checkpoint tracker: the newest complete iteration, or "release" for converted weights.
CHECKPOINT_TRACKER = "latest_checkpointed_iteration.txt"
# A seed run's checkpoint folder (its actor_config.save): runs/seed<k>/ckpt.
CHECKPOINT_DIR = "ckpt"
# A few held-out prompts and responses per evaluation, for people to read: the engine writes, the report reads.
SAMPLES_FILE = "samples.jsonl"
# The actor_config switches a run resuming from its own checkpoint sets to false (a retry, a reproduction).
RESUME_KEYS = ("actor_config.finetune", "actor_config.no_load_optim", "actor_config.no_load_rng")


def atomic_write(path: str | os.PathLike[str], write: Callable[[Path], object]) -> Path:
    """Call ``write(tmp)`` on a temporary file beside ``path``, then rename it onto ``path``.

    The rename is atomic on POSIX, so ``path`` is either the old file or the whole new one; on any
    error the temporary file is removed and ``path`` is left as it was.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        write(tmp)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def atomic_write_text(path: str | os.PathLike[str], text: str) -> Path:
    return atomic_write(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))


def read_jsonl(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The JSON objects of a jsonl file, in order; [] when it does not exist.

    Lines that do not parse (the last line of a file whose writer was killed) are skipped.
    """
    rows: list[dict[str, Any]] = []
    try:
        with open(path, encoding="utf-8") as fh:
            for line in fh:
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except json.JSONDecodeError:
                    continue
                if isinstance(row, dict):
                    rows.append(row)
    except OSError:
        pass
    return rows


def truncate_jsonl_after(path: str | os.PathLike[str], iteration: int) -> None:
    """Keep only the rows of a metrics file up to ``iteration`` (a resumed run redoes the rest); atomic."""
    path = Path(path)
    if not path.exists():
        return
    kept = [row for row in read_jsonl(path) if row.get("iteration", 0) <= iteration]
    atomic_write_text(path, "".join(json.dumps(row) + "\n" for row in kept))


def checkpoint_iteration(save_dir: str | os.PathLike[str]) -> int | None:
    """The iteration in a save dir's tracker file (0 for a converted ``release`` checkpoint), or None."""
    try:
        text = (Path(save_dir) / CHECKPOINT_TRACKER).read_text().strip()
    except OSError:
        return None
    if text == "release":
        return 0
    try:
        return int(text)
    except ValueError:
        return None


def tail_lines(path: str | os.PathLike[str], n: int = 20) -> list[str]:
    """The last ``n`` lines of a text file; [] when it cannot be read."""
    try:
        return Path(path).read_text(errors="replace").splitlines()[-n:]
    except OSError:
        return []


def pid_alive(pid: int) -> bool:
    """True while process ``pid`` exists (on this host); a process we may not signal counts as alive."""
    return _answers_signal_zero(os.kill, pid)


def group_alive(pgid: int) -> bool:
    """True while any process of process group ``pgid`` exists."""
    return _answers_signal_zero(os.killpg, pgid)


def _answers_signal_zero(send: Callable[[int, int], None], target: int) -> bool:
    try:
        send(target, 0)  # signal 0: delivery is checked, nothing is sent
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
