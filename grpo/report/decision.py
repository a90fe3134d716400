"""The report's answer to "which settings, and how sure": the winner, the runner-up, what finding them cost.

``study_decision(study, frames)`` reads a snapshot and the collected frames and returns a ``Decision``:

- ``best``: the trial the report recommends (and marks in every plot, exports, and shows how to rerun).
  One objective: the winner of ``grpo.report.stats.verdict``: among the confirmation trials when at least
  two ran (they re-ran the search's best on more, fresh seeds), else among all complete trials, ranked by
  the mean over seeds. Several objectives: the Pareto-optimal trial best on the first objective
  (``grpo.report.best.best_trial``; a front has no single runner-up).
- ``verdict``: winner and runner-up with their intervals over seeds and a paired test (one objective).
- ``highest``: the complete trial with the best stored value (``ranked``); the page says so when it is
  not ``best`` (a search trial whose one lucky seed the confirmation stage did not repeat).
- ``compute``: device-seconds and wall time up to the best trial and in all.
- ``promotions``: when the confirmation stage ran on another base (``confirm.base``), whether the search's
  ranking held there (``grpo.report.promotion``).

In a population-based (pbt) study only the last generation's segments and the confirmation trials compete
(``grpo.report.best.comparable``): earlier segments' values are over partial curves.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

import optuna
import pandas as pd
from optuna.trial import FrozenTrial, TrialState

from grpo.report import stats
from grpo.report._snapshot import snapshot
from grpo.report.best import best_trial, comparable, pareto_front, ranked
from grpo.report.collect import Frames
from grpo.report.promotion import Promotion, promotions
from grpo.trial_attrs import RESOURCES


@dataclass(frozen=True)
class Compute:
    """What the study cost: device-seconds (``kind`` says of what) and wall seconds, to the best and in all."""

    kind: str  # "NPU", "GPU", "accelerator" (held, kind unknown) or "CPU"
    device_s_total: float
    wall_s_total: float | None
    device_s_to_best: float | None
    wall_s_to_best: float | None
    trials_to_best: int | None  # trials started up to the best (by trial number)
    running: bool


@dataclass(frozen=True)
class Decision:
    best: FrozenTrial | None
    verdict: stats.Verdict | None
    highest: FrozenTrial | None
    front: list[FrozenTrial]
    compute: Compute
    multi: bool
    promotions: tuple[Promotion, ...] = ()

    @property
    def runner_up(self) -> FrozenTrial | None:
        return self.verdict.runner_up if self.verdict is not None else None


def study_decision(study: optuna.Study, frames: Frames) -> Decision:
    """The study's ``Decision`` (see the module docstring)."""
    snap = snapshot(study)
    multi = len(snap.directions) > 1
    order = ranked(snap) if not multi else []
    highest = order[0] if order else best_trial(snap)
    trials = snap.get_trials(deepcopy=False)
    verdict = None if multi else stats.verdict(comparable(snap, trials), snap.directions[0])
    best = verdict.winner if verdict is not None else highest
    front = pareto_front(snap) if multi else []
    base = snap.user_attrs.get("base")
    promoted = tuple(promotions(trials, snap.directions[0], str(base) if base else None))
    return Decision(best, verdict, highest, front, compute(snap, frames, best), multi, promoted)


def accelerator_kind(trials: list[FrozenTrial]) -> str | None:
    """``NPU`` or ``GPU`` from the trials' Ray ``resources`` attr; None when no trial held an accelerator."""
    kinds = set()
    for t in trials:
        options = t.user_attrs.get(RESOURCES)
        if not isinstance(options, dict):
            continue
        custom = options.get("resources")
        custom = custom if isinstance(custom, dict) else {}
        if custom.get("NPU"):
            kinds.add("NPU")
        if options.get("num_gpus") or custom.get("GPU"):
            kinds.add("GPU")
    return kinds.pop() if len(kinds) == 1 else ("accelerator" if kinds else None)


def compute(study: optuna.Study, frames: Frames, best: FrozenTrial | None) -> Compute:
    """Device-seconds (``compute_s`` of the trials frame: accelerator-seconds where trials held one) and
    wall time, in all and up to ``best`` (the trials numbered up to it: the ones asked before it)."""
    trials = study.get_trials(deepcopy=False)
    table = frames.trials
    held = float(table["npu_s"].fillna(0).sum()) if "npu_s" in table and len(table) else 0.0
    kind = (accelerator_kind(trials) or "accelerator") if held > 0 else "CPU"
    compute_s = table["compute_s"].fillna(0.0) if len(table) else pd.Series(dtype="float64")
    total = float(compute_s.sum())
    starts = [t.datetime_start for t in trials if t.datetime_start is not None]
    running = any(t.state == TrialState.RUNNING for t in trials)
    first = min(starts) if starts else None
    wall_total = None
    if first is not None:
        ends = [t.datetime_complete for t in trials if t.datetime_complete is not None]
        end = _now(first) if running or not ends else max(ends)
        wall_total = max(0.0, (end - first).total_seconds())
    to_best = wall_to_best = n_to_best = None
    if best is not None and len(table):
        upto = table["number"] <= best.number
        to_best = float(compute_s[upto].sum())
        n_to_best = int(upto.sum())
        if first is not None and best.datetime_complete is not None:
            wall_to_best = max(0.0, (best.datetime_complete - first).total_seconds())
    return Compute(kind, total, wall_total, to_best, wall_to_best, n_to_best, running)


def _now(reference: dt.datetime) -> dt.datetime:
    return dt.datetime.now(reference.tzinfo)
