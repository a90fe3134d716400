"""How long ``grpo.config.load_config`` takes: the first call in a process, then repeated calls.

    .venv/bin/python benchmarks/compose_speed.py [--repeat 50] [--config grpo_trainer_tiny_cpu]

The repeated calls use what the sweep driver sends per trial seed: the spec's overrides, the sampled
parameters and the per-seed keys (save dir, seed, wandb name, a layout), each call a different point.
"""

from __future__ import annotations

import argparse
import time

from grpo.config import load_config


def trial_overrides(i: int) -> list[str]:
    return [
        f"rl_config.clip_ratio={0.1 + 0.001 * i}",
        f"actor_config.lr={1e-6 * (1 + i % 7)}",
        "layout=tp1_pp1_cpu",
        f"actor_config.save=/tmp/grpo-bench/trial-{i}/seed0",
        f"megatron_training.seed={i}",
        "actor_config.finetune=false",
        "rl_config.use_wandb=true",
        "rl_config.wandb_project=bench",
        f"rl_config.wandb_exp_name=trial-{i}-seed0",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="grpo_trainer_tiny_cpu")
    parser.add_argument("--repeat", type=int, default=50)
    args = parser.parse_args()

    t0 = time.perf_counter()
    load_config(args.config, trial_overrides(0))
    first = time.perf_counter() - t0

    t0 = time.perf_counter()
    for i in range(1, args.repeat + 1):
        load_config(args.config, trial_overrides(i))
    repeated = (time.perf_counter() - t0) / args.repeat

    print(
        f"{args.config}: first call {first * 1e3:.1f} ms; repeated calls {repeated * 1e3:.1f} ms per call "
        f"(mean of {args.repeat})"
    )


if __name__ == "__main__":
    main()
