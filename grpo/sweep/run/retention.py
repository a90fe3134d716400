"""Which trials keep their checkpoints once they have ended (spec ``keep_final_checkpoints``), and removing the rest.

``keep_checkpoints`` bounds the checkpoints of a run while it runs; this rule decides what survives the trial:

- ``best`` (default): the best complete trial's checkpoints stay (``grpo.report.best``: the one definition the
  report and ``grpo-sweep best`` use; a multi-objective study keeps its Pareto front). When a new best arrives the
  previous best's go. Confirmation trials are candidates like any trial: once two have completed, the best is one
  of them (the same rule as ``best_trial``), and until then every complete confirmation trial keeps its own, since
  it may become the best.
- ``all``: nothing is removed (every trial's last checkpoints stay, as before this rule).
- ``none``: every ended trial's are removed.

Whatever the rule, nothing a resume needs is removed: a RUNNING or WAITING trial's own folder, the folder a retry
resumes from (``resume_from``) and the earlier attempts of that retry chain, and a FAIL trial whose retry has not
ended yet (or was never enqueued). So a study cut short (Ctrl-C, a killed driver) still resumes: its trials are
RUNNING or have a retry waiting. The rule is applied to ended trials only (COMPLETE, PRUNED, FAIL), again at each
start of the driver, so a study resumed after a crash cleans up what ended before it.

This mirrors Ray's ``CheckpointConfig(num_to_keep, checkpoint_score_attribute, checkpoint_score_order)``
(ray/air/config.py; ray/train/_internal/checkpoint_manager.py ``register_checkpoint``): checkpoints are ranked by
the score, here the study's objective(s) in their directions, the worst go, the latest one a resume needs never
does, and the bookkeeping is settled before anything is deleted. Unlike Ray's per-run rule it ranks trials, not
the checkpoints of one run (that is ``keep_checkpoints``).

Only folders the sweep itself wrote are removed: ``<study>/trials/<N>/runs/seed<k>/ckpt`` of a trial whose
recorded ``trial_dir`` is its folder under this study's ``trials/``; a link or a file by that name is left alone.
A removal that fails is a warning, never the study's end.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import optuna
from optuna.trial import FrozenTrial, TrialState

from grpo._fs import CHECKPOINT_DIR
from grpo.report.best import pareto_front
from grpo.sweep.execution.trial_storage import open_storage, run_path
from grpo.sweep.spec.models import KeepRule
from grpo.sweep.study.retry import is_confirmation
from grpo.trial_attrs import BRANCH_OF, PBT_GENERATION, PBT_SETTINGS, RESUME_FROM, RETRIED, RETRY_OF, SEEDS, TRIAL_DIR

RUN_DIR = re.compile(r"^seed\d+$")  # <trial_dir>/runs/seed<k>
ENDED = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)
ACTIVE = (TrialState.RUNNING, TrialState.WAITING)


def kept_by_rule(study: optuna.Study, trials: Sequence[FrozenTrial], rule: KeepRule) -> set[int]:
    """The trials whose checkpoints ``rule`` keeps (for ``all``: every trial)."""
    if rule == "all":
        return {t.number for t in trials}
    if rule == "none":
        return set()
    kept = {t.number for t in pareto_front(study)}
    if len(study.directions) == 1:
        confirmed = [t for t in trials if is_confirmation(t) and t.state == TrialState.COMPLETE]
        if len(confirmed) < 2:  # best_trial ranks confirmation trials apart from two on: each may become the best
            kept |= {t.number for t in confirmed}
    return kept


def needed_for_resume(trials: Sequence[FrozenTrial], generations: int | None = None) -> set[int]:
    """The trials whose checkpoints a run or a resume may still read.

    A RUNNING or WAITING trial, a FAIL trial marked ``retried`` none of whose retries has ended, and, from each
    of them, the chain of folders it resumes from (``resume_from``, then that trial's own ``resume_from``...);
    in a pbt study also a running branch's parent and the next generation's parents (``next_parents``).
    """
    by_dir = {str(t.user_attrs[TRIAL_DIR]): t for t in trials if t.user_attrs.get(TRIAL_DIR)}
    retries_ended = {t.user_attrs.get(RETRY_OF) for t in trials if t.state in ENDED}
    needed: set[int] = set(next_parents(trials, generations))
    for t in trials:
        pending_retry = t.state == TrialState.FAIL and t.user_attrs.get(RETRIED) and t.number not in retries_ended
        if t.state not in ACTIVE and not pending_retry:
            continue
        needed.add(t.number)
        if t.user_attrs.get(BRANCH_OF) is not None:  # a branch's retry with no checkpoint of its own starts there
            needed.add(int(t.user_attrs[BRANCH_OF]))
        source = t.user_attrs.get(RESUME_FROM)
        while source:
            parent = by_dir.get(str(source))
            if parent is None or parent.number in needed:
                break
            needed.add(parent.number)
            source = parent.user_attrs.get(RESUME_FROM)
    return needed


def next_parents(trials: Sequence[FrozenTrial], generations: int | None) -> list[int]:
    """A pbt study's complete segments of its newest generation unless that is its last (``generations``): the
    next generation branches from their checkpoints, enqueued once the whole generation has ended."""
    found = [int(t.user_attrs[PBT_GENERATION]) for t in trials if t.user_attrs.get(PBT_GENERATION) is not None]
    if not found or (generations is not None and max(found) >= generations - 1):
        return []
    newest = max(found)
    return [t.number for t in trials if t.user_attrs.get(PBT_GENERATION) == newest and t.state == TrialState.COMPLETE]


def removable(study: optuna.Study, rule: KeepRule, trials: Sequence[FrozenTrial] | None = None) -> list[FrozenTrial]:
    """The ended trials with a folder whose checkpoints neither ``rule`` nor a resume keeps, by number
    (``trials``: the study's trials as read already)."""
    if rule == "all":
        return []
    trials = study.get_trials(deepcopy=False) if trials is None else trials
    generations = (study.user_attrs.get(PBT_SETTINGS) or {}).get("generations")
    keep = kept_by_rule(study, trials, rule) | needed_for_resume(trials, generations)
    return [t for t in trials if t.state in ENDED and t.user_attrs.get(TRIAL_DIR) and t.number not in keep]


def run_dirs(trial_dir: Path) -> list[Path]:
    """The seed run folders (``runs/seed<k>``) the sweep made in ``trial_dir``."""
    try:
        entries = sorted(os.scandir(trial_dir / "runs"), key=lambda e: e.name)
    except OSError:
        return []
    return [Path(e.path) for e in entries if RUN_DIR.match(e.name) and e.is_dir(follow_symlinks=False)]


def remove_checkpoints(runs: Iterable[Path]) -> tuple[int, list[str]]:
    """Remove the checkpoint folder (``ckpt``) of each seed run folder in ``runs``: (folders removed, warnings).

    The one place that deletes: trial storage on another file system would point it at its own folders.
    """
    removed, warnings = 0, []
    for run in runs:
        ckpt = Path(run) / CHECKPOINT_DIR
        if not os.path.lexists(ckpt):
            continue
        if ckpt.is_symlink() or not ckpt.is_dir():
            warnings.append(f"{ckpt}: left alone (not a checkpoint folder the sweep wrote)")
            continue
        try:
            shutil.rmtree(ckpt)
        except OSError as err:
            warnings.append(f"{ckpt}: could not remove the checkpoints: {err.strerror or err}")
            continue
        removed += 1
    return removed, warnings


def remove_stored_checkpoints(location: str, number: int, seeds: int) -> tuple[int, list[str]]:
    """``remove_checkpoints`` for trial ``number``'s seed runs kept in trial storage at ``location`` (an object
    store: a local trial storage is reached through the trial folder's ``runs`` link)."""
    removed, warnings = 0, []
    try:
        store = open_storage(location)
        for index in range(seeds):
            removed += store.remove_checkpoints(run_path(number, index))
    except OSError as err:
        warnings.append(f"{location}: could not remove the checkpoints: {err}")
    return removed, warnings


@dataclass
class Retention:
    """Applies ``rule`` to the trials of the study in ``study_dir``; remembers the trials it has dealt with.
    ``stored``: the study's folder in trial storage when that is an object store (its checkpoints are there)."""

    rule: KeepRule
    study_dir: Path
    stored: str | None = None
    done: set[int] = field(default_factory=set)

    def own_dir(self, trial: FrozenTrial) -> Path | None:
        """The trial's folder when it is the one the sweep made for it under this study, else None."""
        recorded = trial.user_attrs.get(TRIAL_DIR)
        if not recorded:
            return None
        expected = (self.study_dir / "trials" / str(trial.number)).resolve()
        return expected if Path(str(recorded)).resolve() == expected else None

    def apply(self, study: optuna.Study, trials: Sequence[FrozenTrial] | None = None) -> tuple[list[int], list[str]]:
        """Remove what the rule lets go now: (trials whose checkpoints were removed, warnings)."""
        removed, warnings = [], []
        for trial in removable(study, self.rule, trials):
            if trial.number in self.done:
                continue
            self.done.add(trial.number)  # once per driver: a removal that failed is not retried at every trial end
            folder = self.own_dir(trial)
            if folder is None:
                continue
            if self.stored:
                count, problems = remove_stored_checkpoints(
                    self.stored, trial.number, len(trial.user_attrs.get(SEEDS) or [0])
                )
            else:
                count, problems = remove_checkpoints(run_dirs(folder))
            warnings += [f"trial {trial.number}: {p}" for p in problems]
            if count:
                removed.append(trial.number)
        return removed, warnings


__all__ = [
    "Retention",
    "kept_by_rule",
    "needed_for_resume",
    "removable",
    "remove_checkpoints",
    "remove_stored_checkpoints",
    "run_dirs",
]
