"""The base of every sweep-spec model (grpo/sweep/spec/models.py re-exports the sections built on it)."""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationInfo, field_validator

CONTROL = re.compile(r"[\x00-\x1f\x7f]")


class _Strict(BaseModel):
    """Unknown keys are errors everywhere in the spec; ``true``/``false`` are no numbers; numbers are finite."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    @field_validator("*", mode="before")
    @classmethod
    def _no_bool_numbers(cls, value: Any, info: ValidationInfo) -> Any:
        # pydantic reads `trials: true` as 1; YAML's true/yes/on are never meant as a count.
        if isinstance(value, bool) and info.field_name is not None:
            annotation = cls.model_fields[info.field_name].annotation
            kinds = set(getattr(annotation, "__args__", ())) | {annotation}
            if bool not in kinds and kinds & {int, float}:
                word = "an integer" if int in kinds else "a number"
                raise ValueError(f"must be {word} (got {str(value).lower()})")
        return value
