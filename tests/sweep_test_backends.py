"""Trial backends used by the sweep tests to exercise the real driver, Ray scheduler and Optuna storage
without the cost of GRPO training. They are plain TrialBackend plugins (spec `backend: module:Class`).

`CurveBackend` reports a learning curve that is a known function of the trial's config, so pruning and
objectives have something real to act on. `FaultBackend` misbehaves on command: the trial's
`rl_config.entropy_coeff` picks the fault (0.0 ok, 0.1 raise, 0.2 NaN objective, 0.3 SIGKILL of its own
worker process), once per trial dir, so its retry succeeds. `SeedCurveBackend` gives each seed its own
curve and pace, `TimedBackend` records when each seed ran, `SeedFaultBackend` fails one seed of a trial
once (for the seed tests, tests/test_sweep_seeds.py).
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


def seed_index(cfg) -> int:
    """The seed's place in its trial: its save dir is <trial>/runs/seed<k>/ckpt."""
    return int(Path(cfg.actor_config.save).parent.name[len("seed"):])


class CurveBackend(TrialBackend):
    name = "curve"
    delay_s = 0.0

    def value(self, cfg, iteration: int) -> float:
        return _curve_value(cfg, iteration)

    def delay(self, cfg) -> float:
        return self.delay_s

    def run(self, cfg, trial_dir: Path, report, resume: bool) -> dict:
        iters = int(cfg.megatron_training.train_iters)
        save = Path(cfg.actor_config.save) if cfg.actor_config.save else None
        start = 1
        if resume and cfg.actor_config.load:
            start = int((Path(cfg.actor_config.load) / "latest_checkpointed_iteration.txt").read_text()) + 1
        delay = self.delay(cfg)
        for it in range(start, iters + 1):
            if delay:
                time.sleep(delay)
            metrics = {"grpo/score/mean": self.value(cfg, it), "e2e_tps": 100.0}
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


class EvalCurveBackend(TrialBackend):
    """Held-out evaluations as the engine writes them: the base policy at iteration 0 (0.66), then every
    2 iterations. clip_ratio >= 0.25 collapses (0.5 at once); below it creeps up to just under the base."""

    name = "eval-curve"
    BASE = 0.66

    def run(self, cfg, trial_dir: Path, report, resume: bool) -> dict:
        collapses = float(cfg.rl_config.clip_ratio) >= 0.25
        if report(0, {"eval/acc_greedy": self.BASE}):
            return {"stopped_early": True}
        for it in range(1, int(cfg.megatron_training.train_iters) + 1):
            # a pace at which the driver's stop arrives before the run ends, even on a busy machine
            time.sleep(0.5 if collapses and it > 2 else 0.1)
            metrics = {"grpo/score/mean": 0.1 * it}
            if it % 2 == 0:
                metrics["eval/acc_greedy"] = 0.5 if collapses else self.BASE - 0.06 / it
            if report(it, metrics):
                return {"stopped_early": True}
        return {"iterations": it}


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


BASE_SEED = 1234  # megatron_training.seed of grpo_trainer_tiny_cpu


class SeedCurveBackend(CurveBackend):
    """Seed ``s`` reports the CurveBackend curve minus 0.3 * (s - 1234): each seed its own curve, and the
    confirmation stage's fresh seeds (after the search's) learn worse. Seed index k sleeps 0.02 * k s per
    iteration, so the seeds of a trial drift apart."""

    def value(self, cfg, iteration: int) -> float:
        return _curve_value(cfg, iteration) - 0.3 * (int(cfg.megatron_training.seed) - BASE_SEED)

    def delay(self, cfg) -> float:
        return 0.02 * seed_index(cfg) + self.delay_s


class SlowSeedCurveBackend(SeedCurveBackend):
    delay_s = 0.1


class TimedBackend(CurveBackend):
    """The CurveBackend curve at 0.1 s per iteration; each seed run writes when it started and ended
    (``timing.json`` in its run dir)."""

    delay_s = 0.1

    def run(self, cfg, trial_dir: Path, report, resume: bool) -> dict:
        started = time.time()
        out = super().run(cfg, trial_dir, report, resume)
        (trial_dir / "timing.json").write_text(json.dumps({"start": started, "end": time.time()}))
        return out


class SeedFaultBackend(CurveBackend):
    """Once per study, seed index 1 fails at iteration 6 (its checkpoint: 4), after seed 0 ran all its
    iterations and seed 2 (0.05 s per iteration) passed a checkpoint; seed 2 then runs until it is stopped.
    Each run notes the iteration it started at (``starts.jsonl`` in the trials folder)."""

    def delay(self, cfg) -> float:
        return 0.05 if seed_index(cfg) == 2 and not self._marker(cfg).exists() else 0.0

    @staticmethod
    def _marker(cfg) -> Path:
        return Path(cfg.actor_config.save).parents[3] / "seed-fault.done"

    def run(self, cfg, trial_dir: Path, report, resume: bool) -> dict:
        save = Path(cfg.actor_config.save)
        trials = save.parents[3]
        start = 1
        if resume and cfg.actor_config.load:
            start = int((Path(cfg.actor_config.load) / "latest_checkpointed_iteration.txt").read_text()) + 1
        with open(trials / "starts.jsonl", "a") as fh:
            fh.write(json.dumps({"trial": save.parents[2].name, "seed": int(cfg.megatron_training.seed),
                                 "start": start}) + "\n")
        marker = self._marker(cfg)
        if seed_index(cfg) != 1 or marker.exists():
            return super().run(cfg, trial_dir, report, resume)

        def fail_at_6(iteration: int, metrics: dict) -> bool:
            if iteration == 6:
                runs = save.parents[1]
                deadline = time.monotonic() + 60
                while time.monotonic() < deadline and not (
                    _ckpt(runs / "seed0") == int(cfg.megatron_training.train_iters) and _ckpt(runs / "seed2") >= 4
                ):
                    time.sleep(0.02)
                marker.write_text("1")
                raise TrialFailed("injected failure of one seed", ["seed log line"])
            return report(iteration, metrics)

        return super().run(cfg, trial_dir, fail_at_6, resume)


def _ckpt(run_dir: Path) -> int:
    try:
        return int((run_dir / "ckpt" / "latest_checkpointed_iteration.txt").read_text())
    except (OSError, ValueError):
        return 0


class TensorBoardCurveBackend(SeedCurveBackend):
    """The SeedCurveBackend curves written the engine's way, through its own ``MetricsSink``: with the tracking
    keys a sweep sets, each seed run has its TensorBoard run ``trial-N-seedK`` opened by the HParams session start
    (the trial's parameters) and closed by its session end."""

    def run(self, cfg, trial_dir: Path, report, resume: bool) -> dict:
        from grpo.engine.metrics import MetricsSink

        iters = int(cfg.megatron_training.train_iters)
        sink = MetricsSink(trial_dir, cfg, iters)
        state = "finished"
        try:
            for it in range(1, iters + 1):
                time.sleep(self.delay(cfg))
                metrics = {"grpo/score/mean": self.value(cfg, it), "e2e_tps": 100.0}
                sink.write(it, metrics)
                if report(it, metrics):
                    state = "stopped"
                    return {"stopped_early": True}
        finally:
            sink.close(state)
        return {"iterations": iters}


class SlowTensorBoardCurveBackend(TensorBoardCurveBackend):
    delay_s = 0.1
