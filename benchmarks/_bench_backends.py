"""Backends for benchmarks/scheduler_overhead.py: trials that do (almost) nothing, so what is measured
is the driver, Optuna storage and Ray dispatch, not training."""

from __future__ import annotations

import time

from grpo.sweep.backends import TrialBackend


class NoopBackend(TrialBackend):
    """One iteration, one metric, no work."""

    def run(self, cfg, trial_dir, report, resume):
        report(1, {"grpo/score/mean": float(cfg.rl_config.clip_ratio)})
        return {}


class SleepNPUBackend(TrialBackend):
    """Holds ``rl_config.actor_resource.num_npus`` NPU resources for a fixed time, like a real trial."""

    seconds = 2.0

    def resources(self, cfg):
        return {"num_cpus": 0, "resources": {"NPU": int(cfg.rl_config.actor_resource.num_npus)}}

    def run(self, cfg, trial_dir, report, resume):
        time.sleep(self.seconds)
        report(1, {"grpo/score/mean": 1.0})
        return {}


class SlowCheckpointBackend(TrialBackend):
    """A learning curve at ``seconds`` per iteration that checkpoints every ``save_interval`` iterations
    (Megatron's tracker file), so a killed and retried trial resumes where its checkpoint is."""

    # 0.5 s: a 6-trial study holds about 15 s of trial work, so 10 kills 0-3 s after each rerun's first start all
    # land while trials run (at 0.1 s, the faster driver finished before the last kills: 7 of 10 landed).
    seconds = 0.5

    def run(self, cfg, trial_dir, report, resume):
        import json
        import math
        from pathlib import Path

        from grpo._fs import CHECKPOINT_TRACKER, checkpoint_iteration

        save = Path(cfg.actor_config.save)
        start = (checkpoint_iteration(Path(cfg.actor_config.load)) or 0) + 1 if resume and cfg.actor_config.load else 1
        for it in range(start, int(cfg.megatron_training.train_iters) + 1):
            time.sleep(self.seconds)
            value = 1.0 - math.exp(-(0.05 + cfg.rl_config.clip_ratio) * it)
            with open(Path(trial_dir) / "metrics.jsonl", "a") as fh:
                fh.write(json.dumps({"iteration": it, "grpo/score/mean": value}) + "\n")
            if report(it, {"grpo/score/mean": value}):
                return {"stopped_early": True}
            if it % int(cfg.megatron_training.save_interval) == 0:
                save.mkdir(parents=True, exist_ok=True)
                (save / CHECKPOINT_TRACKER).write_text(str(it))
        return {}
