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

from grpo.sweep.spec import CollapseRule

Curve = Sequence[tuple[int, float]]  # (iteration, value), iterations ascending


def collapse_reason(rule: CollapseRule, curves: Sequence[Curve], step: int, train_iters: int) -> str | None:
    """Why the rule stops the trial at ``step`` (the iteration every seed has reached), or None.

    ``curves``: each seed's ``rule.metric`` curve. None while a seed has no base value (iteration 0) or no
    evaluation after it, or the seeds' latest evaluations are at different iterations.
    """
    base, now, at = [], [], set()
    for points in curves:
        if not points or points[0][0] != 0:
            return None
        seen = points[: bisect_right(points, step, key=lambda p: p[0])]
        if len(seen) < 2:
            return None
        base.append(points[0][1])
        now.append(seen[-1][1])
        at.add(seen[-1][0])
    if len(at) != 1:
        return None
    base_mean, now_mean = statistics.fmean(base), statistics.fmean(now)
    if now_mean >= base_mean - rule.below_base:
        return None
    return (
        f"pruned by the collapse rule at iteration {at.pop()} of {train_iters}: {rule.metric} {now_mean:.4g} "
        f"is more than {rule.below_base:g} below the base policy's {base_mean:.4g}"
    )
