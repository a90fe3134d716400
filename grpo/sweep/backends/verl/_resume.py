"""How a verl trial starts: fresh, resumed from its own last ``global_step_N``, or branched from a parent's.

verl resumes with ``trainer.resume_mode=resume_path`` and ``trainer.resume_from_path=<dir>/global_step_N``
(the step is parsed from the folder name). What it loads is ``actor.checkpoint.load_contents``, by default
``[model, optimizer, extra]``; ``extra`` restores the LR scheduler (and RNG). A retry of the same trial
keeps all of it: it continues the same run. A pbt branch whose explore step changed the learning rate
loads ``[model]`` only, so the restored optimizer and scheduler cannot put the parent's lr back silently:
the branch starts a fresh AdamW state (its moments reset) at the explored lr. A branch that explored
nothing lr-related keeps the parent's optimizer and scheduler, as a retry does.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

OPTIM_FILE = "grpo_sweep_optim.json"  # beside latest_checkpointed_iteration.txt: the lr settings the run trained with
ACTOR_LOAD = "actor_rollout_ref.actor.checkpoint.load_contents"
LR_KEYS = ("actor_config.lr", "actor_config.min_lr", "actor_config.lr_warmup_fraction", "actor_config.lr_decay_style")


def fresh_overrides(save_dir: Path) -> list[str]:
    """A trial's first launch: its own absolute checkpoint folder, never resuming what may lie there."""
    return [f"trainer.default_local_dir={save_dir}", "trainer.resume_mode=disable"]


def lr_settings(actor: Any) -> dict[str, Any]:
    """The learning-rate settings of a run (``actor_config``), as written to ``OPTIM_FILE``."""
    return {key: getattr(actor, key.split(".", 1)[1]) for key in LR_KEYS}


def write_lr_settings(save_dir: Path, actor: Any) -> None:
    save_dir.mkdir(parents=True, exist_ok=True)
    (save_dir / OPTIM_FILE).write_text(json.dumps(lr_settings(actor), sort_keys=True))


def explored_lr_keys(load_dir: Path, actor: Any) -> list[str]:
    """The lr keys this run sets otherwise than the run that saved ``load_dir`` (all of them when unknown)."""
    try:
        saved = json.loads((load_dir / OPTIM_FILE).read_text())
    except (OSError, ValueError):
        return list(LR_KEYS)
    mine = lr_settings(actor)
    return [key for key in LR_KEYS if saved.get(key) != mine[key]]


def resume_overrides(
    save_dir: Path,
    checkpoint: Path,
    explored: list[str] | tuple[str, ...] = (),
    *,
    load_optimizer: bool = True,
    load_extra: bool = True,
) -> list[str]:
    """Start from ``checkpoint`` (a ``global_step_N`` folder), saving on into ``save_dir``.

    ``explored`` are the config keys a pbt branch changed from its parent; when one is a learning-rate key
    the optimizer and scheduler state are not loaded (see the module docstring). ``load_optimizer`` /
    ``load_extra`` false (``no_load_optim`` / ``no_load_rng``) leave them out too.
    """
    if not checkpoint.name.startswith("global_step_"):
        raise ValueError(f"{checkpoint}: verl resumes only from a global_step_N folder")
    keep = not any(key in LR_KEYS for key in explored)
    parts = ["model"] + ["optimizer"] * (keep and load_optimizer) + ["extra"] * (keep and load_extra)
    contents = f"[{','.join(parts)}]"
    return [
        f"trainer.default_local_dir={save_dir}",
        "trainer.resume_mode=resume_path",
        f"trainer.resume_from_path={checkpoint}",
        f"{ACTOR_LOAD}={contents}",
    ]
