"""The embedded backend: the project's own GRPO trainer (grpo.engine) runs the trial in the Ray worker."""

from __future__ import annotations

from pathlib import Path

from grpo.errors import UserError
from grpo.sweep.backends._base import ReportFn, TrialBackend, TrialFailed


class EmbeddedBackend(TrialBackend):
    """Runs ``grpo.engine.train`` in-process, on the CPU, a GPU or an NPU (``engine.device``).

    Example::

        backend = EmbeddedBackend()
        backend.run(cfg, Path("studies/s/trials/0/runs/seed0"), report=lambda i, m: False, resume=False)
    """

    name = "embedded"

    def resources(self, cfg) -> dict:
        options = {"num_cpus": max(1, int(cfg.engine.num_threads))}
        device = cfg.engine.device
        if device == "cuda":
            options["num_gpus"] = 1
        elif device == "npu":
            options["resources"] = {"NPU": int(cfg.rl_config.actor_resource.num_npus)}
        return options

    def run(self, cfg, trial_dir: Path, report: ReportFn, resume: bool) -> dict:
        from grpo.engine import TrainingDiverged, train

        try:
            return train(cfg, run_dir=trial_dir, callback=report)
        except TrainingDiverged as err:
            raise TrialFailed(f"training diverged: {err}", _tail(trial_dir / "train.log")) from None
        except UserError as err:
            raise TrialFailed(f"bad trial config: {err}", _tail(trial_dir / "train.log")) from None


def _tail(path: Path, n: int = 20) -> list[str]:
    try:
        return path.read_text(errors="replace").splitlines()[-n:]
    except OSError:
        return []
