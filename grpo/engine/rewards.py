"""Rule rewards with MindSpeed-RL's semantics (``mindspeed_rl/models/rule_verifier.py`` and the graders it calls).

Each verifier scores decoded responses (special tokens dropped) against their labels, as the function of the
same name in MindSpeed-RL's ``verifier()`` table does (our code, their rules, bugs included where they change
a score; ``tests/data/reward_parity.yaml`` holds MindSpeed-RL's own scores for crafted responses):

- ``acc`` (``acc_worker``): text before the first ``<|im_start|>assistant`` is dropped and the text is cut at the
  first stop word (``</s>``, ``<|im_end|>``, ``<|endoftext|>``); the answer is math_eval_toolkit's
  ``extract_answer(data_name="math")`` (last ``boxed``, else "the answer is", else the last number) after
  ``strip_string``; +1 when ``math_equal`` holds, -0.5 when not, -1 when there is no answer or no "boxed"
  in the text (a bare ``<answer>85</answer>`` scores -1). 0.0 when the sympy part overruns 1 s.
- ``strict_format``: +1 for exactly one ``<think>``, ``</think>``, ``<answer>``, ``\\boxed{..}``, ``</answer>``
  in that order, the text starting with ``<think>`` and ending with ``</answer>``; else -0.5.
- ``format``: 1 when ``^<think>.*?</think>\\s*<answer>.*?</answer>$`` matches (DOTALL, MULTILINE), else 0.
- ``step``: min(1, count/3) of step markers (``Step 1:``, ``1.`` at the start, bullets, First/Second/...).
- ``base_acc``: 1 when the text fully matches ``<think>.*</think>.*<answer>.*\\boxed{.*}.*</answer>`` and
  mathruler's ``grade_answer`` accepts the last boxed content, else 0.
- ``math_17k_acc`` and ``acc_for_ppo``: 1 when mathruler's ``grade_answer`` accepts the last boxed content.
- ``acc_for_dapo`` (``math_dapo.compute_score``): the last ``Answer: ...`` line of the last 300 characters,
  normalised as Minerva does, equals the normalised label: +1, else -1.
- ``math_verify_reward``: the base_acc format and then the ``math_verify`` package's score; registered only
  when ``math_verify`` imports (not a dependency; ``check.py`` refuses it otherwise).

Where we differ from MindSpeed-RL (see docs/engine.md): LaTeX is read by our own converters instead of
latex2sympy2 (math_equal) and pylatexenc (mathruler), covering fractions, roots, powers, pi, products,
text/font macros and spacing; sympy runs in a child process bounded to 1 s per response (mathruler's grading
has no bound in MindSpeed-RL; an overrun there scores "not equal", which is its 0).

The total reward is ``sum(verifier_weight[i] * score_i)``. ``is_correct`` (``grpo/acc/mean``, eval accuracy) is
the engine's own: the boxed (else ``<answer>``) answer equals the label as a number or a trimmed string.

This module imports only the standard library (sympy inside the child), so the child loads it by path.
"""

from __future__ import annotations

import atexit
import functools
import json
import math
import os
import re
import select
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from fractions import Fraction
from typing import Any

TAGS = ("<think>", "</think>", "<answer>", "</answer>")
SYMPY_SECONDS = 1.0  # MindSpeed-RL's acc_subprocess timeout; an overrun scores 0.0 there
_BOXED = re.compile(r"\\boxed\{.*?\}")
_FORMAT = re.compile(r"^<think>.*?</think>\s*<answer>.*?</answer>$", re.DOTALL | re.MULTILINE)
_BASE_ACC_FORMAT = re.compile(r"<think>.*</think>.*<answer>.*\\boxed\{.*\}.*</answer>", re.DOTALL)
_STEP = re.compile(r"(Step \d+:|^\d+\.|\n-|\n\*|First,|Second,|Next,|Finally,)")
_STOP_WORDS = ("</s>", "<|im_end|>", "<|endoftext|>")


class _OutOfTime(Exception):
    """The sympy child did not answer within the response's time budget."""


# ---------------------------------------------------------------------------------------------------------------
# The engine's own answer check (is_correct): unchanged, the metric must not move.


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


# ---------------------------------------------------------------------------------------------------------------
# math_eval_toolkit/parser.py: extract_answer(data_name="math") and strip_string.

