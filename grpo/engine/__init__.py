"""The embedded GRPO engine: a Qwen2 decoder in PyTorch trained with GRPO on rule rewards.

    from grpo.engine import train
    summary = train(cfg, run_dir=Path("runs/one"), callback=lambda it, metrics: None)

Read top to bottom: model.py (the network), tokenizer.py, hf_checkpoint.py (HF folders), data.py (task and
datasets), rewards.py (verifiers), rollout.py (sampling), loss.py (GRPO math), warm_start.py,
checkpoint.py, metrics.py, trainer.py (the loop), cli.py (the `grpo-train` Hydra app). See docs/engine.md.
``train`` and ``TrainingDiverged`` are imported lazily, so ``grpo-train``'s checks answer without torch.
"""

__all__ = ["TrainingDiverged", "train"]


def __getattr__(name: str):
    if name == "train":
        from grpo.engine.trainer import train

        return train
    if name == "TrainingDiverged":
        from grpo.engine.loss import TrainingDiverged

        return TrainingDiverged
    raise AttributeError(f"module 'grpo.engine' has no attribute {name!r}")
