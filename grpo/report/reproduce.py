"""How to rerun the best trial: its exported config, the exact command, and the environment it ran in.

- ``exported_config(trial, base, study)``: the trial's resolved config (the first seed's, as
  ``grpo.report.trial_config`` reads it back: its folder's ``config.yaml``, or an older study's attr)
  without what belongs to that trial's run, which a new run chooses itself: its checkpoint folder
  (``actor_config.save``), a checkpoint of the trial itself in ``actor_config.load`` (a retry's resume),
  its tracking (W&B run name, group, project, folder, mode; TensorBoard), how many checkpoints it kept,
  a pbt segment's stop at the end of its generation (``engine.exit_interval``) (``RUN_KEYS``), and the
  generated task's data file the sweep placed beside the driver (``megatron_training.data_path`` unless
  ``engine.task`` is ``dataset``): each goes back to the base config's value (dropped, so the schema
  default applies, when the base has none). Inputs stay as the trial ran them (absolute: the file runs
  from any directory). A pbt segment's ``actor_config.load`` is its parent's checkpoint: restored like a
  retry's, while its ``schedule:`` (the values its lineage ran with from iteration 0) stays, so the file
  replays the whole lineage from scratch. ``config_yaml`` is it as the grpo_trainer YAML the report
  writes as ``best_config.yaml``, the same file ``grpo-sweep best --export`` writes; its header names
  the one command that runs it (``run_line``).
- ``commands(study, trial, config_path)``: the command lines. Embedded backend:
  ``grpo-train --config-dir <abs dir> --config-name best_config`` (one line per seed beyond the first,
  with its ``megatron_training.seed``). MindSpeed backend: the launch the trial's first seed logged as
  the first line of its ``train.log`` (``# grpo-sweep: <cmd> (cwd <checkout>, ...)``), else the launch
  rebuilt from the spec's ``mindspeed`` settings and the trial's rendered ``mindspeed_config``.
- ``recorded_environment(study)``: the study's ``environment`` attr (python, platform, commit, package versions),
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

from grpo._fs import RESUME_KEYS
from grpo.report.collect import trial_dir
from grpo.report.trial_config import changed_note, recorded_config
from grpo.trial_attrs import BRANCH_OF, SCHEDULE, SEEDS

CONFIG_NAME = "best_config"
SEED_KEY = "megatron_training.seed"
MINDSPEED_CONFIG_DIR, MINDSPEED_CONFIG_NAME = "mindspeed_config", "grpo_trainer"
_LAUNCH_LINE = re.compile(r"^# grpo-sweep: (?P<cmd>.+?) \(cwd (?P<cwd>.+?)(?:, from iteration \d+)?\)\s*$")


@dataclass(frozen=True)
class Reproduction:
    backend: str
    lines: list[str]  # shell lines, run in order
    note: str  # what the lines do and where they come from


# What the sweep sets per trial seed for the trial's own run (its checkpoint folder, its tracking: W&B run
# name, group, folder and mode, TensorBoard, SwanLab; old checkpoints kept): a new run gets the base config's.
RUN_KEYS = (
    "actor_config.save",
    "engine.keep_checkpoints",
    "rl_config.use_wandb",
    "rl_config.wandb_project",
    "rl_config.wandb_exp_name",
    "rl_config.wandb_save_dir",
    "rl_config.use_tensorboard",
    "engine.wandb_group",
    "engine.wandb_mode",
    "rl_config.use_swanlab",  # SwanLab: as W&B
    "rl_config.swanlab_project",
    "rl_config.swanlab_exp_name",
    "rl_config.swanlab_mode",
    "rl_config.swanlab_save_dir",
    "engine.swanlab_group",
    "engine.trial_params",  # the searched values a tracked run logs as its TensorBoard HParams
    "engine.exit_interval",  # a pbt segment stops at the end of its generation; a replay runs to train_iters
)


def _get(config: dict[str, Any] | None, dotted: str) -> Any:
    node: Any = config or {}
    for part in dotted.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return node


def _restore(body: dict[str, Any], base: dict[str, Any] | None, dotted: str) -> None:
    """``body[dotted]`` set back to the base config's value where it differs; removed when the base has none."""
    if _get(body, dotted) == _get(base, dotted):
        return
    *parents, leaf = dotted.split(".")
    node = body
    for part in parents:
        node = node.get(part)  # type: ignore[assignment]
        if not isinstance(node, dict):
            return
    value = _get(base, dotted)
    if value is None or value == "":
        node.pop(leaf, None)
    else:
        node[leaf] = copy.deepcopy(value)