# The unit words strip_string removes (MindSpeed-RL's list, from MathQA): each is used as a regular expression
# between non-word characters, so "a ." also matches "a" + space + any character. Data, kept identical.
_UNITS = (
    "east", "degree", "mph", "kmph", "ft", "m sqaure", " m east", "sq m", "deg", "mile", "q .", "monkey", "prime",
    "ratio", "profit of rs", "rd", "o", "gm", "p . m", "lb", "tile", "per", "dm", "lt", "gain", "ab", "way", "west",
    "a .", "b .", "c .", "d .", "e .", "f .", "g .", "h .", "t", "a", "h", "no change", "men", "soldier", "pie",
    "bc", "excess", "st", "inches", "noon", "percent", "by", "gal", "kmh", "c", "acre", "rise", "a . m", "th",
    "π r 2", "sq", "mark", "l", "toy", "coin", "sq . m", "gallon", "° f", "profit", "minw", "yr", "women", "feet",
    "am", "pm", "hr", "cu cm", "square", "v â € ™", "are", "rupee", "rounds", "cubic", "cc", "mtr", "s", "ohm",
    "number", "kmph", "day", "hour", "minute", "min", "second", "man", "woman", "sec", "cube", "mt", "sq inch",
    "mp", "∏ cm ³", "hectare", "more", "sec", "unit", "cu . m", "cm 2", "rs .", "rs", "kg", "g", "month", "km",
    "m", "cm", "mm", "apple", "liter", "loss", "yard", "pure", "year", "increase", "decrease", "d", "less",
    "Surface", "litre", "pi sq m", "s .", "metre", "meter", "inch",
)  # fmt: skip
_UNIT_PATTERNS = tuple(re.compile(rf"(^|\W){u}($|\W)") for u in _UNITS + tuple(u + "s" for u in _UNITS))

_ONES_WORDS = (
    "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve",
    "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen",
)  # fmt: skip
_TENS_WORDS = ("twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety")
_WORD_VALUES = {w: i for i, w in enumerate(_ONES_WORDS)} | {w: 10 * (i + 2) for i, w in enumerate(_TENS_WORDS)}
_WORD_VALUES |= {"hundred": 100, "thousand": 1000, "million": 10**6, "billion": 10**9}
_SCALES = ("billion", "million", "thousand")


def _group_value(words: list[str]) -> int:
    """word2number's value of a group of number words below a scale word (its rules, odd ones included)."""
    v = [_WORD_VALUES[w] for w in words]
    if len(v) == 4:
        return v[0] * v[1] + v[2] + v[3]
    if len(v) == 3:
        return v[0] * v[1] + v[2]
    if len(v) == 2:
        return v[0] * v[1] if 100 in v else v[0] + v[1]
    return v[0]  # an empty group raises IndexError: the text stays as it was


def _word_number(text: str) -> str:
    """strip_string's word2number step: "eighty-five" -> "85"; text without number words is unchanged."""
    try:
        sentence = text.replace("-", " ").lower()
        if sentence.isdigit():
            return str(int(sentence))
        words = [w for w in sentence.split() if w in _WORD_VALUES or w == "point"]
        if not words or any(words.count(w) > 1 for w in (*_SCALES, "point")):
            return text
        decimals: list[str] = []
        if "point" in words:
            words, decimals = words[: words.index("point")], words[words.index("point") + 1 :]
        at = {s: (words.index(s) if s in words else -1) for s in _SCALES}
        b, m, k = at["billion"], at["million"], at["thousand"]
        if (k > -1 and (k < m or k < b)) or (m > -1 and m < b):
            return text
        total: int | float = 0
        if len(words) == 1:
            total = _WORD_VALUES[words[0]]
        elif words:
            last = -1
            for scale, index in (("billion", b), ("million", m), ("thousand", k)):
                if index > -1:
                    total += _group_value(words[last + 1 : index]) * _WORD_VALUES[scale]
                    last = index
            if last == -1:
                total += _group_value(words)
            elif last != len(words) - 1:
                total += _group_value(words[last + 1 :])
        if decimals:
            digits = [str(_WORD_VALUES[w]) for w in decimals if w in _WORD_VALUES and _WORD_VALUES[w] < 10]
            total += float("0." + "".join(digits)) if len(digits) == len(decimals) else 0
        return str(total)
    except (IndexError, KeyError, ValueError):
        return text


def _fix_fracs(text: str, short_raises: bool) -> str:
    r"""``\frac12`` -> ``\frac{1}{2}``. math_eval_toolkit's version returns the text unchanged when the part after
    ``\frac`` has two or more characters and fails (IndexError) on a shorter one (``short_raises``); mathruler's
    (Hendrycks') rewrites ``\fracab``, returns the text unchanged on one character and fails on none."""
    head, *parts = text.split("\\frac")
    out = head
    for part in parts:
        out += "\\frac"
        if part[:1] == "{":
            out += part
            continue
        if short_raises and len(part) >= 2:
            return text
        if len(part) < 2:
            if short_raises or not part:
                raise IndexError("\\frac with fewer than two characters")
            return text
        a, b, rest = part[0], part[1], part[2:]
        out += "{" + a + "}" + (b if b == "{" else "{" + b + "}") + rest
    return out


def _leading_zero_and_no_short_lhs(s: str) -> str:
    """A step both strip_string variants share (math_eval_toolkit's and Hendrycks' for mathruler): ".5" ->
    "0.5", and "x=5" / "ab=5" (a left side of at most 2 characters) -> "5"."""
    if s[0] == ".":
        s = "0" + s
    sides = s.split("=")
    return sides[1] if len(sides) == 2 and len(sides[0]) <= 2 else s


