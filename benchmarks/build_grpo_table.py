"""Build the tabular GRPO benchmark that benchmarks/search_efficiency.py replays: real engine runs, full curves.

A grid over the knobs of the shipped studies on the default config ``grpo_trainer_tiny_cpu``,
``actor_config.lr`` x ``rl_config.clip_ratio`` x ``rl_config.init_kl_coef`` (GRID below; ``--lr``, ``--clip``,
``--kl`` and ``--seeds`` replace an axis, and the header records the grid and seeds actually run), each run
with its seed as ``megatron_training.seed`` = ``generate_config.sampling_config.seed``, held-out evaluation
every 10 (the base policy is iteration 0). ``--override`` adds a config override to every run (another
landscape: another task draw, a weaker base policy); the header records it. Every run is the real engine
(``grpo.engine.train``); its per-iteration metrics are recorded whole, in the spirit of the tabular
benchmarks of HPO research (LCBench, YAHPO), so samplers and pruners can be compared at zero cost.

The table is ``benchmarks/data/grpo_table.json.gz``: a header (git commit, config, overrides, grid, date,
versions) and one record per (configuration, seed) with its curves as columns. Rebuilding is resumable: a
(configuration, seed) already in the table is skipped, and the table is rewritten atomically after each run.
Runs go two at a time in fresh subprocesses, one torch thread each, at the lowest CPU priority. (The
processes are spawned: they import this file again, so do not edit it while a build runs.)

    # the shipped table (eff1fd8: the tiny config's warm start shipped as package data; 63 runs, ~27 min)
    nice -n 19 .venv/bin/python benchmarks/build_grpo_table.py --commit eff1fd8 --iters 80 --out NEW.json.gz \
        --lr 1e-5 2e-5 3e-5 6e-5 1e-4 2e-4 4e-4 --clip 0.1 0.2 0.3 --kl 0.01 --seeds 1234 1235 1236
    # the second landscape: a weaker base policy (200 warm-start steps instead of 250: base 0.26, not 0.72)
    nice -n 19 .venv/bin/python benchmarks/build_grpo_table.py --commit eff1fd8 --iters 80 \
        --out benchmarks/data/grpo_table_warm200.json.gz --override engine.warm_start_steps=200 \
        --lr 1e-5 3e-5 1e-4 2e-4 4e-4 --clip 0.1 0.3 --kl 0.01 --seeds 1234 1235 1236
    .venv/bin/python benchmarks/build_grpo_table.py --smoke                   # 2 configs x 3 iterations, to /tmp
"""

from __future__ import annotations

import argparse
import gzip
import itertools
import json
import multiprocessing as mp
import os
import platform
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
DEFAULT_OUT = HERE / "data" / "grpo_table.json.gz"
CONFIG = "grpo_trainer_tiny_cpu"
# The knobs of the shipped studies that move held-out accuracy on this task (docs/engine.md: lr decides
# learning vs collapse; the clip ratio and the KL weight are what clip_study and kl_study search).
GRID: dict[str, list[float]] = {
    "actor_config.lr": [3e-5, 1e-4, 2e-4, 4e-4],
    "rl_config.clip_ratio": [0.1, 0.2, 0.3],
    "rl_config.init_kl_coef": [0.001, 0.05],
}
SEEDS = [1234, 1235]
# Recorded per iteration. eval/* exist at evaluated iterations only (0, 10, ..., last); the rest at 1..last.
METRICS = [
    "eval/acc_greedy",
    "eval/acc",
    "eval/strict_format",
    "grpo/score/mean",
    "grpo/acc/mean",
    "actor/entropy",
    "actor/kl_loss",
    "actor/pg_clipfrac",
    "actor/grad_norm",
    "response_length/mean",
    "grpo/zero_variance_groups",
]

Params = dict[str, float]


def run_key(params: Params, seed: int) -> str:
    return json.dumps({**params, "seed": seed}, sort_keys=True)


EXTRA: list[str] = []  # --override: the landscape's own overrides (another task seed, a bigger model)


def overrides_for(params: Params, seed: int, iters: int, eval_every: int, extra: list[str] | None = None) -> list[str]:
    return [
        *(EXTRA if extra is None else extra),
        f"megatron_training.train_iters={iters}",
        f"engine.eval_every={eval_every}",
        "engine.num_threads=1",
        f"megatron_training.seed={seed}",
        f"generate_config.sampling_config.seed={seed}",
        *(f"{k}={v!r}" for k, v in params.items()),
    ]


