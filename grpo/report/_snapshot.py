"""A frozen view of a study: its trials read once, so every table and plot of a report agrees.

A report reads a study that may be running. Reading the trials once keeps the counts, the table and the
plots consistent with each other, and it is much faster: Optuna's plot functions call
``study.get_trials`` many times, and on a journal or RDB storage each call re-reads the whole study.
``StudySnapshot`` is a real ``optuna.Study`` on the same storage (directions, user attrs and metric
names come from it) whose ``get_trials`` answers from the trials it read, or from a subset of them
(``subset``), which is how the report draws Optuna's costlier plots from a sample of a big study.
Repeated proposals answered from an earlier trial (``best.is_repeat``) are not results: a snapshot of a
study leaves them out.
"""

from __future__ import annotations

from collections.abc import Container, Sequence

import optuna
from optuna.trial import FrozenTrial, TrialState

from grpo._optuna_private import storage_of
from grpo.report.best import is_repeat


class StudySnapshot(optuna.Study):
    """``study`` with its trials read once; ``trials`` limits it to those trials (a sample)."""

    def __init__(self, study: optuna.Study, trials: Sequence[FrozenTrial] | None = None):
        super().__init__(study_name=study.study_name, storage=storage_of(study))
        self.source: optuna.Study = study.source if isinstance(study, StudySnapshot) else study
        read = study.get_trials(deepcopy=False) if trials is None else trials
        self._frozen = [t for t in read if not is_repeat(t)]
        self._attrs = dict(study.user_attrs)

    def get_trials(self, deepcopy: bool = True, states: Container[TrialState] | None = None) -> list[FrozenTrial]:
        # The snapshot is read-only: callers get the shared objects (Optuna's plots never mutate them).
        if states is None:
            return list(self._frozen)
        return [t for t in self._frozen if t.state in states]

    @property
    def trials(self) -> list[FrozenTrial]:
        return self.get_trials()

    @property
    def user_attrs(self) -> dict:
        return self._attrs

    def subset(self, trials: Sequence[FrozenTrial]) -> StudySnapshot:
        """The same study limited to ``trials`` (for plots drawn from a sample)."""
        return StudySnapshot(self, trials)


def snapshot(study: optuna.Study) -> StudySnapshot:
    """``study`` as a snapshot (a snapshot is returned as it is)."""
    return study if isinstance(study, StudySnapshot) else StudySnapshot(study)