def strip_string(text: str, skip_unit: bool = False) -> str:
    """math_eval_toolkit's answer normalisation, step by step in its order."""
    s = str(text).strip().replace("\n", "").rstrip(".").replace("\\!", "")
    s = re.sub(r"\\begin\{array\}\{.*?\}", r"\\begin{pmatrix}", s).replace("\\end{array}", "\\end{pmatrix}")
    s = s.replace("bmatrix", "pmatrix").replace("tfrac", "frac").replace("dfrac", "frac")
    s = s.replace("\\neq", "\\ne").replace("\\leq", "\\le").replace("\\geq", "\\ge")
    s = s.replace("\\left", "").replace("\\right", "").replace("\\{", "{").replace("\\}", "}")
    without_unit = re.sub(r"\\text{.*?}$", "", s).strip()  # a trailing \text{..} is a unit
    if without_unit and without_unit != s:
        s = without_unit
    if not skip_unit:
        for _ in range(2):
            for pattern in _UNIT_PATTERNS:
                removed = pattern.sub(r"\1\2", s)
                if removed:
                    s = removed
    s = s.replace("^{\\circ}", "").replace("^\\circ", "")
    s = s.replace("\\$", "").replace("$", "").replace("\\(", "").replace("\\)", "")
    s = _word_number(s)
    s = re.sub(r"\\text\{(.*?)\}", r"\1", s)
    for prefix in ("x=", "y=", "z=", "x\\in", "y\\in", "z\\in", "x\\to", "y\\to", "z\\to"):
        s = s.replace(prefix, "")
    s = s.replace("\\emptyset", "{}").replace("(-\\infty,\\infty)", "\\mathbb{R}")
    s = s.replace("\\%", "").replace("%", "")
    s = s.replace(" .", " 0.").replace("{.", "{0.")
    # (Its "enclosed in {}/()/[] and alphanumeric" unwrapping can never hold: a bracket is not alphanumeric.)
    s = s.replace("infinity", "\\infty")
    if "\\infty" not in s:
        s = s.replace("inf", "\\infty")
    s = s.replace("+\\inity", "\\infty").replace("and", "").replace("\\mathbf", "")
    s = re.sub(r"\\mbox{.*?}", "", s)
    if "j" in s and "i" not in s:
        s = s.replace("j", "i")
    s = re.sub(r"(\d+)\.0*([^\d])", r"\1\2", s)
    s = re.sub(r"(\d+)\.0*$", r"\1", s)
    if not s:
        return s
    s = _leading_zero_and_no_short_lhs(s)
    s = re.sub(r"\\sqrt(\w+)", r"\\sqrt{\1}", s).replace(" ", "")
    s = _fix_fracs(s, short_raises=True)
    return _slash_to_frac(s)


def _slash_to_frac(s: str) -> str:
    """``3/4`` -> a \\frac. math_eval_toolkit writes "\\frac" in a non-raw string, so its result starts with a
    form feed (``\\x0crac{3}{4}``): kept, since it decides what math_equal then sees."""
    parts = s.split("/")
    if len(parts) != 2:
        return s
    a, b = parts
    try:
        a2 = a if "sqrt" in a else str(int(a))
        b2 = b if "sqrt" in b else str(int(b))
    except ValueError:
        return s
    return f"\x0crac{{{a2}}}{{{b2}}}" if s == f"{a2}/{b2}" else s


def _last_boxed_msrl(text: str) -> str:
    """math_eval_toolkit's boxed reading: after the last "boxed", a brace group, else up to the next ``$``."""
    tail = text.split("boxed")[-1]
    if not tail:
        return ""
    if tail[0] != "{":
        return tail.split("$")[0].strip()
    depth, out = 1, list[str]()
    for ch in tail[1:]:
        depth += {"{": 1, "}": -1}.get(ch, 0)
        if depth == 0:
            break
        out.append(ch)
    return "".join(out)


def extract_math_answer(text: str) -> str:
    """math_eval_toolkit's ``extract_answer(text, data_name="math")``."""
    text = text.replace("\u043a\u0438", "")
    if "final answer is $" in text and "$. I hope" in text:
        pred = text.split("final answer is $", 1)[1].split("$. I hope", 1)[0].strip()
    elif "boxed" in text:
        pred = _last_boxed_msrl(text)
        if not pred and not text.split("boxed")[-1]:
            return ""
    elif "he answer is" in text:
        pred = text.split("he answer is")[-1].strip()
    elif "final answer is" in text:
        pred = text.split("final answer is")[-1].strip()
    elif "答案是" in text:
        pred = text.split("答案是")[1].strip().split("\n\n")[0].strip()
    else:
        numbers = re.findall(r"-?\d*\.?\d+", text.replace(",", ""))
        pred = numbers[-1] if numbers else ""
    pred = re.sub(r"\n\s*", "", pred)
    pred = pred[1:] if pred[:1] == ":" else pred
    pred = pred[:-1] if pred[-1:] == "." else pred
    pred = pred[:-1] if pred[-1:] == "/" else pred
    try:
        return strip_string(pred)
    except IndexError:  # its _fix_fracs fails on "\frac" + one character; it then keeps the unstripped text
        return pred


# ---------------------------------------------------------------------------------------------------------------
# math_eval_toolkit/grader.py: math_equal.


def _as_float(x: str) -> float | None:
    """grader's parse_digits: commas dropped, a trailing ``%`` (or ``\\%``) divides by 100."""
    x = x.replace(",", "")
    try:
        return float(x)
    except ValueError:
        if not x.endswith("%"):
            return None
        x = x[:-1].removesuffix("\\")
        try:
            return float(x) / 100
        except ValueError:
            return None


