"""The TrainerCallback a TRL trial runs with: each iteration's metrics under the project's names (the names the
embedded engine and MindSpeed-RL report), the held-out evaluation at the engine's interval, the driver's stop.

One iteration is one TRL generation: ``steps_per_iter`` optimizer steps (``GRPOConfig.logging_steps`` is set to
it, so each ``on_log`` averages exactly one iteration's steps, TRL's ``_metrics`` being averaged per log).
``report(iteration, metrics)`` returning True (pruned, or the driver stopping) sets
``control.should_training_stop``; ``engine.exit_interval`` (a pbt segment's end) saves ``checkpoint-N`` and stops.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import transformers

from grpo._fs import CHECKPOINT_TRACKER, atomic_write_text
from grpo.engine.rollout import SamplingParams
from grpo.sweep.backends._base import ReportFn
from grpo.sweep.backends.trl.hf_policy import evaluate
from grpo.sweep.backends.trl.model import Base

# TRL's logged name (trl/trainer/grpo_trainer.py's _metrics, Trainer's loss/grad_norm/learning_rate) -> ours
NAMES: dict[str, str] = {
    "reward": "grpo/score/mean",
    "reward_std": "grpo/score/std",
    "kl": "actor/kl_loss",
    "entropy": "actor/entropy",
    "grad_norm": "actor/grad_norm",
    "learning_rate": "actor/lr",
    "clip_ratio/region_mean": "actor/pg_clipfrac",
    "clip_ratio/low_mean": "actor/pg_clipfrac_low",
    "clip_ratio/high_mean": "actor/pg_clipfrac_high",
    "completions/mean_length": "response_length/mean",
    "completions/max_length": "response_length/max",
    "completions/min_length": "response_length/min",
    "completions/clipped_ratio": "response_length/truncated",
    "frac_reward_zero_std": "grpo/zero_variance_groups",
}


def project_metrics(logs: dict[str, float], beta: float) -> dict[str, float]:
    """TRL's log row as the project's metrics (unmapped TRL keys kept as ``trl/<key>``)."""
    out: dict[str, float] = {}
    for key, value in logs.items():
        if not isinstance(value, (int, float)):
            continue
        # model.reward_functions' names (issue 41): each function's mean, a user dict's other keys as on the engine
        reward = re.fullmatch(r"rewards/verifier_(.+)/mean", key)
        if reward or key.startswith("user_reward/"):
            out[f"{reward[1]}_rewards/mean" if reward else key.removeprefix("user_reward/")] = float(value)
            continue
        out[NAMES.get(key, f"trl/{key}")] = float(value)
    if "loss" in logs:  # MindSpeed-RL's actor/pg_loss is |total loss|, as the engine reports it
        out["actor/pg_loss"] = abs(float(logs["loss"]))
    out["actor/kl_coef"] = beta
    return out


class SweepCallback(transformers.TrainerCallback):
    """Streams metrics to the driver, evaluates on the held-out prompts, stops when told (module docstring)."""

    def __init__(
        self,
        *,
        base: Base,
        report: ReportFn,
        steps_per_iter: int,
        train_iters: int,
        eval_every: int | None,
        exit_interval: int | None,
        sampling: SamplingParams,
        sampling_seed: int | None,
        scoring: tuple[list[str], list[float]],
        beta: float,
        run_dir: Path,
        save_dir: Path,
        should_stop: Callable[[], bool] | None = None,
    ):
        self.base, self.report, self.steps_per_iter = base, report, steps_per_iter
        self.train_iters, self.eval_every, self.exit_interval = train_iters, eval_every, exit_interval
        self.sampling, self.sampling_seed, self.scoring, self.beta = sampling, sampling_seed, scoring, beta
        self.run_dir, self.save_dir = run_dir, save_dir
        self.should_stop = should_stop  # launcher accelerate: the backend's stop file, checked every optimizer step
        self.stopped = False
        self.exited_at: int | None = None
        self.last: dict[str, float] = {}
        self.iteration = 0

    def evaluate(self, iteration: int, model: Any) -> dict[str, float]:
        return evaluate(self.base, model, self.sampling, iteration, 4, self.scoring, self.run_dir / "samples.jsonl")

    def _emit(self, iteration: int, metrics: dict[str, float], control: Any) -> None:
        with open(self.run_dir / "metrics.jsonl", "a") as fh:
            fh.write(json.dumps({"iteration": iteration, **metrics}) + "\n")
        self.last, self.iteration = metrics, iteration
        if self.report(iteration, {k: v for k, v in metrics.items() if math.isfinite(v)}):
            self.stopped = True
            control.should_training_stop = True

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if state.global_step == 0 and self.sampling_seed is not None:
            # TRL samples from torch's global generator, which Trainer seeded with args.seed (the prompt order's
            # seed, RepeatSampler's own generator): the engine samples from sampling_config.seed, so does this run
            # (a resume restores the checkpoint's rng state after this event).
            torch.manual_seed(int(self.sampling_seed))
        # A resume restores the optimizer and scheduler of the checkpoint; a branch that explored the learning
        # rate must train with its own, so the config's lr is put back (constant schedules only: check refuses
        # the others for segments).
        optimizer, scheduler = kwargs.get("optimizer"), kwargs.get("lr_scheduler")
        if state.global_step and optimizer is not None and args.lr_scheduler_type == "constant":
            for group in optimizer.param_groups:
                group["lr"] = group["initial_lr"] = args.learning_rate
            if scheduler is not None:
                scheduler.base_lrs = [args.learning_rate] * len(scheduler.base_lrs)
                # what Trainer logs as learning_rate until the next scheduler step: torch's LRScheduler field
                scheduler._last_lr = [args.learning_rate] * len(scheduler.base_lrs)
        if state.global_step == 0 and self.eval_every:  # the base policy, as iteration 0 of the held-out curves
            self._emit(0, self.evaluate(0, kwargs["model"]), control)

    def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, float] | None = None, **kwargs: Any) -> None:
        if not logs or "loss" not in logs or self.stopped:  # the end-of-training summary row has train_loss only
            return
        it = state.global_step // self.steps_per_iter
        metrics = project_metrics(logs, self.beta)
        exiting = self.exit_interval is not None and it % self.exit_interval == 0 and it < self.train_iters
        every = self.eval_every
        if every and (it % every == 0 or it == self.train_iters or exiting):
            metrics.update(self.evaluate(it, kwargs["model"]))
        self._emit(it, metrics, control)
        if exiting and not self.stopped:
            self.exited_at = it
            control.should_save = True
            control.should_training_stop = True

    def on_step_end(self, args: Any, state: Any, control: Any, **_: Any) -> None:
        if self.should_stop is not None and not self.stopped and self.should_stop():
            # Stopped between two rows: no checkpoint at this step (transformers' DefaultFlowCallback, which runs
            # first, may have asked for one), so a resume never starts past the rows the run has written.
            self.stopped = True
            control.should_training_stop = True
            control.should_save = False

    def on_save(self, args: Any, state: Any, control: Any, **_: Any) -> None:
        # The driver's bookkeeping (grpo._fs.checkpoint_iteration): the newest complete iteration, written after
        # TRL's checkpoint-N folder is complete (by the main process only, under accelerate launch).
        if state.is_world_process_zero:
            atomic_write_text(self.save_dir / CHECKPOINT_TRACKER, str(state.global_step // self.steps_per_iter))
