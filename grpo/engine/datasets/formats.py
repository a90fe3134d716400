"""The record formats people's datasets come in, each read into an ``Example`` with the right label.

- ``mindspeed``: ``{"prompt" (or "problem", "question"): str, "label" (or "labels", "answer"): ...}``.
- ``gsm8k``: ``{"question", "answer"}`` with the solution ending ``#### N``: the label is N (commas dropped,
  as verl's ``examples/data_preprocess/gsm8k.py`` does), never the whole solution.
- ``math``: ``{"problem", "solution"}`` (hendrycks MATH): the label is the last ``\\boxed{..}`` of the solution.
- ``verl``: verl's parquet rows, ``prompt`` as chat messages, ``reward_model.ground_truth``, ``data_source``,
  ``extra_info``.
- ``trl``: TRL's standard (``prompt`` text) or ``trl-conversational`` (``prompt`` as chat messages) records; the
  label is the first of ``solution``, ``answer``, ``ground_truth`` present, else empty (user rewards read their
  own columns; ``grpo.engine.check`` refuses built-in verifiers on unlabelled rows).
- ``fields``: ``engine.data_fields`` maps ``prompt`` and ``label`` to column names (dotted for nested ones).

Every column but the prompt is kept in ``Example.extra``: TRL passes a dataset's columns to reward functions by
name, verl passes ``data_source`` and ``extra_info``. A record whose label cannot be read is one ``UserError``
line naming the file and the record: a label is never the raw text by default.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from grpo.engine.datasets._example import Example
from grpo.errors import UserError

FORMATS = ("mindspeed", "gsm8k", "math", "verl", "trl", "trl-conversational", "fields")
PROMPT_KEYS = ("prompt", "problem", "question")
LABEL_KEYS = ("label", "labels", "answer")
TRL_LABEL_KEYS = ("solution", "answer", "ground_truth", "label")
_GSM8K = re.compile(r"####\s*(-?[0-9.,]+)")


class BadRecord(ValueError):
    """Why one record cannot be read (the caller adds the file and the record)."""


def _is_messages(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(m, dict) and "role" in m for m in value)


def detect_format(record: Mapping[str, Any]) -> str:
    """The format of a record (the first record of a file decides for the file)."""
    prompt = record.get("prompt")
    if _is_messages(prompt):
        return "verl" if isinstance(record.get("reward_model"), dict) else "trl-conversational"
    if isinstance(prompt, str):
        return "mindspeed" if any(k in record for k in ("label", "labels")) else "trl"
    if "problem" in record and "solution" in record and "answer" not in record and "label" not in record:
        return "math"
    if "question" in record and isinstance(record.get("answer"), str) and "####" in record["answer"]:
        return "gsm8k"
    return "mindspeed"


def _text(value: Any, what: str) -> str:
    if isinstance(value, list):  # MindSpeed's labels may be a one-element list; verl's ground truth a list
        value = value[0] if value else None
    if value is None or isinstance(value, (dict, list)):
        raise BadRecord(f"{what} is {value!r}, not text")
    return str(value)


def _field(record: Mapping[str, Any], path: str) -> Any:
    value: Any = record
    for part in path.split("."):
        if not isinstance(value, Mapping) or part not in value:
            raise BadRecord(f"record has no {path!r} field")
        value = value[part]
    return value


def _first(record: Mapping[str, Any], keys: tuple[str, ...], what: str) -> tuple[str, str]:
    for k in keys:
        if record.get(k) is not None:
            return k, _text(record[k], f"{k!r}")
    raise BadRecord(f"record has no {what} field (expected one of {', '.join(keys)})")


def _messages(value: Any) -> tuple[tuple[dict[str, Any], ...], str]:
    """Chat messages as read, and the text of the last user message (the prompt's text)."""
    messages = tuple(dict(m) for m in value)
    users = [m for m in messages if m.get("role") == "user"]
    if not users:
        raise BadRecord("prompt messages have no user message")
    content = users[-1].get("content")
    if not isinstance(content, str):
        raise BadRecord("the last user message's content is not text (multimodal prompts are not read)")
    return messages, content


def last_boxed(text: str) -> str | None:
    """The content of the last ``\\boxed{..}`` (``\\fbox{..}``) with balanced braces, None when there is none."""
    start = max(text.rfind("\\boxed{"), text.rfind("\\fbox{"))
    if start < 0:
        return None
    depth, begin = 0, text.index("{", start)
    for i in range(begin, len(text)):
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        if depth == 0:
            return text[begin + 1 : i].strip()
    return None


def gsm8k_label(answer: str) -> str:
    found = _GSM8K.findall(answer)
    if not found:
        raise BadRecord("GSM8K answer has no '#### N' final answer")
    return found[-1].replace(",", "").rstrip(".")


def _rest(record: Mapping[str, Any], prompt_key: str) -> dict[str, Any]:
    return {k: v for k, v in record.items() if k != prompt_key}


def _mindspeed(record: Mapping[str, Any]) -> Example:
    key, prompt = _first(record, PROMPT_KEYS, "prompt")
    _, label = _first(record, LABEL_KEYS, "label")
    return Example(prompt, label, None, _rest(record, key))


def _gsm8k(record: Mapping[str, Any]) -> Example:
    question = _text(record.get("question"), "'question'")
    return Example(question, gsm8k_label(_text(record.get("answer"), "'answer'")), None, _rest(record, "question"))


def _math(record: Mapping[str, Any]) -> Example:
    label = last_boxed(_text(record.get("solution"), "'solution'"))
    if label is None:
        raise BadRecord("MATH solution has no \\boxed{...} answer")
    return Example(_text(record.get("problem"), "'problem'"), label, None, _rest(record, "problem"))


def _verl(record: Mapping[str, Any]) -> Example:
    messages, text = _messages(record["prompt"])
    truth = record["reward_model"].get("ground_truth")
    return Example(text, _text(truth, "'reward_model.ground_truth'"), messages, _rest(record, "prompt"))


def _trl(record: Mapping[str, Any]) -> Example:
    prompt = record.get("prompt")
    messages, text = _messages(prompt) if _is_messages(prompt) else (None, _text(prompt, "'prompt'"))
    label = next((_text(record[k], repr(k)) for k in TRL_LABEL_KEYS if record.get(k) is not None), "")
    return Example(text, label, messages, _rest(record, "prompt"))


def fields_reader(fields: Mapping[str, str]) -> Callable[[Mapping[str, Any]], Example]:
    """A reader for ``engine.data_fields``: ``prompt`` (text or chat messages) and ``label`` columns."""

    def read(record: Mapping[str, Any]) -> Example:
        prompt = _field(record, fields["prompt"])
        messages, text = _messages(prompt) if _is_messages(prompt) else (None, _text(prompt, repr(fields["prompt"])))
        label = _text(_field(record, fields["label"]), repr(fields["label"])) if "label" in fields else ""
        top = fields["prompt"].split(".")[0]
        return Example(text, label, messages, _rest(record, top) if top == fields["prompt"] else dict(record))

    return read


READERS: dict[str, Callable[[Mapping[str, Any]], Example]] = {
    "mindspeed": _mindspeed,
    "gsm8k": _gsm8k,
    "math": _math,
    "verl": _verl,
    "trl": _trl,
    "trl-conversational": _trl,
}


def read_record(reader: Callable[[Mapping[str, Any]], Example], record: Any, where: str, fmt: str) -> Example:
    """``reader(record)``; a bad record is one UserError line starting with ``where``."""
    if not isinstance(record, Mapping):
        raise UserError(f"{where}: each record must be an object (got {type(record).__name__})")
    try:
        return reader(record)
    except BadRecord as err:
        raise UserError(f"{where}: {fmt} record: {err}") from None
