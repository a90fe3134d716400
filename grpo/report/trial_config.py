"""A trial's resolved config: the one way to read it back, whichever way the sweep stored it.

The sweep writes the config a trial ran with to its folder (``trials/<N>/config.yaml``) and keeps only a
pointer in the trial's user attrs, ``config_file``: the file's path relative to the study folder and the
first 16 hex digits of its sha256, so a file edited since the trial ran is noticed. Studies written before
kept the whole config in the ``config`` attr (about 4 kB per trial, in every row of ``optuna trials``);
they are read from it.

    found = recorded_config(trial, study)
    if found is not None:
        found.config["rl_config"]["clip_ratio"], found.changed
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import FrozenTrial

from grpo._yaml import decode_text, parse_yaml_text
from grpo.errors import UserError
from grpo.trial_attrs import CONFIG_INLINE, CONFIG_POINTER, TRIAL_DIR

_DIGITS = 16


@dataclass(frozen=True)
class TrialConfig:
    """A trial's config, ``source`` (the file read, or the ``config`` attr) and whether the file
    changed since the trial wrote it (its sha256 differs from the recorded one)."""

    config: dict[str, Any]
    source: str
    changed: bool = False


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:_DIGITS]


def config_pointer(config_path: Path, study_dir: Path) -> dict[str, str]:
    """The ``config_file`` attr of a config written at ``config_path``: its path from ``study_dir`` and its hash."""
    path = Path(os.path.relpath(Path(config_path).resolve(), Path(study_dir).resolve()))
    return {"path": path.as_posix(), "sha256": digest(Path(config_path).read_bytes())}


def config_path(trial: FrozenTrial, study: optuna.Study | None) -> Path | None:
    """Where the trial's config file is: in the trial's folder (its ``trial_dir`` attr, absolute), else at the
    pointer's path from the study folder (the ``study_dir`` attr: a study moved with its folder, read from
    where it was run); None when the trial records no file or it is not there."""
    pointer = trial.user_attrs.get(CONFIG_POINTER)
    if not isinstance(pointer, dict) or not isinstance(pointer.get("path"), str):
        return None
    candidates = []
    if trial.user_attrs.get(TRIAL_DIR):
        candidates.append(Path(str(trial.user_attrs[TRIAL_DIR])) / Path(pointer["path"]).name)
    study_dir = study.user_attrs.get("study_dir") if study is not None else None
    if study_dir:
        candidates.append(Path(str(study_dir)) / pointer["path"])
    return next((p for p in candidates if p.is_file()), None)


def recorded_config(trial: FrozenTrial, study: optuna.Study | None = None) -> TrialConfig | None:
    """The config ``trial`` ran with, or None: none recorded, its file gone or unreadable."""
    path = config_path(trial, study)
    if path is not None:
        try:
            data = path.read_bytes()
            config = parse_yaml_text(decode_text(data, str(path), "config"), str(path), "config", fast=True)
        except (OSError, UserError):  # the guard: a config in trial storage is input like any other
            return None
        if not isinstance(config, dict):
            return None
        changed = digest(data) != trial.user_attrs[CONFIG_POINTER].get("sha256")
        return TrialConfig(config, str(path), changed)
    legacy = trial.user_attrs.get(CONFIG_INLINE)
    if isinstance(legacy, dict):
        return TrialConfig(legacy, f"trial {trial.number}'s {CONFIG_INLINE} attr")
    return None


def changed_note(found: TrialConfig, trial: FrozenTrial) -> str:
    """One line saying the config file changed since trial ``trial`` ran (for a warning or a report note)."""
    return f"{found.source} changed since trial {trial.number} ran (its sha256 is not the one recorded)"
