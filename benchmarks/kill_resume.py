"""Crash-resume under random driver kills: SIGKILL the driver at N random moments of a 6-trial study,
rerun after each, then let it finish; count what was lost or repeated, per storage.

    python benchmarks/kill_resume.py [--kills 10] [--storages journal,sqlite,postgresql] [--seed 0]

The study: 6 trials of a 10-iteration curve (0.5 s per iteration, a checkpoint every 3), 2 at a time,
a seeded random sampler over 6 values of clip_ratio (so a restart that replayed its first proposals, or
reran a finished point, would show). Printed per storage: complete trials, distinct parameter sets,
points rerun after they completed, trials left RUNNING, attempts charged to trials, wall time. PostgreSQL
runs on a throwaway server started from Debian's binaries (tests/pg_server.py), skipped when not installed.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import optuna
import yaml

HERE = Path(__file__).resolve().parent
REPO = HERE.parent


def _spec(folder: Path, storage: str | None) -> Path:
    spec = {
        "study": "kills", "base": "grpo_trainer_tiny_cpu", "trials": 6, "concurrency": 2, "retries": 1,
        "overrides": ["megatron_training.train_iters=10", "megatron_training.save_interval=3"],
        "search": {"rl_config.clip_ratio": "choice(0.05, 0.1, 0.15, 0.2, 0.25, 0.3)"},
        "objective": {"metric": "grpo/score/mean", "reduce": "last"},
        "sampler": {"name": "random", "seed": 0}, "pruner": "none",
        "backend": "_bench_backends:SlowCheckpointBackend",
    }
    if storage:
        spec["storage"] = storage
    path = folder / "kills.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def _cli(spec: Path, folder: Path) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(HERE), str(REPO), os.environ.get("PYTHONPATH", "")]))
    return subprocess.Popen([sys.executable, "-m", "grpo.cli", "run", str(spec), "--no-report"], cwd=folder,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            start_new_session=True)


def _first_start(proc: subprocess.Popen) -> bool:
    """Read the driver's lines until a trial starts (True) or it exits (False): kills land among running
    trials, whatever the machine's start-up time (Ray, imports) is."""
    assert proc.stdout is not None
    for line in proc.stdout:
        if " started" in line:
            return True
    return False


def run(storage_name: str, kills: int, seed: int) -> None:
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        folder = Path(tmp)
        if storage_name == "postgresql":
            sys.path.insert(0, str(REPO / "tests"))
            from pg_server import postgres_bin, postgres_server

            bindir = postgres_bin()
            if bindir is None:
                print("postgresql: skipped (no PostgreSQL server binaries under /usr/lib/postgresql)")
                return
            url: str | None = stack.enter_context(postgres_server(bindir))
        else:
            url = {"journal": None, "sqlite": f"sqlite:///{folder / 'kills.db'}"}[storage_name]
        spec = _spec(folder, url)
        rng = random.Random(seed)
        started = time.perf_counter()
        landed = 0
        for _ in range(kills):
            proc = _cli(spec, folder)
            _first_start(proc)
            time.sleep(rng.uniform(0.0, 3.0))  # trials take ~5 s each: kills land while trials run and ask
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                landed += 1
            proc.wait()
        final = _cli(spec, folder)
        final.communicate()
        code = final.returncode
        wall = time.perf_counter() - started
        storage = url or optuna.storages.JournalStorage(
            optuna.storages.journal.JournalFileBackend(str(folder / "studies" / "kills" / "journal.log")))
        study = optuna.load_study(study_name="kills", storage=storage)
        trials = study.get_trials(deepcopy=False)
        complete = [t for t in trials if t.state.name == "COMPLETE" and not _repeat(t)]
        rerun = sum(1 for t in complete for u in trials if u.number > t.number and u.params == t.params
                    and u.state.name in ("COMPLETE", "RUNNING") and "retry_of" not in u.user_attrs
                    and not _repeat(u))
        print(f"{storage_name}: {landed} of {kills} kills landed mid-run; final run exit {code}; "
              f"{len(complete)} complete, {len({t.params['rl_config.clip_ratio'] for t in complete})} distinct "
              f"parameter sets, {rerun} points rerun after completing, "
              f"{sum(t.state.name == 'RUNNING' for t in trials)} left RUNNING, "
              f"{sum(t.user_attrs.get('attempt', 1) > 1 for t in complete)} attempts charged, "
              f"{sum(_killed(t) for t in trials)} FAIL records of killed attempts, "
              f"{sum(_repeat(t) for t in trials)} repeated proposals answered from earlier trials (not run), "
              f"{wall:.0f} s", flush=True)


def _killed(trial: optuna.trial.FrozenTrial) -> bool:
    return trial.state.name == "FAIL" and not _repeat(trial)


def _repeat(trial: optuna.trial.FrozenTrial) -> bool:
    return "repeat_of" in trial.user_attrs  # told an earlier trial's result, never run (grpo/sweep/study/repeats.py)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=10)
    parser.add_argument("--storages", default="journal,sqlite,postgresql")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    for name in args.storages.split(","):
        run(name, args.kills, args.seed)


if __name__ == "__main__":
    main()
