"""The sympy side of the rule rewards, run in a child process (``_sympy.py`` starts it and loads this file by
path): standard library here, sympy imported inside the functions, no grpo import, so the child stays light.

Protocol: the child prints "ready" once warmed up, then reads one JSON question ``[op, a, b]`` per line and
prints one JSON answer (true/false) per line, in order. Questions may arrive many at once (one batch per
scoring call); the parent times each answer from the previous one.
"""

from __future__ import annotations

import functools
import json
import math
import re
import sys
from collections.abc import Callable
from typing import Any


def close(a: float, b: float) -> bool:
    """math_eval_toolkit's numeric equality (grader.py's ``numeric_equal``: rel_tol 1e-4)."""
    return math.isclose(b, a, rel_tol=1e-4)


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
        lambda: close(float(N(a)), float(N(b))),
        lambda: a.shape == b.shape and a.applyfunc(lambda x: round(x, 3)).equals(b.applyfunc(lambda x: round(x, 3))),
    ]
    for check in checks:
        try:
            if check():
                return True
        except Exception:
            continue
    return False
