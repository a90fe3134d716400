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

from pathlib import Path

ACTOR_LOAD = "actor_rollout_ref.actor.checkpoint.load_contents"
LR_KEYS = ("actor_config.lr", "actor_config.min_lr", "actor_config.lr_warmup_fraction", "actor_config.lr_decay_style")


def fresh_overrides(save_dir: Path) -> list[str]:
    """A trial's first launch: its own absolute checkpoint folder, never resuming what may lie there."""
    return [f"trainer.default_local_dir={save_dir}", "trainer.resume_mode=disable"]


def resume_overrides(save_dir: Path, checkpoint: Path, explored: list[str] | tuple[str, ...] = ()) -> list[str]:
    """Start from ``checkpoint`` (a ``global_step_N`` folder), saving on into ``save_dir``.

    ``explored`` are the config keys a pbt branch changed from its parent; when one is a learning-rate key
    the optimizer and scheduler state are not loaded (see the module docstring).
    """
    if not checkpoint.name.startswith("global_step_"):
        raise ValueError(f"{checkpoint}: verl resumes only from a global_step_N folder")
    contents = "[model]" if any(key in LR_KEYS for key in explored) else "[model,optimizer,extra]"
    return [
        f"trainer.default_local_dir={save_dir}",
        "trainer.resume_mode=resume_path",
        f"trainer.resume_from_path={checkpoint}",
        f"{ACTOR_LOAD}={contents}",
    ]