def _close(a: float, b: float) -> bool:
    return math.isclose(b, a, rel_tol=1e-4)


def _choice(pred: str) -> str:
    pred = pred.strip("\n").rstrip(".").rstrip("/").strip(" ").lstrip(":")
    letters = re.findall(r"\b(A|B|C|D|E)\b", pred.upper())
    pred = letters[-1] if letters else pred.strip().strip(".")
    return pred.rstrip(".").rstrip("/")


def _to_pmatrix(text: str) -> str:
    found = re.findall(r"\{.*,.*\}", text.strip())
    return ", ".join("\\begin{pmatrix}" + m.strip("{}").replace(",", "\\") + "\\end{pmatrix}" for m in found)


def _pmatrix_rows(text: str) -> list[str] | None:
    begins = text.startswith("\\begin{pmatrix}") or text.startswith("\\begin{bmatrix}")
    ends = text.endswith("\\end{pmatrix}") or text.endswith("\\end{bmatrix}")
    if not (begins and ends):
        return None
    body = text[len("\\begin{pmatrix}") : -len("\\end{pmatrix}")]
    return [row.strip() for row in body.split("\\\\") if row.strip()]


Symbolic = Callable[[str, str], bool]


def math_equal(prediction: str, reference: str, symbolic: Symbolic) -> bool:
    """math_eval_toolkit's ``math_equal`` (percent and 1e-4 tolerance on); ``symbolic`` is its symbolic_equal."""
    if prediction.strip().lower() == reference.strip().lower():
        return True
    if reference in ("A", "B", "C", "D", "E") and _choice(prediction) == reference:
        return True
    p, r = _as_float(prediction), _as_float(reference)
    if p is not None and r is not None:  # numbers: equal within 1e-4, also as a percentage either way
        return any(_close(p, item) for item in (r / 100, r, r * 100))
    if not prediction:
        return False
    reference, prediction = reference.strip(), prediction.strip()
    if "pmatrix" in prediction and "pmatrix" not in reference:
        reference = _to_pmatrix(reference)
    pred_s, ref_s = prediction, reference
    if (prediction[:1] == "[" and prediction[-1:] == "]" and not reference.startswith("(")) or (
        prediction[:1] == "(" and prediction[-1:] == ")" and not reference.startswith("[")
    ):
        pred_s, ref_s = pred_s.strip("[]()"), ref_s.strip("[]()")
    if re.sub(r"[{}()]", "", pred_s).lower() == re.sub(r"[{}()]", "", ref_s).lower():
        return True
    bracketed = re.compile(r"(\(|\[).+(\)|\])")
    if bracketed.match(prediction) and bracketed.match(reference):
        p_parts, r_parts = prediction[1:-1].split(","), reference[1:-1].split(",")
        if len(p_parts) == len(r_parts) and all(
            math_equal(a, b, symbolic) for a, b in zip(p_parts, r_parts, strict=True)
        ):
            return True
    p_rows, r_rows = _pmatrix_rows(prediction), _pmatrix_rows(reference)
    if p_rows is not None and r_rows is not None and len(p_rows) == len(r_rows):
        cells = [(pr.split("&"), rr.split("&")) for pr, rr in zip(p_rows, r_rows, strict=True)]
        if all(
            len(pc) == len(rc) and all(math_equal(a, b, symbolic) for a, b in zip(pc, rc, strict=True))
            for pc, rc in cells
        ):
            return True
    if prediction.count("=") == 1 and reference.count("=") == 1:
        pl, pr = (x.strip() for x in prediction.split("="))
        rl, rr = (x.strip() for x in reference.split("="))
        pred, ref = f"{pl} - ({pr})", f"{rl} - ({rr})"
        if symbolic(pred, ref) or symbolic(f"-({pred})", ref):
            return True
    elif prediction.count("=") == 1 and len(prediction.split("=")[0].strip()) <= 2 and "=" not in reference:
        if math_equal(prediction.split("=")[1], reference, symbolic):
            return True
    elif reference.count("=") == 1 and len(reference.split("=")[0].strip()) <= 2 and "=" not in prediction:  # noqa: SIM102
        if math_equal(prediction, reference.split("=")[1], symbolic):
            return True
    return symbolic(prediction, reference)


# ---------------------------------------------------------------------------------------------------------------
# mathruler.grader (PRM800K's grader, MindSpeed-RL pins mathruler==0.1.0): extract_boxed_content, grade_answer.


def boxed_content(text: str) -> str:
    """mathruler's ``extract_boxed_content``: the last ``\\boxed{..}``'s content, the string "None" if none."""
    start = text.rfind("\\boxed{")
    if start == -1:
        return "None"
    depth = 0
    content = text[start + len("\\boxed{") :]
    for i, ch in enumerate(content):
        depth += {"{": 1, "}": -1}.get(ch, 0)
        if depth == -1:
            return content[:i].strip()
    return "None"


