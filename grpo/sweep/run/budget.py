"""The search budget of one driver: how many trials the spec's budget has left, whether the search is spent,
and whether the driver may ask for more (search trials, pbt segments, confirmations) or is finished.

The driver owns what runs; this answers from the study's trials (``TrialsView``, read once per turn), the
asker's exhaustion (a finite space proposed every point), the pbt population when there is one, and the
confirmation stage's state.
"""

from __future__ import annotations

from collections.abc import Callable

from grpo.sweep.run import pbt
from grpo.sweep.run.admit import Asker
from grpo.sweep.run.record import Recorder, TrialsView
from grpo.sweep.spec.models import SweepSpec
from grpo.sweep.study.retry import counts_toward_budget, holds_budget, is_confirmation


class SearchBudget:
    def __init__(self, spec: SweepSpec, view: TrialsView, asker: Asker, recorder: Recorder):
        self.spec, self.view, self.asker, self.recorder = spec, view, asker, recorder
        self.population: pbt.Population | None = None  # spec ``scheduler: {kind: pbt}``

    def left(self) -> int:
        """Trials the spec's ``trials`` still allows (retries and confirmations hold none)."""
        return self.spec.trials - sum(1 for t in self.view.all() if holds_budget(t))

    def spent(self) -> bool:
        if self.population is not None:
            return self.population.finished(self.view.all())
        return self.asker.exhausted or self.left() <= 0

    def may_ask(self) -> bool:
        if self.population is not None:  # only what was enqueued: segments, their retries, confirmations
            return bool(self.view.waiting())
        return not self.spent() or self.confirmations_waiting()

    def search_finished(self, search_running: Callable[[], bool]) -> bool:
        """The search is over and none of its trials runs here (``search_running``): the confirmation stage
        may rank them."""
        if search_running():
            return False
        if self.population is not None:
            return self.population.finished(self.view.all())
        counted = sum(1 for t in self.view.all() if counts_toward_budget(t))
        return self.asker.exhausted or counted >= self.spec.trials

    def confirmations_waiting(self) -> bool:
        return any(is_confirmation(t) for t in self.view.waiting())

    def finished(self) -> bool:
        """Nothing is left to ask: the search is spent and the confirmation stage (if any) has nothing waiting."""
        if not self.spent():
            return False
        if self.spec.confirm is not None and not self.recorder.stage_started:
            return False
        return not self.confirmations_waiting()
