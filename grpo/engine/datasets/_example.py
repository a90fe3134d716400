"""``Example``: one prompt of a dataset as every backend sees it (imports nothing heavy)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Example:
    """A prompt and its label; ``messages`` is a conversational prompt as read (chat messages, else None) and
    ``extra`` every other column of the record (``data_source``, ``extra_info``, a TRL dataset's columns), which
    user reward functions receive. ``prompt`` is the text of the last user message for a conversational one."""

    prompt: str
    label: str
    messages: tuple[dict[str, Any], ...] | None = None
    extra: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)