def _hendrycks_strip(s: str) -> str:
    """The MATH dataset's answer normalisation (mathruler's math_normalize); raises where it would."""
    s = s.replace("\n", "").replace("\\!", "").replace("\\\\", "\\")
    s = s.replace("tfrac", "frac").replace("dfrac", "frac").replace("\\left", "").replace("\\right", "")
    s = s.replace("^{\\circ}", "").replace("^\\circ", "").replace("\\$", "")
    if "\\text{ " in s:  # a unit on the right
        halves = s.split("\\text{ ")
        if len(halves) != 2:
            raise ValueError("two units")
        s = halves[0]
    s = s.replace("\\%", "").replace("%", "").replace(" .", " 0.").replace("{.", "{0.")
    if not s:
        return s
    s = _leading_zero_and_no_short_lhs(s)
    if "\\sqrt" in s:
        head, *parts = s.split("\\sqrt")
        s = head + "".join("\\sqrt" + (p if p[0] == "{" else "{" + p[0] + "}" + p[1:]) for p in parts)
    s = _fix_fracs(s.replace(" ", ""), short_raises=False)
    if s == "0.5":
        s = "\\frac{1}{2}"
    parts = s.split("/")
    if len(parts) == 2:
        try:
            if s == f"{int(parts[0])}/{int(parts[1])}":
                s = "\\frac{" + parts[0] + "}{" + parts[1] + "}"
        except ValueError:
            pass
    return s


def _mathd_normal(answer: str) -> str:
    answer = answer.strip()
    try:
        m = re.search(r"^\\text\{(?P<text>.+?)\}$", answer)
        if m is not None:
            answer = m.group("text").strip()
        return _hendrycks_strip(answer)
    except (ValueError, IndexError):
        return answer


# Single LaTeX symbols as pylatexenc's latex2text writes them, then as mathruler rewrites them for sympy.
_LATEX_SYMBOLS = {
    "pi": "pi", "infty": "inf", "cup": "U", "cdot": "*", "times": "*", "circ": "∘", "le": "≤", "leq": "≤",
    "ge": "≥", "geq": "≥", "ne": "≠", "neq": "≠", "pm": "±", "theta": "θ", "alpha": "α", "beta": "β",
    "dots": "…", "ldots": "…", "cdots": "⋯", "quad": "   ", "qquad": "    ",
}  # fmt: skip
_LATEX_SPACING = {",": " ", ";": " ", ":": " ", " ": " ", "!": "", "\\": "\n"}


class _LatexText:
    """A small LaTeX-to-text reader standing in for pylatexenc's ``latex2text`` where mathruler uses it:
    ``\\frac{a}{b}`` -> ``a/b``, ``\\sqrt[n]{x}`` -> ``sqrt(x)``, groups lose their braces, font and text
    macros keep their argument, unknown macros vanish, symbols as in ``_LATEX_SYMBOLS``."""

    def __init__(self, text: str):
        self.text, self.i = text, 0

    def read(self, stop: str = "") -> str:
        out: list[str] = []
        while self.i < len(self.text) and self.text[self.i] != stop:
            out.append(self._node())
        return "".join(out)

    def _arg(self) -> str:
        while self.i < len(self.text) and self.text[self.i].isspace():
            self.i += 1
        return self._node() if self.i < len(self.text) else ""

    def _node(self) -> str:
        ch = self.text[self.i]
        self.i += 1
        if ch == "{":
            inner = self.read("}")
            self.i += 1
            return inner
        if ch == "$" or ch == "}":
            return ""
        if ch != "\\":
            return ch
        m = re.match(r"[A-Za-z]+", self.text[self.i :])
        if m is None:  # a control symbol: \% \$ \{ \, ...
            sym = self.text[self.i : self.i + 1]
            self.i += 1
            return _LATEX_SPACING.get(sym, sym)
        name = m.group()
        self.i += len(name)
        while self.i < len(self.text) and self.text[self.i] == " ":
            self.i += 1  # spaces after a control word belong to it
        if name == "frac":
            return f"{self._arg()}/{self._arg()}"
        if name == "sqrt":
            if self.text[self.i : self.i + 1] == "[":
                self.i = self.text.find("]", self.i) + 1 or len(self.text)
            return f"sqrt({self._arg()})"
        return _LATEX_SYMBOLS.get(name, "")


def _latex_for_sympy(expr: str) -> str:
    """mathruler's ``_parse_latex`` with our LaTeX reader in place of pylatexenc."""
    expr = expr.replace("\\tfrac", "\\frac").replace("\\dfrac", "\\frac").replace("\\frac", " \\frac")
    return _LatexText(expr).read().strip()


_RULER_UNITS = (
    "degree", "cm", "centimeter", "meter", "mile", "second", "minute", "hour", "day", "week", "month", "year",
    "foot", "feet", "inch", "yard",
)  # fmt: skip


def _str_is_int(x: str) -> bool:
    try:
        value = float(_strip_thousands(x))
        return abs(value - round(value)) <= 1e-7
    except (ValueError, OverflowError):
        return False


def _strip_thousands(expr: str) -> str:
    while True:
        nxt = re.sub(r"(\d)(,)(\d\d\d)($|\D)", r"\1\3\4", expr)
        if nxt == expr:
            return expr
        expr = nxt