def export_commit(rev: str = "HEAD") -> Path:
    """A clean copy of one commit's tree (``git archive``): every run of the table uses that commit's code,
    whatever other work is half-edited in the checkout meanwhile."""
    commit = _git("rev-parse", rev)
    folder = Path(tempfile.gettempdir()) / "grpo_table_code" / commit
    if not (folder / "grpo" / "__init__.py").exists():
        folder.mkdir(parents=True, exist_ok=True)
        archive = subprocess.run(["git", "archive", commit], cwd=ROOT, capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(folder)], input=archive, check=True)
    return folder


def one_run(job: tuple[Params, int, int, int, str, list[str]]) -> dict[str, Any] | str:
    """One engine run in this (fresh) process: its record, or the error as text. Lowest CPU priority."""
    params, seed, iters, eval_every, code, extra = job
    EXTRA[:] = extra  # a spawned process starts with the module's empty list
    os.nice(19 - os.nice(0))  # already under nice -n 19 when started so; raise it when not
    sys.path.insert(0, code)  # ahead of the editable install's finder, which sits after sys.path's
    try:
        return _run(params, seed, iters, eval_every)
    except Exception as err:  # keep the other runs going; a rerun of the builder retries this one
        return f"{type(err).__name__}: {err}"


def _run(params: Params, seed: int, iters: int, eval_every: int) -> dict[str, Any]:
    from grpo.config import load_config
    from grpo.engine import train

    cfg = load_config(CONFIG, overrides_for(params, seed, iters, eval_every))
    lines: dict[int, dict[str, float]] = {}

    def keep(iteration: int, metrics: dict[str, float]) -> bool:
        lines.setdefault(iteration, {}).update({k: float(v) for k, v in metrics.items() if k in METRICS})
        return False

    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="grpo_table_") as run_dir:
        train(cfg, run_dir=Path(run_dir), callback=keep)
    wall = time.perf_counter() - t0
    iterations = sorted(lines)
    # Columns aligned on `iteration`; None where a metric was not logged (eval/* between evaluations).
    curves: dict[str, list[float | None]] = {"iteration": [float(i) for i in iterations]}
    for name in METRICS:
        col = [lines[i].get(name) for i in iterations]
        if any(v is not None for v in col):
            curves[name] = [None if v is None else round(v, 6) for v in col]
    return {"params": params, "seed": seed, "wall_s": round(wall, 1), "curves": curves}


def _git(*args: str) -> str:
    try:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def header(
    iters: int,
    eval_every: int,
    commit: str = "HEAD",
    grid: dict[str, list[float]] | None = None,
    seeds: list[int] | None = None,
) -> dict[str, Any]:
    import torch

    dirty = _git("status", "--porcelain", "--", "grpo/engine", "grpo/config", "configs")
    return {
        "what": "tabular GRPO benchmark: real grpo.engine runs on a grid, full per-iteration curves",
        "git_commit": _git("rev-parse", commit),
        "engine_or_config_modified": bool(dirty and dirty != "unknown"),
        "config": CONFIG,
        "overrides": [
            *EXTRA,
            *overrides_for({}, 0, iters, eval_every, [])[:3],
            "megatron_training.seed=S",
            "generate_config.sampling_config.seed=S",
        ],
        "grid": grid or GRID,  # the axes actually run (the flags replace GRID's)
        "seeds": seeds or SEEDS,
        "train_iters": iters,
        "eval_every": eval_every,
        "metrics": METRICS,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "host_cpus": os.cpu_count(),
    }


def load_table(path: Path) -> dict[str, Any] | None:
    if not path.exists():
        return None
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        return json.load(fh)


