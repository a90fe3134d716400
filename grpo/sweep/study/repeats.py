"""A proposal equal to a trial that already ran: told that trial's result, never run again.

The driver never reruns a point (a restart's or another driver's sampler, or a sampler on a small
space, may propose it again). What the repeat is told matters to the sampler. Told FAIL, it is ignored:
TPE then sees nothing new and proposes the same point again and again, so on a small all-categorical
space the study used to stall after about 6.5 trials (measured by benchmarks/search_efficiency.py).
Told the earlier trial's result, the sampler learns the point is known, the way Optuna's FAQ answers
"how to avoid evaluating the same parameters" (the objective returns the earlier trial's value):

- earlier COMPLETE: the repeat is COMPLETE with the same values (no intermediate values, so the median
  pruner's statistics do not count the run twice);
- earlier PRUNED: the repeat reports the earlier trial's last intermediate value at the same step and is
  PRUNED (TPE ranks a pruned trial by its last step and value);
- earlier still running, or failed: FAIL (nothing to copy yet; with ``concurrency > 1`` TPE's constant
  liar already steers away from running points).

The repeat carries ``repeat_of`` (``grpo.trial_attrs.REPEAT_OF``): it uses none of the budget, and the
report, ``status`` and ``best`` leave it out. benchmarks/search_efficiency.py calls ``answer_repeat``
itself, so the replay measures this very rule.
"""

from __future__ import annotations

import optuna
from optuna.trial import FrozenTrial, TrialState

from grpo.trial_attrs import FAILURE_REASON, REPEAT_OF


def answer_repeat(study: optuna.Study, trial: optuna.Trial, earlier: FrozenTrial) -> TrialState:
    """Tell ``trial`` (asked, not run) what ``earlier`` (same parameters) found; return the state told."""
    trial.set_user_attr(REPEAT_OF, earlier.number)
    if earlier.state == TrialState.COMPLETE and earlier.values:
        study.tell(trial, list(earlier.values))
        return TrialState.COMPLETE
    if earlier.state == TrialState.PRUNED and earlier.intermediate_values and len(study.directions) == 1:
        step = max(earlier.intermediate_values)
        trial.report(earlier.intermediate_values[step], step=step)
        study.tell(trial, state=TrialState.PRUNED)
        return TrialState.PRUNED
    trial.set_user_attr(FAILURE_REASON, f"not run: the same parameters as trial {earlier.number}")
    study.tell(trial, state=TrialState.FAIL)
    return TrialState.FAIL
