"""Helpers for the sweep tests: writing specs, running the CLI in a subprocess, reading the study back."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from pathlib import Path

import optuna
import yaml

REPO = Path(__file__).resolve().parents[1]
TESTS = Path(__file__).resolve().parent



@contextlib.contextmanager
def module_ray(num_cpus: int = 4):
    """One local Ray for a test module (the scheduler reuses an initialised Ray and leaves it running); its
    workers import the test backends from tests/."""
    import ray

    ray.init(num_cpus=num_cpus, include_dashboard=False, log_to_driver=False, configure_logging=False,
             runtime_env={"env_vars": {"PYTHONPATH": str(TESTS)}})  # fmt: skip
    try:
        yield
    finally:
        ray.shutdown()

def write_spec(folder: Path, name: str = "s", **fields) -> Path:
    spec = {
        "study": name,
        "base": "grpo_trainer_tiny_cpu",
        "overrides": ["megatron_training.train_iters=12", "megatron_training.save_interval=4"],
        "search": {"rl_config.clip_ratio": "interval(0.05, 0.3)"},
        "objective": {"metric": "grpo/score/mean", "direction": "maximize", "reduce": "last"},
        "sampler": {"name": "random", "seed": 0},
        "pruner": {"name": "none"},
        "trials": 3,
        "concurrency": 2,
        "retries": 1,
        "backend": "sweep_test_backends:CurveBackend",
    }
    spec.update(fields)
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def cli_env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS), str(REPO), env.get("PYTHONPATH", "")])
    return env


def start_cli(args: list[str], cwd: Path, **kw) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "grpo.cli", *args],
        cwd=cwd, env=cli_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True, **kw,
    )


def run_cli(args: list[str], cwd: Path, timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "grpo.cli", *args], cwd=cwd, env=cli_env(),
                          capture_output=True, text=True, timeout=timeout)


def load(folder: Path, name: str = "s", storage: str | None = None) -> optuna.Study:
    if storage is None:
        backend = optuna.storages.journal.JournalFileBackend(str(folder / "studies" / name / "journal.log"))
        storage = optuna.storages.JournalStorage(backend)
    return optuna.load_study(study_name=name, storage=storage)


def states(study: optuna.Study) -> dict[str, int]:
    """Trials by state; repeated proposals told an earlier trial's result (``repeat_of``) never ran: left out."""
    out: dict[str, int] = {}
    for t in study.get_trials(deepcopy=False):
        if "repeat_of" in t.user_attrs:
            continue
        out[t.state.name] = out.get(t.state.name, 0) + 1
    return out


def wait_for(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def count_lines(path: Path) -> int:
    try:
        return sum(1 for _ in open(path))
    except OSError:
        return 0
