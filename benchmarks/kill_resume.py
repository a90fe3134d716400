"""Crash-resume under random driver kills: SIGKILL the driver at N random moments of a 6-trial study,
rerun after each, then let it finish; count what was lost or repeated, per storage.

    python benchmarks/kill_resume.py [--kills 10] [--storages journal,sqlite,postgresql] [--seed 0] [--study pbt]

The study: 6 trials of a 10-iteration curve (0.5 s per iteration, a checkpoint every 3), 2 at a time,
a seeded random sampler over 6 values of clip_ratio (so a restart that replayed its first proposals, or
reran a finished point, would show). Printed per storage: complete trials, distinct parameter sets,
points rerun after they completed, trials left RUNNING, attempts charged to trials, wall time. PostgreSQL
runs on a throwaway server started from Debian's binaries (tests/pg_server.py), skipped when not installed.

``--study pbt``: the same kills on a population-based study of the real tiny engine (grpo/sweep/run/pbt.py):
4 members, 12 iterations in 3 generations of 4 (12 segment trials), each branch a resume of its parent's
checkpoint. Printed: segments complete of 12, (generation, member) slots run twice, branches whose run did not
resume from their parent's checkpoint at the branch iteration (or their own retry's), trials left RUNNING.
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
        "study": "kills",
        "base": "grpo_trainer_tiny_cpu",
        "trials": 6,
        "concurrency": 2,
        "retries": 1,
        "overrides": ["megatron_training.train_iters=10", "megatron_training.save_interval=3"],
        "search": {"rl_config.clip_ratio": "choice(0.05, 0.1, 0.15, 0.2, 0.25, 0.3)"},
        "objective": {"metric": "grpo/score/mean", "reduce": "last"},
        "sampler": {"name": "random", "seed": 0},
        "pruner": "none",
        "backend": "_bench_backends:SlowCheckpointBackend",
    }
    if storage:
        spec["storage"] = storage
    path = folder / "kills.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def _pbt_spec(folder: Path, storage: str | None) -> Path:
    spec = {
        "study": "kills",
        "base": "grpo_trainer_tiny_cpu",
        "concurrency": 2,
        "retries": 1,
        "overrides": [
            "megatron_training.train_iters=12",
            "megatron_training.save_interval=12",
            "engine.eval_every=4",
            "engine.eval_size=32",
        ],
        "search": {
            "actor_config.lr": "tag(log, interval(1e-5, 3e-4))",
            "rl_config.clip_ratio": "choice(0.1, 0.2, 0.3)",
        },
        "objective": {"metric": "eval/acc_greedy", "reduce": "auc"},
        "sampler": {"name": "random", "seed": 0},
        "scheduler": {"kind": "pbt", "population": 4, "interval": 4, "explore": {"resample_probability": 0.5}},
    }
    if storage:
        spec["storage"] = storage
    path = folder / "kills.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def _pbt_summary(trials: list[optuna.trial.FrozenTrial]) -> str:
    """What a killed and resumed population must show: every segment once, every branch from its parent."""
    segs = [t for t in trials if "pbt_generation" in t.user_attrs]
    done = [t for t in segs if t.state.name == "COMPLETE"]
    slots = [(t.user_attrs["pbt_generation"], t.user_attrs["pbt_member"]) for t in done]
    twice = len(slots) - len(set(slots))
    by_number = {t.number: t for t in trials}
    wrong = 0
    for t in done:
        parent = by_number.get(t.user_attrs.get("branch_of", -1))
        if parent is None:
            continue
        log = (Path(t.user_attrs["trial_dir"]) / "runs" / "seed0" / "train.log").read_text()
        at = t.user_attrs["branched_at"]
        sources = [
            Path(parent.user_attrs["trial_dir"]),
            *(
                Path(u.user_attrs["trial_dir"])
                for u in trials
                if u.number < t.number
                and u.user_attrs.get("trial_dir")
                and (u.user_attrs.get("pbt_generation"), u.user_attrs.get("pbt_member"))
                == (t.user_attrs["pbt_generation"], t.user_attrs["pbt_member"])
            ),
        ]
        resumed = [line for line in log.splitlines() if "resumed from" in line]
        ok = resumed and any(str(src / "runs" / "seed0" / "ckpt") in resumed[0] for src in sources)
        ok = ok and (str(Path(parent.user_attrs["trial_dir"])) not in resumed[0] or f"at iteration {at}" in resumed[0])
        wrong += not ok
    return (
        f"{len(set(slots))} of 12 segments complete, {twice} run twice, {wrong} branches not resumed from "
        f"their parent's checkpoint, {sum(t.state.name == 'RUNNING' for t in trials)} left RUNNING, "
        f"{sum(t.state.name == 'FAIL' for t in segs)} FAIL records of killed attempts"
    )


def _cli(spec: Path, folder: Path) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(HERE), str(REPO), os.environ.get("PYTHONPATH", "")]))
    return subprocess.Popen(
        [sys.executable, "-m", "grpo.cli", "run", str(spec), "--no-report"],
        cwd=folder,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )


def _first_start(proc: subprocess.Popen) -> bool:
    """Read the driver's lines until a trial starts (True) or it exits (False): kills land among running
    trials, whatever the machine's start-up time (Ray, imports) is."""
    assert proc.stdout is not None
    for line in proc.stdout:
        if " started" in line:
            return True
    return False


