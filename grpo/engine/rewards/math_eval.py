"""math_eval_toolkit (MindSpeed-RL ``mindspeed_rl/utils/math_eval_toolkit/``): ``parser.py``'s
``extract_answer(data_name="math")`` and ``strip_string``, and ``grader.py``'s ``math_equal``; the ``acc``
verifier's grader. Sympy questions go out through the ``symbolic`` callable (``_sympy.py``)."""

from __future__ import annotations

import re
from collections.abc import Callable

from grpo.engine.rewards import _fast
from grpo.engine.rewards._sympy_child import close as _close

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
# Fast path: when no unit pattern matches anywhere, the unit loop below changes nothing (a search of the
# alternation finds a match exactly when one of the patterns has one), so one search replaces ~1,000 subs.
_ANY_UNIT = re.compile(r"(^|\W)(?:" + "|".join(_UNITS + tuple(u + "s" for u in _UNITS)) + r")($|\W)")

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
    if not skip_unit and not (_fast.ENABLED and _ANY_UNIT.search(s) is None):
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
