"""Where a run's per-iteration metrics go: metrics.jsonl, train.log, TensorBoard, wandb, a progress bar.

``metrics.jsonl`` gets one flushed JSON line per iteration. On resume, lines after the checkpoint's
iteration (written by the killed run after its last checkpoint) are dropped first, so the file never
holds an iteration twice. wandb runs in ``engine.wandb_mode`` (null: MindSpeed-RL's rule, online only
when ``WANDB_API_KEY`` is set), in the run group ``engine.wandb_group``, with the whole config as its
config and the run's end state in its summary. Unlike MindSpeed-RL, which skips TensorBoard when wandb is
on, both are written when both are asked for (a sweep's TensorBoard view should not vanish because W&B
is on). The progress bar appears only when stdout is a terminal.
"""

from __future__ import annotations

import json
import logging
import math
import os
import sys
from pathlib import Path
from typing import IO

from grpo._fs import truncate_jsonl_after
from grpo.config import GRPOConfig

METRICS_FILE = "metrics.jsonl"
LOG_FILE = "train.log"


def run_logger(run_dir: Path) -> logging.Logger:
    """A logger writing ``run_dir/train.log`` (and propagating, so Hydra's console shows it too)."""
    import hashlib

    tag = hashlib.sha1(str(Path(run_dir).resolve()).encode()).hexdigest()[:8]
    logger = logging.getLogger(f"grpo.engine.run.{tag}")
    logger.setLevel(logging.INFO)
    for handler in list(logger.handlers):
        logger.removeHandler(handler)
        handler.close()
    handler = logging.FileHandler(run_dir / LOG_FILE)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    logger.addHandler(handler)
    return logger


def close_logger(logger: logging.Logger) -> None:
    for handler in list(logger.handlers):
        logger.removeHandler(handler)
        handler.close()


class MetricsSink:
    """Fan one metrics dict per iteration out to every configured destination."""

    def __init__(
        self, run_dir: Path, cfg: GRPOConfig, total_iters: int, resume_from: int = 0, log: logging.Logger | None = None
    ):
        self.path = Path(run_dir) / METRICS_FILE
        self.log = log
        truncate_jsonl_after(self.path, resume_from)  # drop what a killed run wrote after its checkpoint
        self.file: IO[str] = open(self.path, "a")  # noqa: SIM115  (open for the whole run; close() closes it)
        rl = cfg.rl_config
        self.wandb = self.tensorboard = None
        if rl.use_wandb:
            import wandb

            mode = cfg.engine.wandb_mode or ("online" if os.environ.get("WANDB_API_KEY") else "offline")
            self.wandb = wandb.init(
                project=rl.wandb_project or "grpo-sweep",
                name=rl.wandb_exp_name or Path(run_dir).name,
                group=cfg.engine.wandb_group,
                dir=rl.wandb_save_dir or str(run_dir),
                config=cfg.to_dict(),
                mode=mode,  # an explicit mode wins over WANDB_MODE and a key in the environment
                reinit="create_new",
            )
        if rl.use_tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            self.tensorboard = SummaryWriter(log_dir=str(Path(run_dir) / "tensorboard"))
        self.progress = None
        if sys.stdout.isatty():
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

            self.progress = Progress(
                TextColumn("[bold]GRPO"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.description}"),
                TimeRemainingColumn(),
            )
            self.progress.start()
            self.task = self.progress.add_task("", total=total_iters, completed=resume_from)

    def write(self, iteration: int, metrics: dict[str, float]) -> None:
        self.file.write(json.dumps({"iteration": iteration, **metrics}) + "\n")
        self.file.flush()
        if self.tensorboard is not None:
            for key, value in metrics.items():
                self.tensorboard.add_scalar(key, value, iteration)
            self.tensorboard.flush()
        if self.wandb is not None:
            self.wandb.log(metrics, step=iteration)
        if "grpo/score/mean" not in metrics:  # iteration 0: the base policy's evaluation, nothing trained yet
            if self.log is not None and "eval/acc_greedy" in metrics:
                self.log.info(f"iteration {iteration}: {_eval_text(metrics)} (base policy)")
            return
        if self.log is not None:
            held_out = f"; {_eval_text(metrics)}" if "eval/acc_greedy" in metrics else ""
            self.log.info(
                f"iteration {iteration}: score {metrics['grpo/score/mean']:.3f} acc {metrics['grpo/acc/mean']:.3f} "
                f"kl {metrics.get('actor/kl_loss', math.nan):.4f} clipfrac {metrics['actor/pg_clipfrac']:.3f} "
                f"len {metrics['response_length/mean']:.1f} time {metrics['timing/all']:.2f}s{held_out}"
            )
        if self.progress is not None:
            self.progress.update(
                self.task,
                completed=iteration,
                description=(f"reward {metrics['grpo/score/mean']:+.3f}  acc {metrics['grpo/acc/mean']:.2f}"),
            )

    def close(self, state: str = "finished") -> None:
        """``state``: how the run ended (finished, stopped, failed), kept in the W&B run's summary."""
        self.file.close()
        if self.progress is not None:
            self.progress.stop()
        if self.tensorboard is not None:
            self.tensorboard.close()
        if self.wandb is not None:
            self.wandb.summary["state"] = state
            self.wandb.finish(exit_code=1 if state == "failed" else 0)


def _eval_text(metrics: dict[str, float]) -> str:
    return (
        f"held-out accuracy greedy {metrics['eval/acc_greedy']:.3f} sampled {metrics.get('eval/acc', math.nan):.3f} "
        f"on {int(metrics.get('eval/prompts', 0))} prompts"
    )
