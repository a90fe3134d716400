"""mathruler's grader (``mathruler.grader``, PRM800K's; MindSpeed-RL pins mathruler==0.1.0):
``extract_boxed_content`` and ``grade_answer``, the grader of ``base_acc``, ``math_17k_acc`` and ``acc_for_ppo``.
LaTeX is read by our ``_LatexText`` in place of pylatexenc."""

from __future__ import annotations

import re

from grpo.engine.rewards import _fast
from grpo.engine.rewards._sympy import Budget, OutOfTime, ask
from grpo.engine.rewards.math_eval import _fix_fracs, _leading_zero_and_no_short_lhs

# A canonical integer (what _ruler_normal makes of one): no sign on 0, no leading zeros.
_INTEGER = re.compile(r"0|-?[1-9][0-9]*")


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


def grade_answer(given: str, truth: str, budget: Budget) -> bool:
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


def _ruler_sympy_equal(truth: str, given: str, budget: Budget) -> bool:
    expr = f"({truth})-({given})"
    letters = {c for c in expr.replace("sqrt", "").replace("frac", "") if c.isalpha()}
    if len(letters) > 2 or "^{" in expr or "^(" in expr or re.search(r"\^[0-9]+\^|\^[0-9][0-9]+", expr):
        return False  # mathruler's guard against sympy hanging
    if _fast.ENABLED and _INTEGER.fullmatch(truth) and _INTEGER.fullmatch(given):
        return truth == given  # fast path: simplify(Integer(t) - Integer(g)) == 0 exactly when t == g
    try:
        return ask("ruler", expr, "", budget)
    except OutOfTime:
        return False
