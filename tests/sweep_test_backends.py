"""Trial backends used by the sweep tests to exercise the real driver, Ray scheduler and Optuna storage
without the cost of GRPO training. They are plain TrialBackend plugins (spec `backend: module:Class`).

`CurveBackend` reports a learning curve that is a known function of the trial's config, so pruning and
objectives have something real to act on. `FaultBackend` misbehaves on command: the trial's
`rl_config.entropy_coeff` picks the fault (0.0 ok, 0.1 raise, 0.2 NaN objective, 0.3 SIGKILL of its own
worker process), once per trial dir, so its retry succeeds.
"""

from __future__ import annotations

import json
import math
import os
import signal
import time
from pathlib import Path

from grpo.sweep.backends import TrialBackend, TrialFailed


def _curve_value(cfg, iteration: int) -> float:
    # Higher clip_ratio learns faster; a saturating curve in [0, 1].
    rate = 0.05 + cfg.rl_config.clip_ratio
    return 1.0 - math.exp(-rate * iteration)


class CurveBackend(TrialBackend):
    name = "curve"
    delay_s = 0.0

    def run(self, cfg, trial_dir: Path, report, resume: bool) -> dict:
        iters = int(cfg.megatron_training.train_iters)
        save = Path(cfg.actor_config.save) if cfg.actor_config.save else None
        start = 1
        if resume and cfg.actor_config.load:
            start = int((Path(cfg.actor_config.load) / "latest_checkpointed_iteration.txt").read_text()) + 1
        for it in range(start, iters + 1):
            if self.delay_s:
                time.sleep(self.delay_s)
            metrics = {"grpo/score/mean": _curve_value(cfg, it), "e2e_tps": 100.0}
            with open(trial_dir / "metrics.jsonl", "a") as fh:  # the run's own record, as the engine keeps
                fh.write(json.dumps({"iteration": it, **metrics}) + "\n")
            if report(it, metrics):
                return {"stopped_early": True}
            if save is not None and it % int(cfg.megatron_training.save_interval) == 0:
                save.mkdir(parents=True, exist_ok=True)
                (save / "latest_checkpointed_iteration.txt").write_text(str(it))
        return {"iterations": iters}


class SlowCurveBackend(CurveBackend):
    delay_s = 0.1


class FaultBackend(CurveBackend):
    name = "fault"

    def run(self, cfg, trial_dir: Path, report, resume: bool) -> dict:
        fault = round(float(cfg.rl_config.entropy_coeff), 2)
        # <study>/trials/<n>/runs/seed0/ckpt -> one marker per fault in <study>/trials/, so the retry succeeds
        marker = Path(cfg.actor_config.save).parents[3] / f"fault-{fault}.done"
        if fault and not marker.exists():
            marker.write_text("1")
            report(1, {"grpo/score/mean": 0.1})
            if fault == 0.1:
                raise TrialFailed("injected failure: the trial raised", ["line a", "Traceback: injected"])
            if fault == 0.2:
                report(2, {"grpo/score/mean": float("nan")})
                return {}
            if fault == 0.3:
                os.kill(os.getpid(), signal.SIGKILL)
        return super().run(cfg, trial_dir, report, resume)
