"""Where a run's per-iteration metrics go: metrics.jsonl, train.log, TensorBoard, wandb, SwanLab
(``grpo.engine.swanlab_tracker``), a progress bar.

``metrics.jsonl`` gets one flushed JSON line per iteration. On resume, lines after the checkpoint's
iteration (written by the killed run after its last checkpoint) are dropped first, so the file never
holds an iteration twice. wandb runs in ``engine.wandb_mode`` (null: MindSpeed-RL's rule, online only
when ``WANDB_API_KEY`` is set), in the run group ``engine.wandb_group``, with the whole config as its
config and the run's end state in its summary. Unlike MindSpeed-RL, which skips TensorBoard when wandb is
on, both are written when both are asked for (a sweep's TensorBoard view should not vanish because W&B
is on). TensorBoard writes to ``tensorboard_dir`` (``run_dir/tensorboard/<rl_config.wandb_exp_name>``, a
sweep's ``trial-N-seedK``), with the HParams plugin's session start (``engine.trial_params``) and end in
the run's own event file (``_session_start``); ``add_final_scalars`` adds what the caller learns at the
end (a sweep's objective). The progress bar appears only when stdout is a terminal; while it is drawn,
the console log handlers (Hydra's) write through rich's stdout/stderr proxies, so each log line prints
whole above the bar instead of into it (tqdm.write's idea).
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


def tensorboard_dir(cfg: GRPOConfig, run_dir: Path) -> Path:
    """Where the run's TensorBoard events go: ``run_dir/tensorboard/<rl_config.wandb_exp_name>`` when the
    run is named (TensorBoard names a run after its folder: a sweep's ``trial-N-seedK``), else
    ``run_dir/tensorboard``."""
    folder = Path(run_dir) / "tensorboard"
    return folder / cfg.rl_config.wandb_exp_name if cfg.rl_config.wandb_exp_name else folder


def add_final_scalars(cfg: GRPOConfig, run_dir: Path, values: dict[str, float], step: int) -> Path | None:
    """Add ``values`` (tag -> number) at ``step`` to a finished run's TensorBoard run, in a new event file
    beside its own: what only its caller knows at the end, a sweep's objective for this seed say, becomes
    a metric column of TensorBoard's HParams tab next to the trial's parameters. Returns the folder; None
    (nothing written) when the run does not write TensorBoard."""
    if not cfg.rl_config.use_tensorboard:
        return None
    from torch.utils.tensorboard import SummaryWriter

    folder = tensorboard_dir(cfg, run_dir)
    with SummaryWriter(log_dir=str(folder)) as writer:
        for tag, value in values.items():
            writer.add_scalar(tag, value, step)
    return folder


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
        self.hparams: dict[str, object] | None = None
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
        self.swanlab = None
        if getattr(rl, "use_swanlab", False):
            from grpo.engine.swanlab_tracker import SwanLabRun

            self.swanlab = SwanLabRun(cfg, Path(run_dir))
        if rl.use_tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            self.tensorboard = SummaryWriter(log_dir=str(tensorboard_dir(cfg, run_dir)))
            self.hparams = cfg.engine.trial_params
            if self.hparams:
                self._tensorboard_summary(_session_start(self.hparams))
        self.progress = None
        self._handlers: list[tuple[logging.StreamHandler, IO[str]]] = []
        if sys.stdout.isatty():
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

            self.progress = Progress(
                TextColumn("[bold]GRPO"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.description}"),
                TimeRemainingColumn(),
            )
            streams = (sys.stdout, sys.stderr)
            self.progress.start()  # rich's Live now stands behind sys.stdout/sys.stderr (line-buffered proxies)
            self._handlers = _log_through({id(streams[0]): sys.stdout, id(streams[1]): sys.stderr})
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
        if self.swanlab is not None:
            self.swanlab.log(metrics, step=iteration)
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

    def _tensorboard_summary(self, summary: object) -> None:
        """A raw Summary proto into the run's own event file (an HParams plugin record)."""
        assert self.tensorboard is not None and self.tensorboard.file_writer is not None  # open since __init__
        self.tensorboard.file_writer.add_summary(summary)

    def close(self, state: str = "finished") -> None:
        """``state``: how the run ended (finished, stopped, failed), kept in the W&B run's summary."""
        self.file.close()
        if self.progress is not None:
            for handler, stream in self._handlers:
                handler.setStream(stream)
            self.progress.stop()
        if self.tensorboard is not None:
            if self.hparams:
                self._tensorboard_summary(_session_end(state))
            self.tensorboard.close()
        if self.wandb is not None:
            self.wandb.summary["state"] = state
            self.wandb.finish(exit_code=1 if state == "failed" else 0)
        if self.swanlab is not None:
            self.swanlab.close(state)


def _session_start(params: dict[str, object]):  # -> tensorboard's summary_pb2.Summary
    """The HParams plugin's ``session_start_info`` of this run: the trial's parameters.

    TensorBoard's HParams tab makes one row per session (a run holding a session start), grouped by its
    ``group_name``: here a hash of the parameters (``summary_v2``'s default), so a trial's seeds are one
    group (its metrics averaged over them, each seed listed). Its metric columns are the runs' scalar tags
    (the last value of each). No ``experiment`` summary is written: TensorBoard takes the first it finds
    in any run as the whole study's, so one trial's values would become everyone's domain; without one it
    computes the experiment from every run's session start (what ``SummaryWriter.add_hparams``, which writes
    a separate run per call, does not give)."""
    from tensorboard.plugins.hparams import summary_v2

    return summary_v2.hparams_pb({str(k): _hparam_value(v) for k, v in params.items()})


def _session_end(state: str):  # -> tensorboard's summary_pb2.Summary
    """The HParams plugin's ``session_end_info``: how the run ended (finished: success; failed: failure;
    stopped early by its caller, as a sweep's pruner or Ctrl-C does: unknown)."""
    import time

    from tensorboard.compat.proto import summary_pb2
    from tensorboard.plugins.hparams import api_pb2, metadata, plugin_data_pb2

    status = {"finished": api_pb2.STATUS_SUCCESS, "failed": api_pb2.STATUS_FAILURE}.get(state, api_pb2.STATUS_UNKNOWN)
    info = plugin_data_pb2.SessionEndInfo(status=status, end_time_secs=time.time())
    summary = summary_pb2.Summary()
    summary.value.add(
        tag=metadata.SESSION_END_INFO_TAG,
        metadata=metadata.create_summary_metadata(plugin_data_pb2.HParamsPluginData(session_end_info=info)),
        tensor=metadata.NULL_TENSOR,
    )
    return summary


def _hparam_value(value: object) -> bool | float | str:
    """What an HParams value can be (bool, number, string); anything else (a list, None) as its text."""
    if isinstance(value, (bool, str)):
        return value
    if isinstance(value, (int, float)):
        return float(value)
    return json.dumps(value)


def _log_through(proxies: dict[int, IO[str]]) -> list[tuple[logging.StreamHandler, IO[str]]]:
    """Point every console log handler (a StreamHandler on one of the streams keyed by ``id``) at its proxy;
    return (handler, old stream) pairs to restore. Handlers hold the stream they were given at configuration
    time, so without this their lines would go straight to the terminal, under rich's bar."""
    swapped = []
    seen: set[int] = set()
    for logger in [logging.getLogger(), *logging.Logger.manager.loggerDict.values()]:  # or placeholders
        for handler in getattr(logger, "handlers", []):
            if id(handler) in seen or type(handler) is not logging.StreamHandler:  # not a FileHandler
                continue
            seen.add(id(handler))
            proxy = proxies.get(id(handler.stream))
            if proxy is not None:
                swapped.append((handler, handler.stream))
                handler.setStream(proxy)
    return swapped


def _eval_text(metrics: dict[str, float]) -> str:
    return (
        f"held-out accuracy greedy {metrics['eval/acc_greedy']:.3f} sampled {metrics.get('eval/acc', math.nan):.3f} "
        f"on {int(metrics.get('eval/prompts', 0))} prompts"
    )
