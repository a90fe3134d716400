"""Scheduler overhead and NPU packing, measured through the real driver, Optuna journal storage and Ray.

1. 200 no-op trials (benchmarks/_bench_backends.py:NoopBackend) through ``run_study`` on a local Ray:
   per-trial overhead beyond Ray start-up. Side by side: Ray Tune + OptunaSearch running the same no-op
   objective (fewer trials: it is slow), per trial.
2. Trials asking for 4, 8 and 16 NPUs packed on a local Ray started with 64 NPU resources: utilisation
   against the packing bound max(total NPU-seconds / 64, longest trial), the median of ``--packing-runs``.
   Beside it, the bound no schedule can beat when the trials are about as long as each other (the
   benchmark's are: 2 s each): ceil(NPUs asked over all trials / 64) x the shortest trial. Each trial holds
   its NPUs for at least that long, so each contains at least one instant of a grid of that spacing, and at
   each instant at most 64 NPUs are held: with the 48 trials' 452 NPUs (> 7 x 64) the study takes at least
   8 trial lengths, while the packing bound counts 452 / 64 = 7.06 of them. The packing bound can then be
   reached only to 7.06 / 8 = 88 %, plus whatever start-up time varies between trials.

    python benchmarks/scheduler_overhead.py [--trials 200] [--tune-trials 20] [--npu-trials 48]
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


def _spec(folder: Path, name: str, **fields) -> Path:
    spec = {"study": name, "trials": 10, "concurrency": 2, "sampler": {"name": "random", "seed": 0},
            "pruner": "none", "objective": {"metric": "grpo/score/mean", "reduce": "last"}}
    spec.update(fields)
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def noop_overhead(folder: Path, trials: int) -> float:
    import ray

    from grpo.sweep.run.driver import run_study
    from grpo.sweep.spec.load import load_spec

    spec = load_spec(str(_spec(folder, "noop", base="grpo_trainer_tiny_cpu", trials=trials, concurrency=2,
                               search={"rl_config.clip_ratio": "interval(0.1, 0.3)"},
                               backend="_bench_backends:NoopBackend")))
    t0 = time.perf_counter()
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": str(HERE)}})
    t1 = time.perf_counter()
    study = run_study(spec).study
    t2 = time.perf_counter()
    ray.shutdown()
    done = sorted((t for t in study.trials if t.state.name == "COMPLETE"), key=lambda t: t.datetime_complete)
    per_trial = (t2 - t1) / len(done)
    # Steady state: after each of the 2 worker actors ran its first trial (process start + imports, once).
    warm = (done[-1].datetime_complete - done[1].datetime_complete).total_seconds() / (len(done) - 2)
    print(f"grpo-sweep: {len(done)} no-op trials in {t2 - t1:.2f} s after Ray start-up ({t1 - t0:.2f} s): "
          f"{per_trial * 1000:.1f} ms per trial including the 2 workers' start; steady state "
          f"{warm * 1000:.1f} ms per trial (target <= 50 ms)")
    return warm


def tune_overhead(trials: int) -> float:
    import ray
    from ray import tune
    from ray.tune.search.optuna import OptunaSearch

    def objective(config):
        return {"score": config["clip_ratio"]}

    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    with tempfile.TemporaryDirectory() as tmp:
        tuner = tune.Tuner(
            objective,
            param_space={"clip_ratio": tune.uniform(0.1, 0.3)},
            tune_config=tune.TuneConfig(search_alg=OptunaSearch(metric="score", mode="max"), num_samples=trials,
                                        max_concurrent_trials=2),
            run_config=tune.RunConfig(storage_path=tmp, verbose=0),
        )
        t0 = time.perf_counter()
        tuner.fit()
        t1 = time.perf_counter()
    ray.shutdown()
    per_trial = (t1 - t0) / trials
    print(f"Ray Tune + OptunaSearch: {trials} no-op trials in {t1 - t0:.2f} s: {per_trial * 1000:.0f} ms per trial")
    return per_trial


def npu_packing(folder: Path, trials: int, name: str = "packing") -> float:
    import ray

    from grpo.sweep.run.driver import run_study
    from grpo.sweep.spec.load import load_spec

    spec = load_spec(str(_spec(folder, name, base="grpo_trainer_qwen25_7b_A3", trials=trials, concurrency=16,
                               search={"rl_config.actor_resource.num_npus": "choice(4, 8, 16)",
                                       # distinct points: the driver never reruns a point that already ran
                                       "rl_config.clip_ratio": "interval(0.1, 0.3)"},
                               cluster={"address": "local", "resources": {"NPU": 64}},
                               backend="_bench_backends:SleepNPUBackend")))
    ray.init(address="local", num_cpus=2, resources={"NPU": 64}, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": str(HERE)}})
    t0 = time.perf_counter()
    study = run_study(spec).study
    wall = time.perf_counter() - t0
    ray.shutdown()
    done = [t for t in study.trials if t.state.name == "COMPLETE"]
    npu_seconds = sum(t.user_attrs["npu_s"] for t in done)
    longest = max(t.user_attrs["wall_s"] for t in done)
    bound = max(npu_seconds / 64, longest)
    sizes = {n: sum(1 for t in done if t.params["rl_config.actor_resource.num_npus"] == n) for n in (4, 8, 16)}
    asked = sum(n * k for n, k in sizes.items())
    grid = max(bound, math.ceil(asked / 64) * min(t.user_attrs["wall_s"] for t in done))
    print(f"NPU packing: {len(done)} trials {sizes} on 64 NPUs in {wall:.1f} s; {npu_seconds:.0f} NPU-s used; "
          f"utilisation {npu_seconds / (64 * wall):.1%}; packing bound {bound:.1f} s -> {bound / wall:.1%} "
          f"of the bound; equal-length bound {grid:.1f} s -> {grid / wall:.1%}", flush=True)
    return bound / wall, grid / wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=200)
    parser.add_argument("--tune-trials", type=int, default=20)
    parser.add_argument("--npu-trials", type=int, default=48)
    parser.add_argument("--packing-runs", type=int, default=5, help="NPU packing studies; the median is the figure")
    args = parser.parse_args()
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    with tempfile.TemporaryDirectory() as tmp:
        os.chdir(tmp)
        ours = noop_overhead(Path(tmp), args.trials) if args.trials else 0.0
        if args.tune_trials and ours:
            theirs = tune_overhead(args.tune_trials)
            print(f"ratio: Ray Tune spends {theirs / ours:.1f}x grpo-sweep's per-trial overhead")
        if args.npu_trials:
            runs = [npu_packing(Path(tmp), args.npu_trials, f"packing{k}") for k in range(args.packing_runs)]
            shares, grids = [r[0] for r in runs], [r[1] for r in runs]
            print(f"NPU packing over {len(shares)} runs: median {statistics.median(shares):.1%} of the packing bound "
                  f"(runs: {', '.join(f'{x:.1%}' for x in shares)}; target >= 95 %); median "
                  f"{statistics.median(grids):.1%} of the equal-length bound (runs: "
                  f"{', '.join(f'{x:.1%}' for x in grids)}); load average {os.getloadavg()[0]:.1f} "
                  f"on {os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
