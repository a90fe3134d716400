"""Which trial is best: the one definition the report, `grpo-sweep best`, the run summary and the live view use.

Single objective: the COMPLETE trial with the best value (Optuna's ``study.best_trial`` rule, ties to the
lower number); once a confirmation stage has two or more complete trials, the best among them (they ran
more, fresh seeds: a search trial's single lucky seed does not outrank them; ``stats.verdict`` uses the
same pool); with one complete confirmation it stands for its source (``fold_confirmed``: the same point on
more seeds). Several objectives: the Pareto front (Optuna's ``study.best_trials``), and as "the" best
the front's member that is best on the first objective.

A population-based (pbt) study: only the segments of its last generation (``pbt_generation`` ==
``generations - 1`` of the study's ``pbt`` attr), whose curves run from iteration 0 to ``train_iters``, and
trials that are no segment (the confirmation stage) are candidates (``candidates``, ``comparable``): an
earlier segment's value is over a partial curve. ``ranked``, ``best_trial``, ``pareto_front`` and
``stats.verdict`` (``comparable_trials``: the highest generation among the trials it is given) apply it, so
the confirmation stage's top k, retention and ``grpo-sweep best`` agree with the report.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import optuna
from optuna.study import StudyDirection
from optuna.trial import FrozenTrial, TrialState

from grpo.trial_attrs import CONFIRMATION_OF, PBT_GENERATION, PBT_SETTINGS, PROMOTED_BASE, REPEAT_OF, SCHEDULE


def is_repeat(trial: FrozenTrial) -> bool:
    """A repeated proposal answered from an earlier trial (see grpo/sweep/study/repeats.py): the sampler's record,
    not a result. The report, ``status``, ``best`` and the budget leave it out."""
    return trial.user_attrs.get(REPEAT_OF) is not None


def sign(direction: StudyDirection) -> float:
    """-1 for a maximized objective, +1 for a minimized one: ``sign * value`` sorts best first."""
    return -1.0 if direction == StudyDirection.MAXIMIZE else 1.0


def _int(value: object) -> int | None:
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def segment_generation(trial: FrozenTrial) -> int | None:
    """The pbt generation a trial is a segment of; None for a trial that is no segment."""
    return _int(trial.user_attrs.get(PBT_GENERATION))


def last_generation(study: optuna.Study, trials: Sequence[FrozenTrial] | None = None) -> int | None:
    """A pbt study's last generation (``generations - 1`` of its ``pbt`` attr; without the attr, the highest
    generation a trial runs); None for a study that is not pbt."""
    settings = study.user_attrs.get(PBT_SETTINGS)
    generations = _int(settings.get("generations")) if isinstance(settings, dict) else None
    if generations is not None and generations >= 1:
        return generations - 1
    found = [
        g
        for t in (study.get_trials(deepcopy=False) if trials is None else trials)
        if (g := segment_generation(t)) is not None
    ]
    if found:
        return max(found)
    return 0 if isinstance(settings, dict) else None


def is_pbt(study: optuna.Study, trials: Sequence[FrozenTrial] | None = None) -> bool:
    """The study branches a population (its ``pbt`` attr, or a trial that is a segment)."""
    return last_generation(study, trials) is not None


def comparable(study: optuna.Study, trials: Sequence[FrozenTrial] | None = None) -> list[FrozenTrial]:
    """``trials`` (default: the study's, repeats left out) without the segments of a pbt study's earlier
    generations, whose values are over partial curves: what may be ranked against each other."""
    trials = [t for t in study.get_trials(deepcopy=False) if not is_repeat(t)] if trials is None else list(trials)
    return comparable_trials(trials, last_generation(study, trials))


def comparable_trials(trials: Sequence[FrozenTrial], last: int | None = None) -> list[FrozenTrial]:
    """``trials`` without the pbt segments of generations before ``last`` (default: the highest generation
    among ``trials``, right once the last generation has run); all of them when none is a segment."""
    if last is None:
        found = [g for t in trials if (g := segment_generation(t)) is not None]
        if not found:
            return list(trials)
        last = max(found)
    return [t for t in trials if (g := segment_generation(t)) is None or g == last]


def configuration(trial: FrozenTrial) -> str:
    """What a trial ran, as one comparable key: its parameters, its pbt schedule and the base a promoted
    confirmation ran on. A confirmation trial has its source's configuration: it is the same point rerun."""
    return json.dumps(
        [sorted(trial.params.items()), trial.user_attrs.get(SCHEDULE), trial.user_attrs.get(PROMOTED_BASE)],
        sort_keys=True,
        default=str,
    )


def fold_confirmed(trials: Sequence[FrozenTrial]) -> list[FrozenTrial]:
    """``trials`` without each search trial whose COMPLETE confirmation is among them: the rerun on fresh
    seeds stands for its source (same point, more seeds), so the two never compete as winner and runner-up."""
    rerun = {
        t.user_attrs[CONFIRMATION_OF]
        for t in trials
        if t.user_attrs.get(CONFIRMATION_OF) is not None and t.state == TrialState.COMPLETE
    }
    return [t for t in trials if t.user_attrs.get(CONFIRMATION_OF) is not None or t.number not in rerun]


def distinct_configurations(trials: Sequence[FrozenTrial]) -> list[FrozenTrial]:
    """``trials`` with each configuration's first occurrence only (order kept)."""
    seen: set[str] = set()
    kept = []
    for t in trials:
        key = configuration(t)
        if key not in seen:
            seen.add(key)
            kept.append(t)
    return kept


def complete_trials(study: optuna.Study) -> list[FrozenTrial]:
    """Every COMPLETE trial with values (a pbt study's earlier segments too; ``candidates`` leaves them out)."""
    return [t for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)) if t.values and not is_repeat(t)]


