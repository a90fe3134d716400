"""The collapse rule (``pruner.collapse``): stop a trial whose held-out accuracy fell well below its base, or
whose training dynamics say the run has broken.

``below_base`` (default 0.10): a GRPO run whose learning rate is too high loses held-out accuracy within
10-20 iterations and, on the tabular GRPO benchmark, rarely recovers within its budget; the median pruner
needs several finished trials before it says so, this rule needs none. It compares, at the latest
evaluation every seed has reached, the mean over seeds of ``rule.metric`` with the mean of its iteration-0
values (the engine evaluates the base policy as iteration 0). 0.10 is about three binomial standard errors
on 256 held-out prompts at the tiny task's base accuracy of 0.66, so one noisy evaluation does not trip it.

The training-dynamics rules (JF-HPO, arXiv:2606.03073, stops on a KL rise, a reward drop, zero reward), each
off unless the spec gives its threshold, read the engine's per-iteration metrics as the mean over seeds at
the iterations every seed has reached:

- ``kl_spike``: ``actor/kl_loss`` above ``kl_spike`` x its median over the previous ``window`` iterations
  (and above ``KL_SPIKE_FLOOR``: a fresh policy's KL to its reference starts near 0 and multiplies freely);
- ``kl_max``: ``actor/kl_loss`` above ``kl_max``;
- ``reward_drop``: the mean of ``grpo/score/mean`` over the last ``window`` iterations more than
  ``reward_drop`` (the score's own units) below the best such mean so far;
- ``zero_reward``: ``grpo/score/mean`` at or below ``reward_floor`` (0.0) for ``zero_reward`` iterations
  in a row;
- ``entropy_floor``: ``actor/entropy`` below ``entropy_floor``.

A run without the metric (no reference model: no ``actor/kl_loss``) is never stopped by its rule. Each
reason starts ``collapse.<rule>`` so the status table and the report show which rule fired. The driver
and benchmarks/search_efficiency.py call ``collapse_reason`` (held-out) and ``dynamics_reason``.
"""

from __future__ import annotations

import statistics
from bisect import bisect_right
from collections.abc import Mapping, Sequence

from grpo.sweep.spec.models import CollapseRule

Curve = Sequence[tuple[int, float]]  # (iteration, value), iterations ascending
KL, SCORE, ENTROPY = "actor/kl_loss", "grpo/score/mean", "actor/entropy"  # grpo/engine/update.py, trainer.py
DYNAMICS_METRICS = (KL, SCORE, ENTROPY)
KL_SPIKE_FLOOR = 0.01
DEFAULT_WINDOW = 5
DEFAULT_REWARD_FLOOR = 0.0


def collapse_reason(rule: CollapseRule, curves: Sequence[Curve], step: int, train_iters: int) -> str | None:
    """Why ``below_base`` stops the trial by ``step`` (the iteration every seed has reached), or None.

    ``curves``: each seed's ``rule.metric`` curve. The first evaluation after iteration 0 that every seed
    has made and whose mean is more than ``below_base`` under the mean base decides (the driver may see
    several evaluations at once on a busy machine; the reason names the first). None while a seed has no
    base value (iteration 0).
    """
    if rule.below_base is None:
        return None
    base: list[float] = []
    for points in curves:
        if not points or points[0][0] != 0:
            return None
        base.append(points[0][1])
    base_mean = statistics.fmean(base) if base else 0.0
    for iteration, now_mean in mean_curve(curves, step):
        if iteration > 0 and now_mean < base_mean - rule.below_base:
            return (
                f"pruned by the collapse rule at iteration {iteration} of {train_iters}: {rule.metric} "
                f"{now_mean:.4g} is more than {rule.below_base:g} below the base policy's {base_mean:.4g}"
            )
    return None


def mean_curve(curves: Sequence[Curve], step: int) -> list[tuple[int, float]]:
    """The mean over seeds at each iteration up to ``step`` that every seed has reported."""
    by_seed = [dict(points[: bisect_right(points, step, key=lambda p: p[0])]) for points in curves]
    if not by_seed:
        return []
    common = set.intersection(*(set(seen) for seen in by_seed))
    return [(t, statistics.fmean(seen[t] for seen in by_seed)) for t in sorted(common)]


def dynamics_reason(
    rule: CollapseRule, curves: Mapping[str, Sequence[Curve]], step: int, train_iters: int
) -> str | None:
    """Why a training-dynamics rule stops the trial by ``step``, or None; the earliest iteration any rule fires
    at decides. ``curves``: metric name -> each seed's curve of it (``DYNAMICS_METRICS``)."""
    found: list[tuple[int, str, str]] = []  # (iteration, rule, what it saw)
    window = rule.window or DEFAULT_WINDOW
    kl = mean_curve(curves.get(KL) or [], step)
    score = mean_curve(curves.get(SCORE) or [], step)
    entropy = mean_curve(curves.get(ENTROPY) or [], step)
    if rule.kl_spike is not None:
        for i in range(window, len(kl)):
            median = statistics.median(v for _, v in kl[i - window : i])
            (t, v) = kl[i]
            if v > KL_SPIKE_FLOOR and v > rule.kl_spike * median:
                found.append(
                    (t, "kl_spike", f"{KL} {v:.4g} is over {rule.kl_spike:g}x its median {median:.4g} "
                     f"of the previous {window} iterations")
                )  # fmt: skip
                break
    if rule.kl_max is not None:
        hit = next(((t, v) for t, v in kl if v > rule.kl_max), None)
        if hit is not None:
            found.append((hit[0], "kl_max", f"{KL} {hit[1]:.4g} is over {rule.kl_max:g}"))
    if rule.reward_drop is not None:
        best = None
        for i in range(window - 1, len(score)):
            now = statistics.fmean(v for _, v in score[i - window + 1 : i + 1])
            if best is not None and now < best - rule.reward_drop:
                found.append(
                    (score[i][0], "reward_drop", f"{SCORE} averaged {now:.4g} over the last {window} iterations, "
                     f"more than {rule.reward_drop:g} below its best {best:.4g}")
                )  # fmt: skip
                break
            best = now if best is None else max(best, now)
    if rule.zero_reward is not None:
        floor = DEFAULT_REWARD_FLOOR if rule.reward_floor is None else rule.reward_floor
        run = 0
        for t, v in score:
            run = run + 1 if v <= floor else 0
            if run >= rule.zero_reward:
                found.append((t, "zero_reward", f"{SCORE} at or below {floor:g} for {run} iterations in a row"))
                break
    if rule.entropy_floor is not None:
        hit = next(((t, v) for t, v in entropy if v < rule.entropy_floor), None)
        if hit is not None:
            found.append((hit[0], "entropy_floor", f"{ENTROPY} {hit[1]:.4g} is below {rule.entropy_floor:g}"))
    if not found:
        return None
    t, name, what = min(found, key=lambda f: f[0])
    return f"collapse.{name} at iteration {t} of {train_iters}: {what}"


def uses_dynamics(rule: CollapseRule) -> bool:
    """Whether any training-dynamics rule is on."""
    return any(
        v is not None for v in (rule.kl_spike, rule.kl_max, rule.reward_drop, rule.zero_reward, rule.entropy_floor)
    )
