"""Config validation errors as one line per problem, naming the file, the key and the value.

``configs/x.yaml: rl_config.clip_ratio: must be <= 1 (got 1.5)``;
``configs/x.yaml: rl_config.clip_rato: unknown key; did you mean rl_config.clip_ratio?``.
The wording is the project's one (``grpo.errors.validation_lines``); this adds the config's key suggestions.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from grpo.config.keys import suggest_key
from grpo.errors import dotted, validation_lines


def validation_problems(error: ValidationError, source: str, prefix: tuple[Any, ...] = ()) -> list[str]:
    """One line per error of ``error``; ``prefix`` is prepended to locations (a section validated alone)."""
    return validation_lines(error, source, prefix=prefix, suggest=lambda loc: suggest_key(dotted(loc)))