def _ruler_normal(expr: str) -> str:
    """mathruler's ``_normalize`` (PRM800K)."""
    m = re.search(r"^\\text\{(?P<text>.+?)\}$", expr)
    if m is not None:
        expr = m.group("text")
    expr = expr.replace("\\%", "%").replace("\\$", "$").replace("$", "").replace("%", "")
    expr = expr.replace(" or ", " , ").replace(" and ", " , ")
    expr = expr.replace("million", "*10^6").replace("billion", "*10^9").replace("trillion", "*10^12")
    for unit in _RULER_UNITS:
        expr = re.sub(rf"{unit}(es)?(s)? *(\^[0-9]+)?", "", expr)
    expr = re.sub(r"\^ *\\circ", "", expr)
    if expr[:1] == "{" and expr[-1:] == "}":
        expr = expr[1:-1]
    expr = re.sub(r",\\! *", "", expr)
    try:
        value = float(expr)
        if abs(value - round(value)) <= 1e-7:
            expr = str(round(value))
    except (ValueError, OverflowError):
        pass
    if "\\" in expr:
        expr = _latex_for_sympy(expr)
    expr = re.sub("- *", "-", expr)
    expr = re.sub("([0-9]) +([0-9])", r"\1+\2", expr)  # a mixed number 7 3/4 is 7+3/4
    expr = expr.replace(" ", "").replace("{", "").replace("}", "").lower()
    if _str_is_int(expr):
        expr = str(int(float(expr.replace(",", ""))))
    return expr


def _ruler_elements(expr: str) -> list[str]:
    expr = _strip_thousands(expr)
    if not expr:
        return []
    brackets = "()[]"
    if len(expr) > 2 and expr[0] in brackets and expr[-1] in brackets and not any(c in expr[1:-1] for c in brackets):
        return [e.strip() for e in expr[1:-1].split(",")]
    return [expr]


def grade_answer(given: str, truth: str, budget: _Budget) -> bool:
    """mathruler's ``grade_answer``: equal after MATH normalisation, or after PRM800K's plus sympy."""
    if _mathd_normal(truth) == _mathd_normal(given):
        return True
    truth_n, given_n = _ruler_normal(truth), _ruler_normal(given)
    if truth_n == given_n:
        return True
    if not given_n:
        return False
    truth_e, given_e = _ruler_elements(truth_n), _ruler_elements(given_n)
    if len(truth_e) > 1 and (truth_n[0] != given_n[0] or truth_n[-1] != given_n[-1]):
        return False
    if len(truth_e) != len(given_e):
        return False
    fraction = re.compile(r"^-?[0-9]+.?/0*[1-9][0-9]*.?$")
    for t, g in zip(truth_e, given_e, strict=True):
        if fraction.search(t) and fraction.search(g):
            ok = t == g  # an unreduced fraction is wrong: no sympy here
        elif _str_is_int(t) != _str_is_int(g):
            ok = False  # an integer answer must match as a string
        else:
            ok = _ruler_sympy_equal(t, g, budget)
        if not ok:
            return False
    return True


def _ruler_sympy_equal(truth: str, given: str, budget: _Budget) -> bool:
    expr = f"({truth})-({given})"
    letters = {c for c in expr.replace("sqrt", "").replace("frac", "") if c.isalpha()}
    if len(letters) > 2 or "^{" in expr or "^(" in expr or re.search(r"\^[0-9]+\^|\^[0-9][0-9]+", expr):
        return False  # mathruler's guard against sympy hanging
    try:
        return _SYMPY.ask("ruler", expr, "", budget)
    except _OutOfTime:
        return False


# ---------------------------------------------------------------------------------------------------------------
# Sympy, in a child process: parse_expr can evaluate 9**9**9**9 for ever (MindSpeed-RL bounds acc by 1 s).


class _Budget:
    """What is left of one response's sympy time."""

    def __init__(self) -> None:
        self.end = time.monotonic() + SYMPY_SECONDS

    def left(self) -> float:
        return self.end - time.monotonic()


class _SympyChild:
    """One child process answering sympy questions; killed and restarted when an answer overruns its budget."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen[str] | None = None
        self.lock = threading.Lock()
        atexit.register(self.close)

    def _start(self) -> subprocess.Popen[str]:
        if self.proc is None or self.proc.poll() is not None:
            code = (
                "import importlib.util as u, sys; s = u.spec_from_file_location('_grpo_rewards', sys.argv[1]); "
                "m = u.module_from_spec(s); s.loader.exec_module(m); m._serve()"
            )
            self.proc = subprocess.Popen(
                [sys.executable, "-c", code, os.path.abspath(__file__)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
                bufsize=1,
            )
            assert self.proc.stdout is not None
            ready, _, _ = select.select([self.proc.stdout], [], [], 120)  # importing sympy is not the budget
            if not ready or self.proc.stdout.readline().strip() != "ready":
                self.close()
                raise RuntimeError("the sympy child process of grpo.engine.rewards did not start")
        return self.proc

    def ask(self, op: str, a: str, b: str, budget: _Budget) -> bool:
        with self.lock:
            starting = time.monotonic()
            proc = self._start()
            budget.end += time.monotonic() - starting  # (re)starting the child is not the response's time
            assert proc.stdin is not None and proc.stdout is not None
            if budget.left() <= 0:
                raise _OutOfTime
            proc.stdin.write(json.dumps([op, a, b]) + "\n")
            proc.stdin.flush()
            ready, _, _ = select.select([proc.stdout], [], [], max(budget.left(), 0.0))
            line = proc.stdout.readline() if ready else ""
            if not line:  # overran (or died): a fresh child for the next question
                self.close()
                raise _OutOfTime
            return bool(json.loads(line))

    def close(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None


_SYMPY = _SympyChild()


def _serve() -> None:
    """The child's loop: one JSON question per line, one JSON answer per line."""
    # Warm up before "ready": the first parse (sympy's LaTeX parser import above all) takes seconds, which
    # belong to the start, not to the first response's 1 s.
    for a, b in (("\\frac{1}{2}", "0.5"), ("16q", "11"), ("\\sqrt{8}", "2\\sqrt{2}"), ("x=1", "y=2")):
        _symbolic_equal(a, b)
    for expr in ("(1/2)-(0.5)", "(x+1)-(2x)", "(sqrt(8))-(2sqrt(2))"):
        _ruler_eval(expr)
    print("ready", flush=True)
    for line in sys.stdin:
        op, a, b = json.loads(line)
        try:
            answer = _ruler_eval(a) if op == "ruler" else _symbolic_equal(a, b)
        except Exception:
            answer = False
        print(json.dumps(bool(answer)), flush=True)


