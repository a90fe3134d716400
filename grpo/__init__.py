"""grpo-sweep: a declarative experiment-sweep manager for GRPO training (Optuna + Ray + Hydra)."""

__version__ = "0.1.0"
