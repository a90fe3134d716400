"""grpo.report.disk: the disk each trial folder takes (checkpoints apart), bounded; the report shows it."""

from __future__ import annotations

import os
import re
import shutil
import subprocess

from report_fixtures import CHECKPOINT_BYTES, make_study

from grpo.report import collect, disk, write_report
from grpo.report.disk import size_text, trial_usage


def _trial_folder(root, name: str, ckpt_bytes: int = 50_000, other_bytes: int = 7_000):
    folder = root / name
    (folder / "runs" / "seed0" / "ckpt" / "iter_0000004").mkdir(parents=True)
    (folder / "runs" / "seed0" / "ckpt" / "iter_0000004" / "model.bin").write_bytes(b"\1" * ckpt_bytes)
    (folder / "runs" / "seed0" / "ckpt" / "latest_checkpointed_iteration.txt").write_text("4")
    (folder / "metrics.jsonl").write_bytes(b"\1" * other_bytes)
    return folder


def _du(path) -> int:
    """What GNU du says the folder takes (bytes of allocated blocks, links not followed, hard links once)."""
    return int(subprocess.run(["du", "-s", "--block-size=1", str(path)], capture_output=True, text=True,
                              check=True).stdout.split()[0])


def test_a_trial_folder_is_measured_as_du_does_with_its_checkpoints_apart(tmp_path):
    a = _trial_folder(tmp_path, "a")
    outside = tmp_path / "big.bin"
    outside.write_bytes(b"\1" * 3_000_000)
    os.symlink(outside, a / "runs" / "linked.bin")  # a link is counted, what it points to is not
    os.symlink(tmp_path, a / "runs" / "loop")  # nor a folder it points to (no loops, no double counting)
    os.link(a / "metrics.jsonl", a / "metrics_copy.jsonl")  # a hard link is one file
    b = _trial_folder(tmp_path, "b", ckpt_bytes=120_000)
    report = trial_usage({0: a, 1: b, 2: tmp_path / "missing", 3: None})
    assert set(report.usage) == {0, 1}  # a missing folder is unknown, not zero
    assert report.stopped is None and report.skipped == 0
    for number, folder in ((0, a), (1, b)):
        usage = report.usage[number]
        assert usage.complete
        if shutil.which("du"):
            assert usage.total == _du(folder)
        ckpt = folder / "runs" / "seed0" / "ckpt"
        assert usage.checkpoints == (_du(ckpt) if shutil.which("du") else usage.checkpoints)
        assert usage.checkpoints >= (50_000 if number == 0 else 120_000)
        assert usage.total - usage.checkpoints < 100_000  # the outside file was not followed
    assert report.total == report.usage[0].total + report.usage[1].total


def test_the_walk_is_bounded_and_says_what_it_left_out(tmp_path, monkeypatch):
    folders = {n: _trial_folder(tmp_path, str(n)) for n in range(5)}
    full = trial_usage(folders)
    entries = 9  # each folder: metrics.jsonl, runs, seed0, ckpt, iter_0000004, model.bin, latest...txt = 7
    bounded = trial_usage(folders, max_entries=entries)
    assert bounded.usage[0] == full.usage[0]
    assert not bounded.usage[1].complete and bounded.usage[1].total < full.usage[1].total  # a lower bound
    assert set(bounded.usage) == {0, 1} and bounded.skipped == 3
    assert bounded.stopped == "the walk stops after 9 files and folders"
    monkeypatch.setattr(disk, "_CHECK_EVERY", 1)
    timed = trial_usage(folders, max_seconds=-1.0)
    assert timed.stopped == "the walk stops after -1 s" and timed.skipped == 4
    # A subfolder that cannot be read: the rest is counted, and the figure is marked a lower bound.
    scandir = os.scandir

    def refuse(path):
        if str(path).endswith("ckpt"):
            raise PermissionError(13, "Permission denied", str(path))
        return scandir(path)

    monkeypatch.setattr(disk.os, "scandir", refuse)
    unreadable = trial_usage({0: folders[0]}).usage[0]
    assert not unreadable.complete and 0 < unreadable.total < full.usage[0].total


def test_size_text():
    assert [size_text(v) for v in (0, 999, 1_500, 49_152, 1_800_000, 44_000_000, 2.1e9, None, float("nan"))] == [
        "0 B", "999 B", "1.5 kB", "49 kB", "1.8 MB", "44 MB", "2.1 GB", "", ""]


def test_the_report_shows_disk_per_trial_and_in_all(tmp_path):
    study = make_study(tmp_path, chain=True)  # trial 3 failed before it had a folder; 6 -> 7 -> 8 checkpoint
    frames = collect(study)
    trials = frames.trials.set_index("number")
    assert trials["disk_bytes"].isna().tolist() == [n == 3 for n in trials.index]
    assert (trials.loc[[6, 7, 8], "checkpoint_bytes"] >= CHECKPOINT_BYTES).all()
    assert (trials.loc[[0, 1, 2, 4, 5], "checkpoint_bytes"] == 0).all()
    assert not trials["disk_partial"].any()
    page = write_report(study, tmp_path / "r").read_text()
    facts = re.search(r'<p class="disk">(.*?)</p>', page).group(1)
    total = size_text(trials["disk_bytes"].sum())
    ckpt = size_text(trials["checkpoint_bytes"].sum())
    assert facts.startswith(f"Disk used by 8 trial folders: {total}, {ckpt} of it checkpoints (")
    assert "in 2 attempts a retry superseded" in facts and "1 trial without a folder" in facts
    table = re.search(r'<table class="sortable trials">.*?</table>', page, re.S).group(0)
    assert "<th>disk</th>" in table
    eight = int(trials.at[8, "disk_bytes"])
    assert f'<span data-sort="{eight}">{size_text(eight)}</span>' in table
    cost = re.search(r'<table class="params cost-table">.*?</table>', page, re.S).group(0)
    assert "<th >disk</th>" in cost and size_text(eight) in cost