def _ruler_eval(expr: str) -> bool:
    """mathruler's are_equal_under_sympy: parse with implicit multiplication, simplify, compare with 0."""
    from sympy import simplify
    from sympy.parsing import sympy_parser as sp

    parsed = sp.parse_expr(
        expr.replace("^", "**"), transformations=(*sp.standard_transformations, sp.implicit_multiplication_application)
    )
    return bool(simplify(parsed) == 0)


def _latex_to_sympy(text: str) -> Any:
    """Our stand-in for latex2sympy2 (absent here): LaTeX arithmetic rewritten for sympy's parse_expr."""
    from sympy.parsing import sympy_parser as sp

    s = text.replace("\\left", "").replace("\\right", "").replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac")
    s = re.sub(r"\\(?:cdot|times)", "*", s).replace("\\pi", " pi ").replace("\\infty", " oo ")
    for _ in range(s.count("\\frac") + s.count("\\sqrt")):
        s = re.sub(r"\\frac\s*\{([^{}]*)\}\s*\{([^{}]*)\}", r"((\1)/(\2))", s)
        s = re.sub(r"\\frac\s*(\d)\s*(\d)", r"((\1)/(\2))", s)
        s = re.sub(r"\\sqrt\s*\[([^\]]*)\]\s*\{([^{}]*)\}", r"((\2)**(1/(\1)))", s)
        s = re.sub(r"\\sqrt\s*\{([^{}]*)\}", r"sqrt(\1)", s)
        s = re.sub(r"\\sqrt\s*(\w)", r"sqrt(\1)", s)
    if "\\" in s:
        raise ValueError(f"unsupported LaTeX: {text}")
    s = s.replace("{", "(").replace("}", ")").replace("^", "**")
    transformations = (*sp.standard_transformations, sp.implicit_multiplication_application)
    return sp.parse_expr(s, transformations=transformations)


