"""The layout memory planner: will a parallel layout fit on the NPUs before a trial is launched?

``estimate(cfg, device_memory_gb)`` gives the per-NPU memory of training and generation and a
feasibility verdict with its reason (formulas and sources: docs/planner.md). It is a leaf: a pure
function of a config. The table ``grpo-sweep validate SPEC`` prints is ``grpo.sweep.commands.layout_table``.
"""

from grpo.plan.memory import Estimate, estimate, model_parameters, not_modelled

__all__ = ["Estimate", "estimate", "model_parameters", "not_modelled"]
