"""The collapse rule (``pruner.collapse``): stop a trial whose held-out accuracy fell well below its base.

A GRPO run whose learning rate is too high loses held-out accuracy within 10-20 iterations and, on the
tabular GRPO benchmark, rarely recovers within its budget; the median pruner needs several finished
trials before it says so, this rule needs none. It compares, at the latest evaluation every seed has
reached, the mean over seeds of ``rule.metric`` with the mean of its iteration-0 values (the engine
evaluates the base policy as iteration 0). The default margin, 0.10, is about three binomial standard
errors on 256 held-out prompts at the tiny task's base accuracy of 0.66, so one noisy evaluation does not
trip it. The driver and benchmarks/search_efficiency.py both call ``collapse_reason``.
"""

from __future__ import annotations

import statistics
from bisect import bisect_right
from collections.abc import Sequence

from grpo.sweep.spec.models import CollapseRule

Curve = Sequence[tuple[int, float]]  # (iteration, value), iterations ascending


def collapse_reason(rule: CollapseRule, curves: Sequence[Curve], step: int, train_iters: int) -> str | None:
    """Why the rule stops the trial by ``step`` (the iteration every seed has reached), or None.

    ``curves``: each seed's ``rule.metric`` curve. The first evaluation after iteration 0 that every seed
    has made and whose mean is more than ``below_base`` under the mean base decides (the driver may see
    several evaluations at once on a busy machine; the reason names the first). None while a seed has no
    base value (iteration 0).
    """
    base: list[float] = []
    by_seed: list[dict[int, float]] = []
    for points in curves:
        if not points or points[0][0] != 0:
            return None
        base.append(points[0][1])
        by_seed.append(dict(points[1 : bisect_right(points, step, key=lambda p: p[0])]))
    common = set.intersection(*(set(seen) for seen in by_seed)) if by_seed else set()
    base_mean = statistics.fmean(base) if base else 0.0
    for iteration in sorted(common):
        now_mean = statistics.fmean(seen[iteration] for seen in by_seed)
        if now_mean < base_mean - rule.below_base:
            return (
                f"pruned by the collapse rule at iteration {iteration} of {train_iters}: {rule.metric} "
                f"{now_mean:.4g} is more than {rule.below_base:g} below the base policy's {base_mean:.4g}"
            )
    return None