def save_table(path: Path, table: dict[str, Any]) -> None:
    from grpo._fs import atomic_write

    def write(tmp: Path) -> None:
        # mtime=0: the same runs give the same bytes.
        with open(tmp, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as gz:
            gz.write(json.dumps(table, separators=(",", ":")).encode())

    atomic_write(path, write)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--iters", type=int, default=60)
    ap.add_argument("--eval-every", type=int, default=10)
    ap.add_argument("--jobs", type=int, default=2, help="runs at once (this machine has 2 cores)")
    ap.add_argument(
        "--code",
        choices=["head", "worktree"],
        default="head",
        help="run the committed tree (a clean git archive of --commit, the default) or the checkout as it is",
    )
    ap.add_argument(
        "--commit",
        default="HEAD",
        help="the commit whose engine runs (with --code head). The shipped table is the engine of 3898997: "
        "`--commit 3898997` rebuilds it; HEAD's engine differs since (token-mean loss, MindSpeed-RL's rewards)",
    )
    ap.add_argument("--smoke", action="store_true", help="2 configurations x 1 seed x 3 iterations, to /tmp")
    ap.add_argument("--lr", type=float, nargs="*", help="learning rates to run instead of the grid's (extend it)")
    ap.add_argument("--clip", type=float, nargs="*", help="clip ratios to run instead of the grid's")
    ap.add_argument("--kl", type=float, nargs="*", help="KL weights to run instead of the grid's (one value fixes it)")
    ap.add_argument("--seeds", type=int, nargs="*", help="seeds instead of 1234 1235")
    ap.add_argument(
        "--override",
        action="append",
        default=[],
        help="an extra config override for every run, e.g. engine.task_seed=4321 (another landscape; repeatable)",
    )
    args = ap.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    EXTRA[:] = args.override

    flags = {"actor_config.lr": args.lr, "rl_config.clip_ratio": args.clip, "rl_config.init_kl_coef": args.kl}
    axes = {k: flags[k] or v for k, v in GRID.items()}
    grid = [dict(zip(axes, values, strict=True)) for values in itertools.product(*axes.values())]
    seeds = args.seeds or SEEDS
    if args.smoke:
        grid, seeds, args.iters = grid[:2], SEEDS[:1], 3
        axes = {k: sorted({p[k] for p in grid}) for k in axes}
        if args.out == DEFAULT_OUT:
            args.out = Path(tempfile.gettempdir()) / "grpo_table_smoke.json.gz"

    fresh = {"header": header(args.iters, args.eval_every, args.commit, axes, seeds), "runs": []}
    table = load_table(args.out) or fresh
    old = table["header"]
    settings = (old["train_iters"], old["eval_every"], old["config"], old.get("overrides", []))
    if settings != (args.iters, args.eval_every, CONFIG, fresh["header"]["overrides"]):
        print(f"error: {args.out} holds runs of other settings; use another --out", file=sys.stderr)
        return 2
    done = {run_key(r["params"], r["seed"]) for r in table["runs"]}
    code = str(export_commit(args.commit)) if args.code == "head" else str(ROOT)
    table["header"].setdefault(
        "code", f"git archive {_git('rev-parse', args.commit)}" if args.code == "head" else "worktree"
    )
    todo = [
        (p, s, args.iters, args.eval_every, code, args.override)
        for s in seeds
        for p in grid
        if run_key(p, s) not in done
    ]
    print(f"{len(done)} runs in {args.out}, {len(todo)} to go, {args.jobs} at a time, code from {code}", flush=True)

    t0 = time.perf_counter()
    # A fresh process per run: torch state and the engine's caches never leak between runs.
    with mp.get_context("spawn").Pool(args.jobs, maxtasksperchild=1) as pool:
        for i, rec in enumerate(pool.imap_unordered(one_run, todo), 1):
            if isinstance(rec, str):
                print(f"[{i}/{len(todo)}] failed: {rec}", flush=True)
                continue
            table["runs"].append(rec)
            table["runs"].sort(key=lambda r: (r["seed"], *r["params"].values()))
            table["header"]["updated"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
            save_table(args.out, table)
            acc = [v for v in rec["curves"]["eval/acc_greedy"] if v is not None]
            print(
                f"[{i}/{len(todo)} {time.perf_counter() - t0:.0f}s] {rec['params']} seed {rec['seed']}: "
                f"{rec['wall_s']:.0f}s, held-out greedy {acc[0]:.3f} -> {acc[-1]:.3f}",
                flush=True,
            )
    size = args.out.stat().st_size if args.out.exists() else 0
    print(f"{len(table['runs'])} runs in {args.out} ({size / 1024:.0f} KiB), built in {time.perf_counter() - t0:.0f}s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
