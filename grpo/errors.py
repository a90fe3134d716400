"""The one exception type for mistakes a user can make (bad spec, bad config, missing file), and the
helpers that word those mistakes the same way everywhere.

The CLI turns a UserError into one line on stderr and exit code 2, never a traceback.
Everything else is a bug and keeps its traceback.

``validation_lines`` turns a pydantic ``ValidationError`` (from the config schema or the sweep spec)
into one line per problem, ``<source>: <dotted key>: <what is wrong>``; ``did_you_mean`` is the one
near-miss lookup behind every "did you mean ...?".
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError


class UserError(Exception):
    """A problem the user can fix. ``str(err)`` is the whole message: it names the file and the key.

    ``problems`` holds one line per problem when several were found at once (validate reports them all).
    """

    def __init__(self, message: str, problems: list[str] | None = None):
        self.problems = list(problems) if problems else [message]
        super().__init__(message)


class StudyStopped(Exception):
    """The driver stopped a study it cannot go on with (an I/O error such as a full disk): one line, exit
    code 1. Nothing is lost: the running trials were stopped as by Ctrl-C and resume on the next run."""


def did_you_mean(word: str, options: Iterable[str], cutoff: float = 0.6) -> str | None:
    """The option closest to ``word`` (difflib ratio >= ``cutoff``), or None."""
    match = difflib.get_close_matches(word, list(options), n=1, cutoff=cutoff)
    return match[0] if match else None


def dotted(loc: Sequence[Any]) -> str:
    """A pydantic location as a key: ``("rl_config", "verifier_function", 1)`` -> ``rl_config.verifier_function[1]``."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


def first_line(err: BaseException | str, limit: int | None = None, *, typed: bool = False) -> str:
    """An error (or a message) as one line: its first non-blank line, cut to ``limit`` characters; ``typed``
    puts the exception's class name in front. An empty message gives the class name (never an IndexError)."""
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    name = type(err).__name__ if isinstance(err, BaseException) else ""
    text = lines[0][:limit] if lines else ""
    if not text:
        return name
    return f"{name}: {text}" if typed and name else text


def display_path(path: Path) -> str:
    """A path as the user would type it (and as messages show it): relative to the working directory when
    inside it."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def shorten(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


_TYPE_WORDS = {
    "int": "an integer",
    "float": "a number",
    "bool": "true or false",
    "string": "a string",
    "dict": "a mapping",
    "list": "a list",
    "model": "a mapping",
}
_BOUNDS = {"greater_than": ">", "greater_than_equal": ">=", "less_than": "<", "less_than_equal": "<="}
# pydantic names union branches in locations (``int``, ``literal['full','selective']``): not keys.
_UNION_BRANCHES = {"int", "float", "str", "bool", "none"}


def describe_error(err: Any, *, plain_values: bool = False) -> str:
    """What one pydantic error says, in the project's words.

    Values are shown as Python literals (``'kl'``, as a config's YAML value reads back), or as written
    with ``plain_values`` (a sweep spec, where ``choice`` names are bare words).
    """
    kind, ctx, value = err["type"], err.get("ctx") or {}, err.get("input")

    def shown(v: Any) -> str:
        return shorten(v if plain_values and isinstance(v, str) else repr(v))

    if kind == "extra_forbidden":
        return "unknown key"
    if kind == "missing":
        return "missing required key"
    if kind == "literal_error":
        allowed = str(ctx.get("expected", ""))
        if plain_values:
            allowed = allowed.replace("'", "").replace(" or ", ", ")
        return f"must be one of {allowed} (got {shown(value)})"
    if kind in _BOUNDS:
        limit = next(v for k, v in ctx.items() if k in ("gt", "ge", "lt", "le"))
        limit = int(limit) if isinstance(limit, float) and limit.is_integer() else limit
        return f"must be {_BOUNDS[kind]} {limit} (got {shown(value)})"
    if kind in ("too_short", "string_too_short"):
        return "must not be empty"
    if kind == "finite_number":
        return f"must be a finite number (got {shown(value)})"
    for word, text in _TYPE_WORDS.items():
        if kind.startswith(word) and any(part in kind for part in ("type", "parsing", "fraction", "_from_float")):
            return f"must be {text} (got {shown(value)})"
    if kind == "value_error":
        return str(ctx.get("error", err["msg"]))
    return f"{err['msg']} (got {shown(value)})"


Suggest = Callable[[tuple[Any, ...]], "str | None"]
Relocate = Callable[[tuple[Any, ...], str], "tuple[tuple[Any, ...], str]"]


def validation_lines(
    error: ValidationError,
    source: str,
    *,
    prefix: tuple[Any, ...] = (),
    suggest: Suggest | None = None,
    plain_values: bool = False,
    relocate: Relocate | None = None,
) -> list[str]:
    """One line per problem of ``error``: ``<source>: <key>: <what is wrong>`` (duplicates dropped).

    ``prefix`` is prepended to every location (a section validated alone); ``suggest(loc)`` names the
    nearest valid key for an unknown one (the line then ends ``; did you mean <key>?``);
    ``relocate(loc, message)`` may move a validator's message to the key it is about. A value error
    whose message already starts with its key is shown as it is.
    """
    lines: list[str] = []
    for err in error.errors():
        if err["type"] == "none_required":
            continue  # the other union branch already explained the problem
        loc = tuple(
            p
            for p in prefix + tuple(err["loc"])
            if not (isinstance(p, str) and (p in _UNION_BRANCHES or p.startswith(("literal[", "constrained-"))))
        )
        message = describe_error(err, plain_values=plain_values)
        if relocate is not None:
            loc, message = relocate(loc, message)
        key = dotted(loc)
        if err["type"] == "extra_forbidden" and suggest is not None:
            hint = suggest(loc)
            if hint and hint != key:
                message += f"; did you mean {hint}?"
        line = (
            f"{source}: {message}"
            if err["type"] == "value_error" and message.startswith(key.split("[")[0])
            else f"{source}: {key}: {message}"
        )
        if line not in lines:
            lines.append(line)
    return lines


USER_CODE_FAILED = "user code failed"


class UserCodeError(Exception):
    """A user's own code (a reward function) raised, or returned what is not a score, inside a trial. The trial
    fails with this one line and is not retried: the same code on the same data fails again
    (``is_user_code_failure`` finds the line in a failure's reason or log)."""

    def __init__(self, message: str):
        super().__init__(f"{USER_CODE_FAILED}: {message}")


def is_user_code_failure(reason: str, log_lines: Iterable[str] = ()) -> bool:
    """The failure came from a user's own code (``UserCodeError``): retrying would fail the same way."""
    marker = f"{USER_CODE_FAILED}: "
    return marker in reason or any(marker in line for line in log_lines)


CONFIG_FAILED = "bad trial config"  # how backends word a UserError met inside a trial (a file, a shape)
# Raw exception lines that are the config's fault, not the machine's: weights that do not fit the model built from
# the config (torch's load_state_dict and broadcasting wordings), a file that is not there.
_CONFIG_SIGNS = (f"{CONFIG_FAILED}: ", "size mismatch for ", "The size of tensor a ", "FileNotFoundError: ")


def is_config_failure(reason: str, log_lines: Iterable[str] = ()) -> bool:
    """The failure is the trial's config (a missing file, a shape mismatch): a retry would fail the same way."""
    return any(sign in text for text in (reason, *log_lines) for sign in _CONFIG_SIGNS)