def _same_place(value: Any, base_value: Any) -> bool:
    """The trial's path is the base config's, possibly made absolute by the sweep (relative to its cwd)."""
    if value == base_value:
        return True
    if not (isinstance(value, str) and isinstance(base_value, str) and value and base_value):
        return False
    mine, theirs = Path(value), Path(base_value)
    tail = [p for p in theirs.parts if p not in (".", "")]
    return mine.is_absolute() and not theirs.is_absolute() and bool(tail) and list(mine.parts[-len(tail) :]) == tail


def exported_config(
    trial: FrozenTrial, base: dict[str, Any] | None, study: optuna.Study | None = None
) -> dict[str, Any] | None:
    found = recorded_config(trial, study)
    if found is None:
        return None
    body = copy.deepcopy(found.config)
    for key in RUN_KEYS:
        _restore(body, base, key)
    if not _same_place(_get(body, "actor_config.load"), _get(base, "actor_config.load")):
        # a checkpoint of this trial (a retry resumed from it): the starting weights, loaded as at the start
        for key in ("actor_config.load", *RESUME_KEYS):
            _restore(body, base, key)
    if _get(body, "engine.task") != "dataset":  # a generated task's data file is written, not read
        _restore(body, base, "megatron_training.data_path")
    return body


def _lora(body: dict[str, Any]) -> bool:
    """The config trains LoRA (``lora_target_modules`` in any Megatron section): grpo-train needs peft."""
    models = body.get("model") if isinstance(body.get("model"), dict) else {}
    sections = [body.get("megatron_training"), body.get("actor_config"), *(models or {}).values()]
    return any(isinstance(s, dict) and s.get("lora_target_modules") for s in sections)


def run_line(config_path: Path) -> str:
    """The one command that runs an exported config file, from any directory."""
    path = Path(config_path).resolve()
    return f"grpo-train --config-dir {shlex.quote(str(path.parent))} --config-name {shlex.quote(path.stem)}"


def config_yaml(
    study: optuna.Study, trial: FrozenTrial, base: dict[str, Any] | None, path: Path | None = None
) -> str | None:
    """The exported config as YAML with a header (trial, params, seeds; the command that runs ``path``)."""
    body = exported_config(trial, base, study)
    if body is None:
        return None
    seeds = trial.user_attrs.get(SEEDS)
    found = recorded_config(trial, study)
    header = (
        f"# trial {trial.number} of study {study.study_name}: the best trial of its report\n"
        + (f"# warning: {changed_note(found, trial)}\n" if found is not None and found.changed else "")
        + f"# params: {json.dumps(trial.params, default=str)}\n"
        + (
            "# a pbt lineage, replayed from iteration 0: its schedule: key sets each value from the iteration the "
            "lineage changed it\n"
            if body.get("schedule") or trial.user_attrs.get(SCHEDULE) or trial.user_attrs.get(BRANCH_OF) is not None
            else ""
        )
        + (f"# seeds it ran ({SEED_KEY}): {', '.join(map(str, seeds))}\n" if isinstance(seeds, list) else "")
        + (f"# run it: {run_line(path)}\n" if path is not None else "")
        + ("# it trains LoRA through peft: pip install 'grpo-sweep[lora]'\n" if _lora(body) else "")
    )
    return header + yaml.safe_dump(body, sort_keys=False)


def commands(study: optuna.Study, trial: FrozenTrial, config_path: Path) -> Reproduction:
    spec = study.user_attrs.get("spec") if isinstance(study.user_attrs.get("spec"), dict) else {}
    backend = str(study.user_attrs.get("backend") or (spec or {}).get("backend") or "embedded")
    if backend == "mindspeed":
        return _mindspeed(study, trial, spec or {})
    seeds = [s for s in (trial.user_attrs.get(SEEDS) or []) if isinstance(s, int)]
    line = run_line(config_path)
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


def recorded_environment(study: optuna.Study) -> dict[str, Any] | None:
    value = study.user_attrs.get("environment")
    return value if isinstance(value, dict) else None
