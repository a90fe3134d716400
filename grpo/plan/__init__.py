"""The layout memory planner: will a parallel layout fit on the NPUs before a trial is launched?

``estimate(cfg, device_memory_gb)`` gives the per-NPU memory of training and generation and a
feasibility verdict with its reason (formulas and sources: docs/planner.md); ``layout_table(spec)``
is the table ``grpo-sweep validate SPEC`` prints for the layouts of a sweep.
"""

from grpo.plan.memory import Estimate, estimate, model_parameters
from grpo.plan.table import LayoutRow, layout_rows, layout_table

__all__ = ["Estimate", "LayoutRow", "estimate", "layout_rows", "layout_table", "model_parameters"]
