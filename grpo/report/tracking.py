"""Where a trial's runs went in SwanLab and W&B, as a fact of its section of the report.

A sweep names each seed's run ``trial-N-seedK`` in both, in the spec's project, grouped by the study
(``grpo.sweep.run.trial_builder.tracking_overrides``). Offline and local runs are folders under the trial's
``runs/seedK`` (SwanLab: ``swanlog/run-*``; W&B: ``wandb/offline-run-*``): the fact names each folder with the
command that uploads or shows it (``swanlab sync``, ``swanlab watch``, ``wandb sync``). Cloud runs have
no address the report can know (SwanLab and W&B give one at ``init``), so the fact names project,
experiments and group, which is how a person finds them there.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

from grpo.report._fmt import escape


def _section(config: dict[str, Any], name: str) -> dict[str, Any]:
    value = config.get(name)
    return value if isinstance(value, dict) else {}


def _folders(trial_dir: Path | None, pattern: str) -> list[Path]:
    if trial_dir is None:
        return []
    try:
        return sorted(p for p in trial_dir.glob(f"runs/seed*/{pattern}") if p.is_dir())
    except OSError:
        return []


def _commands(command: str, folders: list[Path]) -> str:
    return "".join(f"<br><code>{escape(command)} {escape(shlex.quote(str(p)))}</code>" for p in folders)


def tracking_facts(config: dict[str, Any] | None, number: int, trial_dir: Path | None) -> list[tuple[str, str]]:
    """(label, html) facts for the trial's SwanLab and W&B runs, from its recorded ``config``."""
    if not config:
        return []
    rl, engine = _section(config, "rl_config"), _section(config, "engine")
    facts = []
    runs = f"trial-{number}-seed*"
    if rl.get("use_swanlab"):
        mode = str(rl.get("swanlab_mode") or "")
        text = f"project {rl.get('swanlab_project')}, experiments {runs}"
        if engine.get("swanlab_group"):
            text += f", group {engine['swanlab_group']}"
        html = escape(f"{text} ({mode})")
        if not rl.get("swanlab_save_dir"):  # a folder of its own: the run's swanlog/
            if mode == "offline":
                html += _commands("swanlab sync", _folders(trial_dir, "swanlog/run-*"))
            elif mode == "local":
                html += _commands("swanlab watch -l", _folders(trial_dir, "swanlog"))
        facts.append(("SwanLab", html))
    if rl.get("use_wandb"):
        mode = str(engine.get("wandb_mode") or "")
        text = f"project {rl.get('wandb_project')}, runs {runs}"
        if engine.get("wandb_group"):
            text += f", group {engine['wandb_group']}"
        html = escape(f"{text}" + (f" ({mode})" if mode else ""))
        if not rl.get("wandb_save_dir"):
            html += _commands("wandb sync", _folders(trial_dir, "wandb/offline-run-*"))
        facts.append(("W&B", html))
    return facts