@functools.lru_cache(maxsize=1)
def _antlr_411() -> bool:
    """Whether sympy's ``parse_latex`` can work: it raises ImportError unless antlr4-python3-runtime is 4.11
    (neither this project's environment nor MindSpeed-RL's has it). Skipping a parser that can only raise
    changes no result and saves its 3 s first call (it imports sympy.physics.quantum before failing)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("antlr4-python3-runtime").startswith("4.11")
    except PackageNotFoundError:
        return False


def _symbolic_equal(a_text: str, b_text: str) -> bool:
    """math_eval_toolkit's symbolic_equal: parse both (sympy, then LaTeX), then equal as text, by simplify,
    as equations, numerically within 1e-4, or as matrices rounded to 3 places."""
    from sympy import N, simplify
    from sympy.parsing.latex import parse_latex
    from sympy.parsing.sympy_parser import parse_expr

    def parse(s: str) -> Any:
        for fn in (parse_expr, parse_latex, _latex_to_sympy) if _antlr_411() else (parse_expr, _latex_to_sympy):
            for variant in (s.replace("\\\\", "\\"), s):
                try:
                    return fn(variant)
                except Exception:
                    continue
        return s

    a, b = parse(a_text), parse(b_text)
    checks: list[Callable[[], Any]] = [
        lambda: str(a) == str(b) or a == b,
        lambda: a.equals(b) or simplify(a - b) == 0,
        lambda: abs(a.lhs - a.rhs).equals(abs(b.lhs - b.rhs)),
        lambda: _close(float(N(a)), float(N(b))),
        lambda: a.shape == b.shape and a.applyfunc(lambda x: round(x, 3)).equals(b.applyfunc(lambda x: round(x, 3))),
    ]
    for check in checks:
        try:
            if check():
                return True
        except Exception:
            continue
    return False


# ---------------------------------------------------------------------------------------------------------------
# math_dapo.py: compute_score (Minerva's answer normalisation).

_DAPO_SUBSTITUTIONS = (
    ("an ", ""), ("a ", ""), (".$", "$"), ("\\$", ""), ("\\ ", ""), (" ", ""), ("mbox", "text"),
    (",\\text{and}", ","), ("\\text{and}", ","), ("\\text{m}", "\\text{}"),
)  # fmt: skip
_DAPO_REMOVED = (
    "square", "ways", "integers", "dollars", "mph", "inches", "hours", "km", "units", "\\ldots", "sue", "points",
    "feet", "minutes", "digits", "cents", "degrees", "cm", "gm", "pounds", "meters", "meals", "edges", "students",
    "childrentickets", "multiples", "\\text{s}", "\\text{.}", "\\text{\ns}", "\\text{}^2", "\\text{}^3",
    "\\text{\n}", "\\text{}", "\\mathrm{th}", "^\\circ", "^{\\circ}", "\\;", ",\\!", "{,}", '"', "\\dots",
)  # fmt: skip


def _minerva_normal(answer: str) -> str:
    answer = answer.split("=")[-1]
    for old, new in _DAPO_SUBSTITUTIONS:
        answer = answer.replace(old, new)
    for gone in _DAPO_REMOVED:
        answer = answer.replace(gone, "")
    answer = re.sub(r"(.*?)(\$)(.*?)(\$)(.*)", "$\\3$", answer)
    for macro in ("text", "textbf", "overline"):
        answer = re.sub(rf"(\\{macro}\{{)(.*?)(\}})", "\\2", answer)
    answer = re.sub(r"(\\boxed\{)(.*)(\})", "\\2", answer)
    answer = re.sub(r"(frac)([^{])(.)", "frac{\\2}{\\3}", answer)
    answer = re.sub(r"(sqrt)([^{])", "sqrt{\\2}", answer).replace("$", "")
    if answer.replace(",", "").isdigit():
        answer = answer.replace(",", "")
    return answer.strip()


# ---------------------------------------------------------------------------------------------------------------
# The verifiers.


def acc(text: str, label: str) -> float:
    start = text.find("<|im_start|>assistant")
    if start > 0:
        text = text[start:]
    for stop in _STOP_WORDS:
        if stop in text:
            text = text.split(stop)[0].strip()
    answer = extract_math_answer(text)
    if not answer:
        return -1.0
    try:
        score = 1.0 if math_equal(answer, label, _bounded_symbolic(_Budget())) else -0.5
    except _OutOfTime:
        return 0.0
    return score if "boxed" in text else -1.0


def _bounded_symbolic(budget: _Budget) -> Symbolic:
    return lambda a, b: _SYMPY.ask("msrl", a, b, budget)


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


def strict_format(text: str, label: str = "") -> float:
    return 1.0 if valid_structure(text) else -0.5


def format_(text: str, label: str = "") -> float:
    return 1.0 if _FORMAT.match(text) else 0.0


def step(text: str, label: str = "") -> float:
    return min(1.0, len(_STEP.findall(text)) / 3)


def base_acc(text: str, label: str) -> float:
    if not _BASE_ACC_FORMAT.fullmatch(text):
        return 0.0
    return 1.0 if grade_answer(boxed_content(text), label, _Budget()) else 0.0


def math_17k_acc(text: str, label: str) -> float:
    return 1.0 if grade_answer(boxed_content(text), label, _Budget()) else 0.0


def acc_for_dapo(text: str, label: str) -> float:
    lines = re.findall(r"(?i)Answer\s*:\s*([^\n]+)", text[-300:])
    prediction = _minerva_normal(lines[-1] if lines else "[INVALID]")
    return 1.0 if prediction == _minerva_normal(label) else -1.0


VERIFIERS: dict[str, Callable[[str, str], float]] = {
    "acc": acc,
    "strict_format": strict_format,
    "format": format_,
    "base_acc": base_acc,
    "math_17k_acc": math_17k_acc,
    "acc_for_ppo": math_17k_acc,  # ppo_accuracy_reward -> math_acc_reward: the same mathruler check
    "acc_for_dapo": acc_for_dapo,
    "step": step,
}


def _math_verify_reward() -> Callable[[str, str], float] | None:
    """MindSpeed-RL's math_verify_reward, when the optional ``math_verify`` package imports."""
    try:
        from math_verify.metric import math_metric  # type: ignore[import-not-found, unused-ignore]
        from math_verify.parser import (  # type: ignore[import-not-found, unused-ignore]
            ExprExtractionConfig,
            LatexExtractionConfig,
        )
    except ImportError:
        return None
    verify = math_metric(
        gold_extraction_target=(LatexExtractionConfig(),),
        pred_extraction_target=(ExprExtractionConfig(), LatexExtractionConfig()),
    )

    def math_verify_reward(text: str, label: str) -> float:
        if not _BASE_ACC_FORMAT.fullmatch(text):
            return 0.0
        try:
            score, _ = verify(["\\boxed{" + label + "}"], [text])
        except Exception:
            return 0.0
        return float(score)

    return math_verify_reward


_mv = _math_verify_reward()
if _mv is not None:
    VERIFIERS["math_verify_reward"] = _mv
MATH_VERIFY_MISSING = "math_verify_reward needs the math-verify package: pip install math-verify"


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
