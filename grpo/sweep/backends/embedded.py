"""The embedded backend: the project's own GRPO trainer (grpo.engine) runs the trial in the Ray worker."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from grpo._fs import tail_lines
from grpo.config import GRPOConfig
from grpo.errors import UserError
from grpo.sweep.backends._base import RayOptions, ReportFn, TrialBackend, TrialFailed


class EmbeddedBackend(TrialBackend):
    """Runs ``grpo.engine.train`` in-process, on the CPU, a GPU or an NPU (``engine.device``).

    Example::

        backend = EmbeddedBackend()
        backend.run(cfg, Path("studies/s/trials/0/runs/seed0"), report=lambda i, m: False, resume=False)
    """

    def resources(self, cfg: GRPOConfig) -> RayOptions:
        options: RayOptions = {"num_cpus": max(1, int(cfg.engine.num_threads))}
        device = cfg.engine.device
        if device == "cuda":
            options["num_gpus"] = 1
        elif device == "npu":
            options["resources"] = {"NPU": int(cfg.rl_config.actor_resource.num_npus)}
        return options

    def check(self, cfg: GRPOConfig) -> list[str]:
        """What the embedded engine cannot train (a critic-based estimator, reward models ...)."""
        from grpo.engine.check import check_config  # no torch: safe in the driver

        return check_config(cfg)

    def check_search(self, keys: list[str], source: str) -> list[str]:
        """Searched keys the engine refuses or that cannot change its training (grpo/engine/coverage.py)."""
        from grpo.engine.coverage import searched_problems

        return searched_problems(keys, source)

    def run(self, cfg: GRPOConfig, trial_dir: Path, report: ReportFn, resume: bool) -> dict[str, Any]:
        from grpo.engine import TrainingDiverged, train

        try:
            return train(cfg, run_dir=trial_dir, callback=report)
        except TrainingDiverged as err:
            raise TrialFailed(f"training diverged: {err}", tail_lines(trial_dir / "train.log")) from None
        except UserError as err:
            raise TrialFailed(f"bad trial config: {err}", tail_lines(trial_dir / "train.log")) from None
