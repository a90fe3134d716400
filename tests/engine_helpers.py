"""What the engine tests share: the few-second training run's overrides and the metric rows to compare."""

from __future__ import annotations


def small(cache_dir, **extra) -> list[str]:
    """A few-second run: 4 prompts x 4 samples, 2 optimizer steps per iteration, a 30-step warm start."""
    values = {
        "engine.cache_dir": str(cache_dir),
        "engine.warm_start_steps": 30,
        "engine.task_size": 64,
        "megatron_training.global_batch_size": 4,
        "rl_config.n_samples_per_prompt": 4,
        "rl_config.mini_batch_size": 2,
        "actor_config.micro_batch_size": 4,
        "megatron_training.train_iters": 4,
        "megatron_training.save_interval": 2,
        "generate_config.sampling_config.max_tokens": 16,
        "actor_config.no_load_optim": False,
        "actor_config.no_load_rng": False,
        "actor_config.lr": 1e-3,
        "engine.eval_every": None,
    }
    values.update(extra)
    return [f"{k}={'null' if v is None else v}" for k, v in values.items()]


def comparable(rows):
    """Metric rows without what depends on the machine's speed (timings, throughputs)."""
    return [{k: v for k, v in r.items() if not (k.startswith("timing/") or k.endswith("_tps"))} for r in rows]
