"""The terminal view of a running study (grpo/sweep/commands/progress.py) and the snapshots the driver hands it:
the last frame is the final state, running trials show x/N iterations, the study an ETA, and off a
terminal a progress line comes between a trial's start and end lines."""

from __future__ import annotations

import io

import pytest
import ray
from rich.console import Console
from sweep_helpers import TESTS, write_spec

from grpo.sweep.commands.progress import LiveProgress
from grpo.sweep.run.driver import run_study
from grpo.sweep.run.snapshot import ProgressSnapshot, RunningTrial
from grpo.sweep.spec.load import load_spec

RUNNING = RunningTrial(3, {"rl_config.clip_ratio": 0.186}, 1, 6, 0.7576, iterations=12, elapsed_s=6.0)
MIDWAY = ProgressSnapshot(3, [RUNNING], (1, 0.9648), total=4, done={"complete": 2, "pruned": 1},
                          mean_wall_s=10.0, concurrency=2)
FINAL = ProgressSnapshot(4, [], (1, 0.9648), total=4, done={"complete": 3, "pruned": 1}, mean_wall_s=10.0,
                         concurrency=2)


def _spec(tmp_path, monkeypatch, **fields):
    monkeypatch.chdir(tmp_path)
    return load_spec(str(write_spec(tmp_path, **fields)))


def _terminal() -> tuple[Console, io.StringIO]:
    out = io.StringIO()
    return Console(file=out, force_terminal=True, width=120, color_system=None), out


def test_eta_is_unknown_until_a_trial_finished_then_shares_the_work_over_the_slots():
    assert ProgressSnapshot(0, [RUNNING], None, total=4).eta_s is None
    # trial 3 needs 6 s more at its pace (6 s for 6 of 12); 2 trials to start at 10 s; 2 slots: (6 + 20) / 2
    assert ProgressSnapshot(1, [RUNNING], None, total=4, mean_wall_s=10.0, to_start=2, concurrency=2).eta_s == 13.0
    # the slowest running trial bounds it from below
    assert ProgressSnapshot(3, [RUNNING], None, total=4, mean_wall_s=1.0, concurrency=4).eta_s == 6.0
    starting = RunningTrial(4, {}, 1, 0, None, iterations=12, elapsed_s=3.0)  # no iteration yet: the mean
    assert ProgressSnapshot(3, [starting], None, total=4, mean_wall_s=10.0).eta_s == 7.0
    assert FINAL.eta_s == 0.0


def test_the_last_frame_is_the_final_state_not_the_last_periodic_one(tmp_path, monkeypatch):
    console, out = _terminal()
    with LiveProgress(_spec(tmp_path, monkeypatch, trials=4), console) as view:
        view.update(MIDWAY)
        view._live.refresh()
        midway = out.getvalue().split("\x1b[2K")[-1]
        view.update(FINAL)
    last = out.getvalue().split("\x1b[2K")[-1]  # rich clears the previous frame's lines before each frame
    assert "6/12" in midway and "clip_ratio=0.186" in midway and "ETA 0:0" in midway and "3/4" in midway
    assert "clip_ratio" not in last and "running" not in last and "ETA" not in last
    assert "4/4 trials done (3 complete, 1 pruned) in 0:0" in last and "best: trial 1 = 0.9648" in last


def test_off_a_terminal_a_progress_line_comes_between_event_lines(tmp_path, monkeypatch):
    out = io.StringIO()
    console = Console(file=out, force_terminal=False, width=80)
    spec = _spec(tmp_path, monkeypatch, trials=4)
    view = LiveProgress(spec, console, line_every_s=30.0)
    assert not view.due()  # nothing to say right after the start
    view.log("trial 3 started: clip_ratio=0.186")
    view._last -= 31  # 31 s later
    assert view.due()
    view.update(MIDWAY)
    assert not view.due()
    lines = out.getvalue().splitlines()
    assert lines[0] == "trial 3 started: clip_ratio=0.186"
    line = lines[1]  # one line, never wrapped at the console's width
    assert len(lines) == 2 and len(line) > 80
    assert "s: 3/4 trials done (2 complete, 1 pruned); running #3 it 6/12 (0.7576)" in line
    assert line.endswith("; best so far: trial 1 = 0.9648; ETA 0:06")  # trial 3 needs 6 s more at its pace
    assert "ETA unknown" in view.line(ProgressSnapshot(0, [RUNNING], None, total=4))
    assert view.line(FINAL).endswith("4/4 trials done (3 complete, 1 pruned); best so far: trial 1 = 0.9648")


class Recorder:
    """A progress view that keeps every snapshot the driver hands it."""

    def __init__(self):
        self.snapshots: list[ProgressSnapshot] = []
        self.lines: list[str] = []

    def due(self) -> bool:
        return True

    def update(self, snapshot: ProgressSnapshot) -> None:
        self.snapshots.append(snapshot)

    def log(self, message: str) -> None:
        self.lines.append(message)


@pytest.fixture
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False,
             runtime_env={"env_vars": {"PYTHONPATH": str(TESTS)}})
    yield
    ray.shutdown()


def test_the_driver_hands_over_iterations_an_eta_and_a_final_snapshot_with_nothing_running(
    tmp_path, monkeypatch, local_ray
):
    spec = _spec(tmp_path, monkeypatch, trials=3, concurrency=2, backend="sweep_test_backends:SlowCurveBackend",
                 overrides=["megatron_training.train_iters=6", "megatron_training.save_interval=3"])
    recorder = Recorder()
    run_study(spec, progress=recorder)
    during = [t for s in recorder.snapshots for t in s.running]
    assert during and {t.iterations for t in during} == {6} and all(0 <= t.iteration <= 6 for t in during)
    assert any(s.eta_s is None for s in recorder.snapshots)  # before the first trial finished
    known = [s for s in recorder.snapshots if s.eta_s is not None]
    assert known and all(s.eta_s > 0 for s in known if any(0 < t.iteration < t.iterations for t in s.running))
    final = recorder.snapshots[-1]
    assert (final.counted, final.total, final.running, final.done, final.to_start) == (3, 3, [], {"complete": 3}, 0)
    assert final.mean_wall_s is not None and final.mean_wall_s > 0.6 and final.eta_s == 0.0
