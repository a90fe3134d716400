"""The engine's own answer check (``is_correct``, the ``grpo/acc/mean`` metric): unchanged, the metric must not
move. Not a MindSpeed-RL grader: the boxed (else ``<answer>``) answer equals the label as a number or a trimmed
string."""

from __future__ import annotations

import re
from fractions import Fraction


def extract_boxed(text: str) -> str | None:
    """Content of the last ``\\boxed{...}`` with balanced braces (None when there is none)."""
    start = text.rfind("\\boxed{")
    if start < 0:
        return None
    depth, out = 1, list[str]()
    for ch in text[start + len("\\boxed{") :]:
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return "".join(out).strip()
        out.append(ch)
    return None  # unbalanced: no answer


def extract_answer(text: str) -> str | None:
    """The boxed answer, else the content of the last ``<answer>..</answer>``."""
    boxed = extract_boxed(text)
    if boxed is not None:
        return boxed
    found = re.findall(r"<answer>(.*?)</answer>", text, flags=re.DOTALL)
    return found[-1].strip() if found else None


def _as_number(text: str) -> Fraction | None:
    text = text.replace(",", "").replace("$", "").strip().rstrip(".")
    try:
        return Fraction(text)
    except (ValueError, ZeroDivisionError):
        return None


def answers_equal(prediction: str | None, label: str) -> bool:
    if prediction is None or prediction == "":
        return False
    a, b = _as_number(prediction), _as_number(str(label))
    if a is not None and b is not None:
        return a == b
    return _trimmed(prediction) == _trimmed(label)


def _trimmed(text: object) -> str:
    return re.sub(r"\s+", "", str(text)).strip("$").rstrip(".")


def is_correct(text: str, label: str) -> bool:
    """Plain accuracy (the ``grpo/acc/mean`` metric): the extracted answer equals the label."""
    return answers_equal(extract_answer(text), label)
