"""The embedded engine's SwanLab run, as MindSpeed-RL's ``SwanLabLogger`` (mindspeed_rl/utils/loggers.py)
starts one from ``rl_config.use_swanlab``, ``swanlab_project``, ``swanlab_exp_name``, ``swanlab_save_dir`` and
``swanlab_mode``, plus what a sweep adds as W&B gets it: the study as the run's group
(``engine.swanlab_group``: SwanLab's ``group`` where its ``init`` has one, 0.7 on, and a tag always, since
0.6 has no groups) and the whole config, the trial's parameters included (``engine.trial_params``), as its
config. ``swanlab_mode`` is passed explicitly, so ``offline`` (a backup file, ``swanlab sync`` uploads it
later) and ``local`` never go online whatever ``SWANLAB_MODE`` or a stored key say; files go to
``swanlab_save_dir`` or ``<run_dir>/swanlog`` (MindSpeed-RL: ``./swanlab``; a sweep's run has its own folder).

SwanLab is an optional extra (``pip install 'grpo-sweep[swanlab]'``); ``grpo.config.rules.swanlab_settings``
refuses ``use_swanlab`` without it (or without a project, name or mode) at validate, in one line.
"""

from __future__ import annotations

import inspect
import warnings
from pathlib import Path
from typing import Any

from grpo.config import GRPOConfig

DEFAULT_DIR = "swanlog"


def init_kwargs(cfg: GRPOConfig, run_dir: Path, accepted: set[str] | None = None) -> dict[str, Any]:
    """The ``swanlab.init`` arguments of this run; ``accepted``: the parameter names the installed
    ``swanlab.init`` takes (``group`` only from SwanLab 0.7 on)."""
    rl, engine = cfg.rl_config, cfg.engine
    group = getattr(engine, "swanlab_group", None)
    kwargs: dict[str, Any] = {
        "project": getattr(rl, "swanlab_project", "") or "grpo-sweep",
        "experiment_name": getattr(rl, "swanlab_exp_name", "") or Path(run_dir).name,
        "config": cfg.to_dict(),
        "logdir": getattr(rl, "swanlab_save_dir", "") or str(Path(run_dir) / DEFAULT_DIR),
        "mode": getattr(rl, "swanlab_mode", "") or "offline",  # never None: SwanLab would ask for a login
        "tags": [group] if group else None,
    }
    if group and (accepted is None or "group" in accepted):
        kwargs["group"] = group
    return kwargs


class SwanLabRun:
    """One seed's SwanLab run: ``log`` per iteration, ``close`` with how the run ended."""

    def __init__(self, cfg: GRPOConfig, run_dir: Path):
        with warnings.catch_warnings():  # its pynvml import warns on every import: no stray library lines
            warnings.simplefilter("ignore")
            import swanlab
        self.swanlab = swanlab
        accepted = set(inspect.signature(swanlab.init).parameters)
        kwargs = init_kwargs(cfg, run_dir, accepted)
        Path(kwargs["logdir"]).mkdir(parents=True, exist_ok=True)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            self.run = swanlab.init(**kwargs)
        self.logdir = Path(kwargs["logdir"])

    def log(self, metrics: dict[str, float], step: int) -> None:
        self.run.log(metrics, step=step)

    def close(self, state: str = "finished") -> None:
        """``state``: finished, stopped or failed (SwanLab's CRASHED state, which carries an error text)."""
        if state == "failed":
            try:  # where SwanLab 0.6 keeps its run states; other versions finish as plain success
                from swanlab.data.run.helper import SwanLabRunState  # type: ignore[import-untyped,unused-ignore]
            except ImportError:
                pass
            else:
                self.swanlab.finish(SwanLabRunState.CRASHED, error="the run failed (see train.log)")
                return
        self.swanlab.finish()
