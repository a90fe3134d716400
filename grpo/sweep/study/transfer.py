"""Transfer: the best settings of another study, tried first (spec key ``transfer``).

    transfer:
      study: kl_study_0.5b                     # the same search on a smaller proxy model, or an earlier study
      storage: sqlite:///studies/proxy.db      # its storage; absent: that study's default journal
      top_k: 3                                 # its best 3 complete configurations are enqueued

A proxy model's study ranks settings as the target's does far more often than not (JF-HPO, arXiv:2606.03073:
proxy-to-target rank correlation 0.90), but its *values* are on another scale: a 0.5B model's accuracy is not
a 7B model's. So what transfers is the ranking, not the values: the source's ``top_k`` best configurations
(by its own objective and direction, distinct parameters, restricted to the keys this study searches) are
enqueued with ``study.enqueue_trial`` before any proposal, like start points, and run here. Optuna's
``study.add_trials`` (copying the source's trials with their values) would feed the sampler the proxy's
values as if they were this study's, and could name a proxy's trial the winner: not done.

The source is opened read-only (``find_study``: nothing is created) and single-objective only. A source
configuration with a value outside this study's space is skipped (the next best is taken); none in the space,
no complete trial, or no such study is one line naming ``transfer.study``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import optuna
from optuna.study import StudyDirection
from optuna.trial import TrialState

from grpo.errors import UserError
from grpo.sweep.spec.models import SweepSpec
from grpo.sweep.spec.space import SearchSpace
from grpo.sweep.spec.start_points import as_stored, value_problem
from grpo.sweep.study.store import find_study
from grpo.trial_attrs import REPEAT_OF


@dataclass(frozen=True)
class TransferPoint:
    params: dict[str, Any]  # the searched keys the source ran, as this study's distributions hold them
    source_trial: int  # its trial number in the source study
    source_value: float


def source_spec(spec: SweepSpec) -> SweepSpec:
    """The spec as seen from the source study: its name and storage (absent: that study's default journal)."""
    assert spec.transfer is not None
    return spec.model_copy(update={"study": spec.transfer.study, "storage": spec.transfer.storage})


def transfer_points(spec: SweepSpec, space: SearchSpace) -> list[TransferPoint]:
    """The source study's ``top_k`` best distinct configurations that lie in ``space`` ([] without ``transfer``)."""
    if spec.transfer is None:
        return []
    where = f"{spec.source}: transfer.study: {spec.transfer.study}"
    source = source_spec(spec)
    study = find_study(source)
    if study is None:
        raise UserError(f"{where}: no such study in {source.storage_label()}")
    if len(study.directions) != 1:
        raise UserError(f"{where}: has {len(study.directions)} objectives; transfer reads single-objective studies")
    return best_points(study, space, spec.transfer.top_k, where)


def best_points(study: optuna.Study, space: SearchSpace, top_k: int, where: str) -> list[TransferPoint]:
    """``study``'s best ``top_k`` complete trials (repeats of earlier trials left out), one per distinct
    configuration of the keys ``space`` searches, skipping those with a value outside ``space``."""
    dists = space.distributions()
    complete = [
        t
        for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
        if t.value is not None and REPEAT_OF not in t.user_attrs
    ]
    if not complete:
        raise UserError(f"{where}: has no complete trial to transfer")
    maximize = study.direction == StudyDirection.MAXIMIZE
    complete.sort(key=lambda t: (-(t.value or 0.0) if maximize else (t.value or 0.0), t.number))
    points: list[TransferPoint] = []
    seen: set[str] = set()
    outside: list[str] = []
    for trial in complete:
        shared = {key: value for key, value in trial.params.items() if key in dists}
        if not shared:
            continue
        problems = [f"{key} {p}" for key, value in shared.items() if (p := value_problem(dists[key], value))]
        if problems:
            outside.append(f"trial {trial.number}: {problems[0]}")
            continue
        params = {key: as_stored(dists[key], value) for key, value in shared.items()}
        signature = repr(sorted(params.items()))
        if signature in seen:  # a confirmation rerun or the same point on other keys: one configuration
            continue
        seen.add(signature)
        points.append(TransferPoint(params, trial.number, float(trial.value or 0.0)))
        if len(points) == top_k:
            break
    if not points:
        why = outside[0] if outside else f"its trials search none of {', '.join(dists)}"
        raise UserError(f"{where}: none of its {len(complete)} complete trials lies in this search space ({why})")
    return points
