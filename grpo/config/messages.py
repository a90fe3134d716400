"""Config validation errors as one line per problem, naming the file, the key and the value.

``configs/x.yaml: rl_config.clip_ratio: must be <= 1 (got 1.5)``;
``configs/x.yaml: rl_config.clip_rato: unknown key; did you mean rl_config.clip_ratio?``.
The wording is the project's one (``grpo.errors.validation_lines``); this adds the config's key suggestions.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from grpo.config.keys import suggest_key
from grpo.errors import dotted, validation_lines


def validation_problems(
    error: ValidationError,
    source: str,
    prefix: tuple[Any, ...] = (),
    moved: Mapping[tuple[str, ...], tuple[str, ...]] | None = None,
) -> list[str]:
    """One line per error of ``error``; ``prefix`` is prepended to locations (a section validated alone).

    ``moved`` maps the location a Megatron key was moved to (``canonical.py``) to where the file wrote it,
    so the message names the key as written (``actor_config.num_layers``, not ``model.<name>.num_layers``).
    """

    def relocate(loc: tuple[Any, ...], message: str) -> tuple[tuple[Any, ...], str]:
        for new, old in (moved or {}).items():
            if loc[: len(new)] == new:
                return (*old, *loc[len(new) :]), message
        return loc, message

    return validation_lines(
        error, source, prefix=prefix, suggest=lambda loc: suggest_key(dotted(loc)), relocate=relocate
    )