def candidates(study: optuna.Study) -> list[FrozenTrial]:
    """The COMPLETE trials that may be the best (``complete_trials``, in a pbt study only ``comparable`` ones)."""
    done = complete_trials(study)
    return comparable(study, done) if is_pbt(study) else done


def ranked(study: optuna.Study, objective: int = 0) -> list[FrozenTrial]:
    """The ``candidates``, best first on objective ``objective`` (ties: lower trial number first)."""
    s = sign(study.directions[objective])
    return sorted(candidates(study), key=lambda t: (s * t.values[objective], t.number))


def pareto_front(study: optuna.Study) -> list[FrozenTrial]:
    """The non-dominated candidates by number (for one objective: the best trial alone)."""
    if len(study.directions) == 1:
        best = best_trial(study)
        return [best] if best is not None else []
    if not is_pbt(study):
        return sorted(study.best_trials, key=lambda t: t.number)
    return _front(candidates(study), study.directions)


def _front(trials: Sequence[FrozenTrial], directions: Sequence[StudyDirection]) -> list[FrozenTrial]:
    """The trials no other trial dominates (at least as good on every objective, better on one), by number."""
    signs = [sign(d) for d in directions]
    keys = [[s * v for s, v in zip(signs, t.values, strict=True)] for t in trials]

    def dominates(a: list[float], b: list[float]) -> bool:
        return all(x <= y for x, y in zip(a, b, strict=True)) and any(x < y for x, y in zip(a, b, strict=True))

    front = [t for t, k in zip(trials, keys, strict=True) if not any(dominates(o, k) for o in keys if o is not k)]
    return sorted(front, key=lambda t: t.number)


def best_trial(study: optuna.Study) -> FrozenTrial | None:
    """The best COMPLETE trial (see the module docstring), or None when none has completed."""
    if len(study.directions) == 1:
        order = ranked(study)
        confirmed = [t for t in order if t.user_attrs.get(CONFIRMATION_OF) is not None]
        if len(confirmed) >= 2:
            return confirmed[0]
        order = fold_confirmed(order)
        return order[0] if order else None
    front = pareto_front(study)
    if not front:
        return None
    s = sign(study.directions[0])
    return min(front, key=lambda t: (s * t.values[0], t.number))
