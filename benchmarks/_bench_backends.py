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
