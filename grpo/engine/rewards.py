"""Rule rewards with MindSpeed-RL's semantics (``mindspeed_rl/models/rule_verifier.py``).

Each verifier scores decoded responses (special tokens dropped) against their labels:

- ``acc``: the answer is taken from the last ``\\boxed{..}``, else from ``<answer>..</answer>``;
  +1 when it equals the label, -0.5 when it differs, -1 when there is no answer at all.
  (MindSpeed-RL gives -1 to any response without ``boxed``; we also accept a bare ``<answer>``, as the
  project's issue asks.)
- ``strict_format``: +1 for exactly one ``<think>``, ``</think>``, ``<answer>``, ``\\boxed{..}``, ``</answer>``
  in that order, the text starting with ``<think>`` and ending with ``</answer>``; else -0.5.
- ``format``: 1 when the whole text matches ``^<think>.*?</think>\\s*<answer>.*?</answer>$``, else 0.
- ``base_acc``: 1 when the text fully matches ``<think>.*</think>.*<answer>.*\\boxed{.*}.*</answer>`` and the
  boxed answer equals the label, else 0.
- ``math_17k_acc``: 1 when the boxed answer equals the label, else 0.
- ``step``: min(1, count/3) of step markers (``Step 1:``, ``1.`` at a line start, bullets, First/Second/...).

The total reward is ``sum(verifier_weight[i] * score_i)``. Answers compare numerically when both parse as
numbers (fractions too), else as normalised strings.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from fractions import Fraction

TAGS = ("<think>", "</think>", "<answer>", "</answer>")
_BOXED = re.compile(r"\\boxed\{.*?\}")
_FORMAT = re.compile(r"^<think>.*?</think>\s*<answer>.*?</answer>$", re.DOTALL | re.MULTILINE)
_BASE_ACC_FORMAT = re.compile(r"<think>.*</think>.*<answer>.*\\boxed\{.*\}.*</answer>", re.DOTALL)
_STEP = re.compile(r"(Step \d+:|^\d+\.|\n-|\n\*|First,|Second,|Next,|Finally,)")


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
    return _normalised(prediction) == _normalised(label)


def valid_structure(text: str) -> bool:
    """MindSpeed-RL's ``_validate_response_structure``."""
    counts = {t: text.count(t) for t in TAGS}
    boxed = _BOXED.findall(text)
    if any(c != 1 for c in counts.values()) or len(boxed) != 1:
        return False
    pos = {t: text.find(t) for t in TAGS}
    box_pos = text.find(boxed[0])  # the one match found above
    in_order = pos["<think>"] < pos["</think>"] < pos["<answer>"] < box_pos < pos["</answer>"]
    return in_order and text.startswith("<think>") and text.endswith("</answer>")


def acc(text: str, label: str) -> float:
    answer = extract_answer(text)
    if answer is None or answer == "":
        return -1.0
    return 1.0 if answers_equal(answer, label) else -0.5


def strict_format(text: str, label: str = "") -> float:
    return 1.0 if valid_structure(text) else -0.5


def format_(text: str, label: str = "") -> float:
    return 1.0 if _FORMAT.match(text) else 0.0


def base_acc(text: str, label: str) -> float:
    return 1.0 if _BASE_ACC_FORMAT.fullmatch(text) and answers_equal(extract_boxed(text), label) else 0.0


def math_17k_acc(text: str, label: str) -> float:
    return 1.0 if answers_equal(extract_boxed(text), label) else 0.0


def step(text: str, label: str = "") -> float:
    return min(1.0, len(_STEP.findall(text)) / 3)


VERIFIERS: dict[str, Callable[[str, str], float]] = {
    "acc": acc,
    "strict_format": strict_format,
    "format": format_,
    "base_acc": base_acc,
    "math_17k_acc": math_17k_acc,
    "step": step,
}


def _normalised(text: object) -> str:
    return re.sub(r"\s+", "", str(text)).strip("$").rstrip(".")


def is_correct(text: str, label: str) -> bool:
    """Plain accuracy (the ``grpo/acc/mean`` metric): the extracted answer equals the label."""
    return answers_equal(extract_answer(text), label)


def score(
    texts: list[str], labels: list[str], names: Sequence[str], weights: Sequence[float]
) -> tuple[list[float], dict[str, list[float]]]:
    """Total reward per response and each verifier's scores (MindSpeed-RL's ``verifier``)."""
    unknown = [n for n in names if n not in VERIFIERS]
    if unknown:  # the schema rejects these first; never skip a verifier silently
        raise ValueError(f"unknown verifier_function {unknown}; known: {sorted(VERIFIERS)}")
    totals = [0.0] * len(texts)
    per: dict[str, list[float]] = {}
    for name, weight in zip(names, weights, strict=True):
        fn = VERIFIERS[name]
        scores = [fn(text, label) for text, label in zip(texts, labels, strict=True)]
        per[name] = scores
        totals = [a + weight * s for a, s in zip(totals, scores, strict=True)]
    return totals, per
