"""Text helpers every section of the report page shares: numbers, durations, links, escaping.

Every string that came from a user or a log goes through ``escape`` (``html.escape``, quote=True: safe
in text and in attribute values) before it is put into the page.
"""

from __future__ import annotations

import json
import math
from html import escape
from typing import Any

__all__ = ["cell", "count", "duration_text", "escape", "fmt", "hours", "num", "plural", "trial_link"]


def num(value: Any, digits: int = 4) -> str:
    """A number with ``digits`` significant digits; '' for None and NaN; anything else as str."""
    if value is None or isinstance(value, bool) or not isinstance(value, (int, float)):
        return "" if value is None else str(value)
    if isinstance(value, float) and math.isnan(value):
        return ""
    return f"{value:.{digits}g}"


def fmt(value: Any) -> str:
    """A config or parameter value as one line (floats with 4 significant digits, dicts/lists as JSON)."""
    if isinstance(value, float):
        return num(value)
    if isinstance(value, (dict, list)):
        return json.dumps(value, default=str)
    return str(value)


def cell(value: Any) -> str:
    """A table cell's text: '' for None and NaN."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, float):
        return num(value)
    return str(value)


def duration_text(seconds: Any) -> str:
    """``3.2 s``, ``42.0 s``, ``5m 03s``, ``2h 07m``; '' when unknown."""
    if seconds is None or (isinstance(seconds, float) and not math.isfinite(seconds)):
        return ""
    seconds = float(seconds)
    if seconds < 10:
        return f"{seconds:.3g} s"
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(round(seconds), 60)
    hours_, minutes = divmod(minutes, 60)
    return f"{hours_}h {minutes:02d}m" if hours_ else f"{minutes}m {secs:02d}s"


def hours(seconds: float) -> str:
    """Device-seconds as hours: 3 significant digits (``0.0125 h``, ``42.5 h``), whole hours from 1000."""
    h = seconds / 3600
    return f"{h:,.0f} h" if h >= 1000 else f"{h:.3g} h"


def count(value: float) -> str:
    """A large quantity (seconds, tokens) without an exponent: ``4,184,000``; small ones with 4 digits."""
    return f"{value:,.0f}" if abs(value) >= 1000 else num(value)


def plural(n: int, word: str, many: str | None = None) -> str:
    return f"{n} {word if n == 1 else (many or word + 's')}"


def trial_link(number: int, detail: set[int] | None = None) -> str:
    """``#n``, linked to the trial's detail section when it has one (``detail`` None: always linked)."""
    if detail is None or number in detail:
        return f'<a href="#trial-{number}">#{number}</a>'
    return f"#{number}"
