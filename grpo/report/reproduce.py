"""How to rerun the best trial: its exported config, the exact command, and the environment it ran in.

- ``exported_config(trial, base)``: the trial's resolved config (its ``config`` attr, the first seed's)
  without the per-trial paths a new run must choose itself: ``actor_config.save``, and
  ``actor_config.load`` where the sweep pointed it at a checkpoint of this trial (it differs from the
  base config's). ``config_yaml`` is it as the grpo_trainer YAML the report writes as
  ``best_config.yaml``, the same file ``grpo-sweep best --export`` writes.
- ``commands(study, trial, config_path)``: the command lines. Embedded backend:
  ``grpo-train --config-path <abs dir> --config-name best_config`` (one line per seed beyond the first,
  with its ``megatron_training.seed``). MindSpeed backend: the launch the trial's first seed logged as
  the first line of its ``train.log`` (``# grpo-sweep: <cmd> (cwd <checkout>, ...)``), else the launch
  rebuilt from the spec's ``mindspeed`` settings and the trial's rendered ``mindspeed_config``.
- ``environment(study)``: the study's ``environment`` attr (python, platform, commit, package versions),
  recorded by the sweep when it created the study; None for an older study.
"""

from __future__ import annotations

import copy
import json
import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna
import yaml
from optuna.trial import FrozenTrial

from grpo.report.collect import trial_dir

CONFIG_NAME = "best_config"
SEED_KEY = "megatron_training.seed"
MINDSPEED_CONFIG_DIR, MINDSPEED_CONFIG_NAME = "mindspeed_config", "grpo_trainer"
_LAUNCH_LINE = re.compile(r"^# grpo-sweep: (?P<cmd>.+?) \(cwd (?P<cwd>.+?)(?:, from iteration \d+)?\)\s*$")


@dataclass(frozen=True)
class Reproduction:
    backend: str
    lines: list[str]  # shell lines, run in order
    note: str  # what the lines do and where they come from


def exported_config(trial: FrozenTrial, base: dict[str, Any] | None) -> dict[str, Any] | None:
    config = trial.user_attrs.get("config")
    if not isinstance(config, dict):
        return None
    body = copy.deepcopy(config)
    actor = body.get("actor_config")
    if isinstance(actor, dict):
        actor.pop("save", None)  # the trial's own checkpoint folder
        base_actor = (base or {}).get("actor_config") or {}
        if "load" in actor and actor.get("load") != base_actor.get("load"):
            actor.pop("load")  # a checkpoint of this trial (a retry resumed from it), not the starting weights
    return body


def config_yaml(study: optuna.Study, trial: FrozenTrial, base: dict[str, Any] | None) -> str | None:
    body = exported_config(trial, base)
    if body is None:
        return None
    seeds = trial.user_attrs.get("seeds")
    header = (
        f"# trial {trial.number} of study {study.study_name}: the best trial of its report\n"
        f"# params: {json.dumps(trial.params, default=str)}\n"
        + (f"# seeds it ran ({SEED_KEY}): {', '.join(map(str, seeds))}\n" if isinstance(seeds, list) else "")
    )
    return header + yaml.safe_dump(body, sort_keys=False)


def commands(study: optuna.Study, trial: FrozenTrial, config_path: Path) -> Reproduction:
    spec = study.user_attrs.get("spec") if isinstance(study.user_attrs.get("spec"), dict) else {}
    backend = str(study.user_attrs.get("backend") or (spec or {}).get("backend") or "embedded")
    if backend == "mindspeed":
        return _mindspeed(study, trial, spec or {})
    seeds = [s for s in (trial.user_attrs.get("seeds") or []) if isinstance(s, int)]
    config_dir = Path(config_path).resolve().parent
    line = f"grpo-train --config-path {shlex.quote(str(config_dir))} --config-name {CONFIG_NAME}"
    lines = [line] + [f"{line} {SEED_KEY}={s}" for s in seeds[1:]]
    note = f"Reruns trial {trial.number} with the embedded engine from {config_path.name} beside this report" + (
        f"; one line per seed it ran ({', '.join(map(str, seeds))}), the first is the file's own seed."
        if len(seeds) > 1
        else "."
    )
    if backend != "embedded":
        note += f" The study ran backend {backend}; the command above is the embedded engine's."
    return Reproduction(backend, lines, note)


def _mindspeed(study: optuna.Study, trial: FrozenTrial, spec: dict[str, Any]) -> Reproduction:
    directory = trial_dir(trial, study)
    run = _first_run(directory) if directory is not None else None
    if run is not None:
        log = run / "train.log"
        if log.is_file():
            with open(log, encoding="utf-8", errors="replace") as fh:
                match = _LAUNCH_LINE.match(fh.readline())
            if match:
                return Reproduction(
                    "mindspeed",
                    [f"cd {shlex.quote(match.group('cwd'))}", match.group("cmd")],
                    f"The MindSpeed-RL launch of trial {trial.number}'s first seed, as its train.log recorded it "
                    "(the rendered config folder is in the trial dir).",
                )
    settings = spec.get("mindspeed") if isinstance(spec.get("mindspeed"), dict) else {}
    settings = settings or {}
    config_dir = (run or directory or Path(".")) / MINDSPEED_CONFIG_DIR
    checkout = str(settings.get("path") or "<MindSpeed-RL checkout>")
    python = str(settings.get("python") or "python")
    entry = str(settings.get("entry") or "cli/train_grpo.py")
    cmd = " ".join(
        shlex.quote(p)
        for p in (python, entry, "--config-path", str(config_dir), "--config-name", MINDSPEED_CONFIG_NAME)
    )
    return Reproduction(
        "mindspeed",
        [f"cd {shlex.quote(checkout)}", cmd],
        f"MindSpeed-RL's entry point on trial {trial.number}'s rendered config (rebuilt from the spec's "
        "mindspeed settings: the trial's train.log recorded no launch line).",
    )


def _first_run(directory: Path) -> Path:
    """The first seed's run dir (each seed runs in ``runs/seed<k>``); the trial dir itself for an older layout."""
    for candidate in (directory / "runs" / "seed0", directory / "seed0"):
        if candidate.is_dir():
            return candidate
    return directory


def environment(study: optuna.Study) -> dict[str, Any] | None:
    value = study.user_attrs.get("environment")
    return value if isinstance(value, dict) else None
