"""Turn pydantic validation errors into one line per problem, naming the file, the key and the value.

``configs/x.yaml: rl_config.clip_ratio: must be <= 1 (got 1.5)``;
``configs/x.yaml: rl_config.clip_rato: unknown key; did you mean rl_config.clip_ratio?``.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from grpo.config.keys import suggest_key


def _dotted(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out or "(top level)"


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


_TYPE_WORDS = {
    "int": "an integer",
    "float": "a number",
    "bool": "true or false",
    "string": "a string",
    "dict": "a mapping",
    "list": "a list",
    "model": "a mapping",
}


def _describe(err: dict[str, Any]) -> str:
    kind, ctx, value = err["type"], err.get("ctx") or {}, err.get("input")
    if kind == "extra_forbidden":
        return "unknown key"
    if kind == "missing":
        return "missing required key"
    bounds = {
        "greater_than": ">", "greater_than_equal": ">=", "less_than": "<", "less_than_equal": "<=",
    }
    if kind in bounds:
        limit = next(iter(v for k, v in ctx.items() if k in ("gt", "ge", "lt", "le")))
        shown = f"{limit:g}" if isinstance(limit, float) else limit
        return f"must be {bounds[kind]} {shown} (got {_short(value)})"
    if kind == "literal_error":
        return f"must be one of {ctx.get('expected', '')} (got {_short(value)})"
    for word, text in _TYPE_WORDS.items():
        if kind.startswith(word) and ("parsing" in kind or "type" in kind or kind.endswith("_from_float")):
            return f"must be {text} (got {_short(value)})"
    if kind == "value_error":
        return str(ctx.get("error", err["msg"]))
    return f"{err['msg']} (got {_short(value)})"


def _drop_union_branch(loc: tuple[Any, ...]) -> tuple[Any, ...]:
    """pydantic names union branches in locations (``int``, ``literal['full','selective']``); drop them."""
    return tuple(p for p in loc if not (isinstance(p, str) and (p in {"int", "float", "str", "bool", "none"}
                                                                  or p.startswith(("literal[", "constrained-")))))


def validation_problems(error: ValidationError, source: str, prefix: tuple[Any, ...] = ()) -> list[str]:
    """One line per error of ``error``; ``prefix`` is prepended to locations (a section validated alone)."""
    lines: list[str] = []
    for err in error.errors():
        loc = _drop_union_branch(prefix + tuple(err["loc"]))
        if err["type"] in ("none_required",):
            continue  # the other union branch already explained the problem
        key = _dotted(loc)
        message = _describe(err)
        if err["type"] == "extra_forbidden":
            hint = suggest_key(key)
            if hint and hint != key:
                message += f"; did you mean {hint}?"
        elif err["type"] == "value_error" and message.startswith(key.split("[")[0]):
            lines.append(f"{source}: {message}")
            continue
        line = f"{source}: {key}: {message}"
        if line not in lines:
            lines.append(line)
    return lines
