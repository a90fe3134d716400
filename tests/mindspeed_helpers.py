"""Shared by the mindspeed backend tests (and usable by sweep-level tests): converted-checkpoint
fixtures, settings pointing at the STAND-IN MindSpeed-RL entry point, small configs, process checks."""

import functools
import os
import time
from pathlib import Path

import yaml

from grpo.config import load_config
from grpo.sweep.spec.models import MindSpeedSpec

STANDIN = Path(__file__).parent / "standin_mindspeed"
BASE = "grpo_trainer_qwen25_7b_A3"
KEYS = yaml.safe_load((STANDIN / "mindspeed_keys.yaml").read_text())  # what MindSpeed-RL accepts


def convert(root: Path, tp: int, pp: int) -> Path:
    """A Megatron checkpoint as MindSpeed-LLM's converter lays it out for one TP/PP split."""
    path = root / f"qwen7b-tp{tp}-pp{pp}"
    for t in range(tp):
        for p in range(pp):
            (path / "release" / (f"mp_rank_{t:02d}" if pp == 1 else f"mp_rank_{t:02d}_{p:03d}")).mkdir(parents=True)
    (path / "latest_checkpointed_iteration.txt").write_text("release")
    return path


def make_weights(root: Path) -> Path:
    """Converted Qwen2.5-7B checkpoints for TP2 PP2 and TP4 PP1 (not TP4 PP2) under ``root``."""
    convert(root, 2, 2)
    convert(root, 4, 1)
    return root


def settings_for(weights: Path, env: dict | None = None, **kw) -> MindSpeedSpec:
    """Settings that run the stand-in; ``env`` adds to a default that keeps it out of Ray (a Ray left
    initialised by another test must not make it wait for NPUs); ``GRPO_STANDIN_RAY=1`` lets it join."""
    defaults = dict(path=STANDIN.resolve(), checkpoints={"pattern": str(weights / "qwen7b-tp{tp}-pp{pp}")},
                    stall_timeout=30.0, kill_grace=2.0)
    defaults.update(kw)
    return MindSpeedSpec(env={"GRPO_STANDIN_ITER_S": "0.01", "GRPO_STANDIN_RAY": "0", **(env or {})}, **defaults)


@functools.lru_cache(maxsize=64)
def config(*overrides: str, iters: int = 6, layout: str = "tp2_pp2"):
    """The Qwen2.5-7B A3 config with a layout and a short run (cached: composing costs ~0.3 s; the
    backend never changes a config)."""
    return load_config(BASE, [f"layout={layout}", f"megatron_training.train_iters={iters}",
                              "megatron_training.save_interval=2", *overrides])


class Recorder:
    """A report callback that records calls and asks to stop at ``stop_at``."""

    def __init__(self, stop_at: int | None = None):
        self.calls: list[tuple[int, dict]] = []
        self.stop_at = stop_at

    def __call__(self, iteration: int, metrics: dict) -> bool:
        self.calls.append((iteration, metrics))
        return self.stop_at is not None and iteration >= self.stop_at


def gone(pid: int, within: float = 5.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        try:  # a zombie is gone for our purposes
            if Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z":
                return True
        except OSError:
            return True
        time.sleep(0.05)
    return False


def standin_pid(run_dir: Path) -> int:
    for line in (run_dir / "train.log").read_text().splitlines():
        if line.startswith("(train pid="):
            return int(line.split("pid=")[1].split(")")[0])
    raise AssertionError("no stand-in line in train.log")


def composed_args(run_dir: Path) -> dict[str, str]:
    """The Megatron arguments the stand-in printed (Megatron's ``_print_args`` block) in ``run_dir/train.log``:
    what it really composed, whatever grpo-sweep rendered."""
    args: dict[str, str] = {}
    inside = False
    for line in (run_dir / "train.log").read_text().splitlines():
        text = line.split(") ", 1)[1] if line.startswith("(train pid=") else line
        if "-- arguments --" in text:
            inside = True
        elif "end of arguments" in text:
            break
        elif inside and " ..." in text:
            key, _, value = text.strip().partition(" ")
            args[key] = value.lstrip(". ").strip()
    if not args:
        raise AssertionError("the stand-in printed no arguments block")
    return args