def run(storage_name: str, kills: int, seed: int, study: str = "curves") -> None:
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
        spec = (_pbt_spec if study == "pbt" else _spec)(folder, url)
        rng = random.Random(seed)
        started = time.perf_counter()
        landed = 0
        for _ in range(kills):
            proc = _cli(spec, folder)
            _first_start(proc)
            # trials take ~5 s each: kills land while trials run and ask (a pbt generation of real runs takes longer)
            time.sleep(rng.uniform(0.0, 8.0 if study == "pbt" else 3.0))
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                landed += 1
            proc.wait()
        final = _cli(spec, folder)
        final.communicate()
        code = final.returncode
        wall = time.perf_counter() - started
        storage = url or optuna.storages.JournalStorage(
            optuna.storages.journal.JournalFileBackend(str(folder / "studies" / "kills" / "journal.log"))
        )
        loaded = optuna.load_study(study_name="kills", storage=storage)
        trials = loaded.get_trials(deepcopy=False)
        if study == "pbt":
            print(
                f"{storage_name} (pbt): {landed} of {kills} kills landed mid-run; final run exit {code}; "
                f"{_pbt_summary(trials)}; {wall:.0f} s",
                flush=True,
            )
            return
        complete = [t for t in trials if t.state.name == "COMPLETE" and not _repeat(t)]
        rerun = sum(
            1
            for t in complete
            for u in trials
            if u.number > t.number
            and u.params == t.params
            and u.state.name in ("COMPLETE", "RUNNING")
            and "retry_of" not in u.user_attrs
            and not _repeat(u)
        )
        print(
            f"{storage_name}: {landed} of {kills} kills landed mid-run; final run exit {code}; "
            f"{len(complete)} complete, {len({t.params['rl_config.clip_ratio'] for t in complete})} distinct "
            f"parameter sets, {rerun} points rerun after completing, "
            f"{sum(t.state.name == 'RUNNING' for t in trials)} left RUNNING, "
            f"{sum(t.user_attrs.get('attempt', 1) > 1 for t in complete)} attempts charged, "
            f"{sum(_killed(t) for t in trials)} FAIL records of killed attempts, "
            f"{sum(_repeat(t) for t in trials)} repeated proposals answered from earlier trials (not run), "
            f"{wall:.0f} s",
            flush=True,
        )


def _killed(trial: optuna.trial.FrozenTrial) -> bool:
    return trial.state.name == "FAIL" and not _repeat(trial)


def _repeat(trial: optuna.trial.FrozenTrial) -> bool:
    return "repeat_of" in trial.user_attrs  # told an earlier trial's result, never run (grpo/sweep/study/repeats.py)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=10)
    parser.add_argument("--storages", default="journal,sqlite,postgresql")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--study", choices=("curves", "pbt"), default="curves")
    args = parser.parse_args()
    for name in args.storages.split(","):
        run(name, args.kills, args.seed, args.study)


if __name__ == "__main__":
    main()
