"""A trial backend for the collapse-rule tests (spec ``backend: collapse_backends:KLSpikeBackend``): it streams
the engine's training-dynamics metrics (actor/kl_loss, grpo/score/mean, actor/entropy) without training.
clip_ratio >= 0.25: the KL to the reference jumps from about 0.02 to 0.9 at iteration 6 (and stays high);
below it, the KL creeps up smoothly and the trial completes."""

from __future__ import annotations

import time
from pathlib import Path

from grpo.sweep.backends import TrialBackend


class KLSpikeBackend(TrialBackend):
    name = "kl-spike"

    def run(self, cfg, trial_dir: Path, report, resume: bool) -> dict:
        spikes = float(cfg.rl_config.clip_ratio) >= 0.25
        for it in range(1, int(cfg.megatron_training.train_iters) + 1):
            time.sleep(0.4 if spikes and it > 5 else 0.1)  # the driver's stop arrives before the run ends
            kl = 0.9 if spikes and it >= 6 else 0.02 * 1.1**it
            metrics = {"grpo/score/mean": 0.05 * it, "actor/kl_loss": kl, "actor/entropy": 1.0 - 0.02 * it}
            if report(it, metrics):
                return {"stopped_early": True}
        return {"iterations": it}
