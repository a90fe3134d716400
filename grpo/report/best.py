"""Which trial is best: the one definition the report, `grpo-sweep best`, the run summary and the live view use.

Single objective: the COMPLETE trial with the best value (Optuna's ``study.best_trial`` rule, ties to the
lower number); once a confirmation stage has two or more complete trials, the best among them (they ran
more, fresh seeds: a search trial's single lucky seed does not outrank them; ``stats.verdict`` uses the
same pool). Several objectives: the Pareto front (Optuna's ``study.best_trials``), and as "the" best
the front's member that is best on the first objective.
"""

from __future__ import annotations

import optuna
from optuna.study import StudyDirection
from optuna.trial import FrozenTrial, TrialState

from grpo.trial_attrs import CONFIRMATION_OF, REPEAT_OF


def is_repeat(trial: FrozenTrial) -> bool:
    """A repeated proposal answered from an earlier trial (see grpo/sweep/study/repeats.py): the sampler's record,
    not a result. The report, ``status``, ``best`` and the budget leave it out."""
    return trial.user_attrs.get(REPEAT_OF) is not None


def sign(direction: StudyDirection) -> float:
    """-1 for a maximized objective, +1 for a minimized one: ``sign * value`` sorts best first."""
    return -1.0 if direction == StudyDirection.MAXIMIZE else 1.0


def complete_trials(study: optuna.Study) -> list[FrozenTrial]:
    return [t for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)) if t.values and not is_repeat(t)]


def ranked(study: optuna.Study, objective: int = 0) -> list[FrozenTrial]:
    """COMPLETE trials, best first on objective ``objective`` (ties: lower trial number first)."""
    s = sign(study.directions[objective])
    return sorted(complete_trials(study), key=lambda t: (s * t.values[objective], t.number))


def pareto_front(study: optuna.Study) -> list[FrozenTrial]:
    """The non-dominated COMPLETE trials by number (for one objective: the best trial alone)."""
    if len(study.directions) == 1:
        best = best_trial(study)
        return [best] if best is not None else []
    return sorted(study.best_trials, key=lambda t: t.number)


def best_trial(study: optuna.Study) -> FrozenTrial | None:
    """The best COMPLETE trial (see the module docstring), or None when none has completed."""
    if len(study.directions) == 1:
        order = ranked(study)
        confirmed = [t for t in order if t.user_attrs.get(CONFIRMATION_OF) is not None]
        if len(confirmed) >= 2:
            return confirmed[0]
        return order[0] if order else None
    front = study.best_trials
    if not front:
        return None
    s = sign(study.directions[0])
    return min(front, key=lambda t: (s * t.values[0], t.number))
