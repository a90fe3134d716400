"""The embedded GRPO engine: a Qwen2 decoder in PyTorch trained with GRPO on rule rewards.

    from grpo.engine import check_config, train
    problems = check_config(cfg)            # [] when the engine can run cfg (no torch needed)
    summary = train(cfg, run_dir=Path("runs/one"), callback=lambda it, metrics: None)

Read top to bottom: model.py (the network), tokenizer.py, hf_checkpoint.py (HF folders), data.py (task and
datasets), rewards/ (verifiers), rollout.py (sampling), loss.py (GRPO math), warm_start.py,
checkpoint.py, metrics.py, check.py (what the engine refuses), build.py, draw.py and update.py (a run's
setup, rollout and update phases), trainer.py (the loop), cli.py (the `grpo-train` Hydra app). See
docs/engine.md.
``train`` and ``TrainingDiverged`` are imported lazily, so ``check_config`` and ``grpo-train``'s checks
answer without torch.
"""

from typing import TYPE_CHECKING, Any

from grpo.engine.check import check_config

if TYPE_CHECKING:
    from grpo.engine.loss import TrainingDiverged
    from grpo.engine.trainer import train

__all__ = ["TrainingDiverged", "check_config", "train"]


def __getattr__(name: str) -> Any:
    if name == "train":
        from grpo.engine.trainer import train

        return train
    if name == "TrainingDiverged":
        from grpo.engine.loss import TrainingDiverged

        return TrainingDiverged
    raise AttributeError(f"module 'grpo.engine' has no attribute {name!r}")
