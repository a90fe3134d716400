"""Disk used by each trial's folder: its checkpoints and the rest, measured as ``du`` does.

``trial_usage(dirs)`` walks each trial dir with ``os.scandir`` and ``lstat`` (symlinks are counted as
links, never followed; a file hard-linked several times is counted once) and adds up the space the files
take on disk (allocated blocks, as ``du`` reports; the size where the platform has no block count).
Anything under a folder named ``ckpt`` (``runs/seed<k>/ckpt``: the trial's ``actor_config.save``) is a
checkpoint. A trial whose folder does not exist has no entry (unknown, not zero); a subfolder that
cannot be read makes the trial's figure a lower bound (``Usage.complete`` is False).

The walk is bounded, so a 10,000-trial study on a slow file system still reports in time: at most
``MAX_ENTRIES`` files and folders and ``MAX_SECONDS`` of walking for the whole study, trials in order;
the trials it did not reach are unknown and ``DiskReport.stopped`` says why.

    report = trial_usage({3: Path("studies/s/trials/3"), 4: None})
    report.usage[3].total, report.usage[3].checkpoints   # bytes; trial 4: not in report.usage
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

from grpo._fs import CHECKPOINT_DIR

MAX_ENTRIES = 400_000  # files and folders looked at, for the whole study
MAX_SECONDS = 5.0  # wall time of the whole walk
_CHECK_EVERY = 512  # entries between two looks at the clock


@dataclass(frozen=True)
class Usage:
    """Bytes on disk of one trial folder: ``total`` (checkpoints included) and ``checkpoints``.

    ``complete`` is False when part of the folder could not be read or the walk stopped inside it: the
    figures are then a lower bound.
    """

    total: int
    checkpoints: int
    complete: bool = True

    @property
    def other(self) -> int:
        return self.total - self.checkpoints


@dataclass
class DiskReport:
    """``usage``: trial number -> ``Usage`` for every trial folder that was measured; ``stopped``: why the
    walk stopped before the last trial (None: every existing folder was measured); ``skipped``: trials
    with a folder the walk did not reach."""

    usage: dict[int, Usage] = field(default_factory=dict)
    stopped: str | None = None
    skipped: int = 0

    @property
    def total(self) -> int:
        return sum(u.total for u in self.usage.values())

    @property
    def checkpoints(self) -> int:
        return sum(u.checkpoints for u in self.usage.values())


def _bytes(st: os.stat_result) -> int:
    blocks = getattr(st, "st_blocks", None)
    return int(blocks) * 512 if blocks is not None else int(st.st_size)


class _Walk:
    """One bounded walk over many folders, sharing its budget and the hard links it has counted."""

    def __init__(self, max_entries: int, max_seconds: float) -> None:
        self.left = max_entries
        self.deadline = time.monotonic() + max_seconds
        self.max_entries, self.max_seconds = max_entries, max_seconds
        self.seen: set[tuple[int, int]] = set()
        self.stopped: str | None = None
        self._tick = 0

    def _spend(self) -> bool:
        """Count one entry; False once the budget is used up (``stopped`` says which budget)."""
        if self.stopped is not None:
            return False
        self.left -= 1
        self._tick += 1
        if self.left < 0:
            self.stopped = f"the walk stops after {self.max_entries:,} files and folders"
        elif self._tick % _CHECK_EVERY == 0 and time.monotonic() > self.deadline:
            self.stopped = f"the walk stops after {self.max_seconds:g} s"
        return self.stopped is None

    def _size(self, st: os.stat_result) -> int:
        if st.st_nlink > 1 and not stat.S_ISDIR(st.st_mode):
            key = (st.st_dev, st.st_ino)
            if key in self.seen:
                return 0
            self.seen.add(key)
        return _bytes(st)

    def folder(self, path: str) -> Usage | None:
        """Usage of the folder ``path`` (not followed if it is a symlink); None when it is not a folder."""
        try:
            top = os.lstat(path)
        except OSError:
            return None
        if not stat.S_ISDIR(top.st_mode):
            return None
        total, ckpt, complete = _bytes(top), 0, True
        stack: list[tuple[str, bool]] = [(path, False)]
        while stack:
            folder, in_ckpt = stack.pop()
            try:
                with os.scandir(folder) as entries:
                    for entry in entries:
                        if not self._spend():
                            return Usage(total, ckpt, complete=False)
                        try:
                            st = entry.stat(follow_symlinks=False)
                        except OSError:  # vanished (a running trial) or unreadable
                            continue
                        size = self._size(st)
                        is_ckpt = in_ckpt or (entry.name == CHECKPOINT_DIR and stat.S_ISDIR(st.st_mode))
                        total += size
                        if is_ckpt:
                            ckpt += size
                        if stat.S_ISDIR(st.st_mode):
                            stack.append((entry.path, is_ckpt))
            except FileNotFoundError:
                continue  # removed while we walked (old checkpoints of a running trial)
            except OSError:
                complete = False
        return Usage(total, ckpt, complete)


def trial_usage(
    dirs: Mapping[int, str | os.PathLike[str] | None],
    *,
    max_entries: int = MAX_ENTRIES,
    max_seconds: float = MAX_SECONDS,
) -> DiskReport:
    """Measure each trial folder of ``dirs`` (trial number -> folder, None: it has none), in trial order."""
    walk = _Walk(max_entries, max_seconds)
    report = DiskReport()
    for number in sorted(dirs):
        path = dirs[number]
        if path is None:
            continue
        if walk.stopped is not None:
            report.skipped += 1
            continue
        usage = walk.folder(os.fspath(path))
        if usage is not None:
            report.usage[number] = usage
    report.stopped = walk.stopped
    return report


def study_files(study_dir: str | os.PathLike[str] | None) -> int | None:
    """Bytes of the files directly in the study folder (the journal file, its lock) or None without one."""
    if not study_dir:
        return None
    total = 0
    try:
        with os.scandir(study_dir) as entries:
            for entry in entries:
                try:
                    st = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                if not stat.S_ISDIR(st.st_mode):
                    total += _bytes(st)
    except OSError:
        return None
    return total


def size_text(value: object) -> str:
    """Bytes as ``812 kB``, ``1.8 MB``, ``44 MB``, ``2.1 GB`` (decimal units, 2-3 digits); '' when unknown."""
    if not isinstance(value, (int, float)) or isinstance(value, bool) or value != value or value < 0:
        return ""
    amount = float(value)
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if amount < 1000 or unit == "TB":
            break
        amount /= 1000
    if unit == "B":
        return f"{int(amount)} B"
    return f"{amount:.2g} {unit}" if amount < 10 else f"{amount:.0f} {unit}"


__all__ = ["CHECKPOINT_DIR", "DiskReport", "Usage", "size_text", "study_files", "trial_usage"]
