"""Retry chains: an interrupted or failed trial and the retries that continued it read as one logical trial.

A retry is a new Optuna trial with ``retry_of`` (the attempt it continues; Optuna keeps that attempt's
FAIL record), ``attempt`` (attempts charged to the trial's ``retries``: an interruption charges none),
``resume_from`` (the attempt's trial dir) and, once it resumed from that attempt's checkpoint,
``resumed_at_iteration`` (seed -> the checkpoint's iteration; the retry adopted the attempt's metrics up
to it). ``retry_chains(trials)`` links them: #3 (FAIL) -> #5 (FAIL) -> #8 (COMPLETE) is one logical trial
whose state is #8's. The report (``page_summary``, ``page_trials``) and ``grpo-sweep status`` read the
chains from here; nothing here reads files or needs pandas.

    chains = retry_chains(study.get_trials(deepcopy=False))
    chains.runs[3] == [3, 5, 8]; chains.successor[3] == 5; chains.root[8] == 3
    chain_text(8, chains, by_number)   # 'run 3 of trial #3, resumed at iteration 4 of #5'
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from optuna.trial import FrozenTrial, TrialState

from grpo.trial_attrs import INFEASIBLE, RESUME_FROM, RESUMED_AT_ITERATION, RETRY_OF


@dataclass(frozen=True)
class Chains:
    """The logical trials of a study: each retry continues the attempt it names in ``retry_of``.

    ``root``: every attempt of a chain -> its first attempt (the logical trial's number); ``successor``:
    a superseded attempt -> the trial that continued it; ``runs``: first attempt -> the chain's attempts
    in order (the last one is the logical trial's current state). Trials outside any chain are in none of
    them. A retry told "not run" because the budget was reached (``is_placeholder``; the retry was queued
    again) is no attempt.
    """

    root: dict[int, int] = field(default_factory=dict)
    successor: dict[int, int] = field(default_factory=dict)
    runs: dict[int, list[int]] = field(default_factory=dict)

    def head(self, number: int) -> int:
        """The last attempt of ``number``'s chain (``number`` itself when nothing superseded it)."""
        seen = {number}
        while number in self.successor and self.successor[number] not in seen:
            number = self.successor[number]
            seen.add(number)
        return number

    def is_superseded(self, number: int) -> bool:
        return number in self.successor


def _int(value: object) -> int | None:
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def is_placeholder(trial: FrozenTrial) -> bool:
    """A retry that never ran: told "not run" as ``infeasible`` (it lost a race for the budget), queued again."""
    return trial.user_attrs.get(RETRY_OF) is not None and bool(trial.user_attrs.get(INFEASIBLE))


def retry_chains(trials: Iterable[FrozenTrial]) -> Chains:
    """The retry chains among ``trials`` (see ``Chains``), from their ``retry_of`` attrs; linear time."""
    ordered = sorted(trials, key=lambda t: t.number)
    numbers = {t.number for t in ordered}
    chains = Chains()
    for t in ordered:
        of = _int(t.user_attrs.get(RETRY_OF))
        if of is None or of not in numbers or of >= t.number or is_placeholder(t):
            continue
        chains.successor[of] = t.number  # in number order: the latest retry of ``of`` wins
    retries = set(chains.successor.values())
    for t in ordered:
        if t.number not in retries and t.number not in chains.successor:
            continue
        of = _int(t.user_attrs.get(RETRY_OF))
        root = chains.root.get(of, of) if of is not None and chains.successor.get(of) == t.number else t.number
        chains.root[t.number] = root
        chains.runs.setdefault(root, []).append(t.number)
    return chains


def logical_trials(trials: Iterable[FrozenTrial], chains: Chains | None = None) -> list[FrozenTrial]:
    """One trial per logical trial: all of ``trials`` but the attempts a retry superseded and the retries
    that never ran."""
    trials = list(trials)
    chains = chains if chains is not None else retry_chains(trials)
    return [t for t in trials if not chains.is_superseded(t.number) and not is_placeholder(t)]


def resumed_at(trial: FrozenTrial) -> dict[int, int]:
    """Seed -> the checkpoint iteration a retry resumed that seed from (its ``resumed_at_iteration`` attr)."""
    raw = trial.user_attrs.get(RESUMED_AT_ITERATION)
    out: dict[int, int] = {}
    if isinstance(raw, dict):
        for seed, iteration in raw.items():
            try:
                out[int(seed)] = int(iteration)
            except (TypeError, ValueError):
                continue
    return out


def resume_text(trial: FrozenTrial) -> str:
    """Where a retry resumed: ``resumed at iteration 4 of #7`` (a range where its seeds differ),
    ``resumes #7 from its checkpoint`` (not started yet) or ``started over (no checkpoint to resume from)``."""
    source = trial.user_attrs.get(RETRY_OF)
    at = sorted(set(resumed_at(trial).values()))
    if trial.user_attrs.get(RESUME_FROM) and at:
        where = f"iteration {at[0]}" if len(at) == 1 else f"iterations {at[0]} to {at[-1]} (per seed)"
        return f"resumed at {where} of #{source}"
    if trial.user_attrs.get(RESUME_FROM) and trial.state in (TrialState.WAITING, TrialState.RUNNING):
        return f"resumes #{source} from its checkpoint"
    return "started over (no checkpoint to resume from)"


def chain_text(number: int, chains: Chains, by_number: Mapping[int, FrozenTrial]) -> str:
    """``run 3 of trial #6, resumed at iteration 4 of #7`` (the last run), ``run 1 of trial #6, superseded
    by #7`` (an earlier one), or '' outside a chain."""
    root = chains.root.get(number)
    if root is None:
        return ""
    runs = chains.runs[root]
    k = runs.index(number) + 1
    text = f"run {k} of trial #{root}"
    if number in chains.successor:
        return f"{text}, superseded by #{chains.successor[number]}"
    trial = by_number.get(number)
    if k > 1 and trial is not None:
        text += ", " + resume_text(trial)
    return text
