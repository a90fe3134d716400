"""The sympy side of the rule rewards, run in a child process (``_sympy.py`` starts it and loads this file by
path): standard library here, sympy imported inside the functions, no grpo import, so the child stays light.

Protocol: the child prints "ready" once warmed up, then reads one JSON question ``[op, a, b]`` per line and
prints one JSON answer (true/false) per line, in order. Questions may arrive many at once (one batch per
scoring call); the parent times each answer from the previous one.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import math
import os
import re
import sys
from collections.abc import Callable
from typing import Any

# The expression guard, loaded by path as this file is (the child imports nothing of grpo).
_GUARD_SPEC = importlib.util.spec_from_file_location(
    "_grpo_expr_guard", os.path.join(os.path.dirname(os.path.abspath(__file__)), "_expr_guard.py")
)
assert _GUARD_SPEC is not None and _GUARD_SPEC.loader is not None
_guard: Any = importlib.util.module_from_spec(_GUARD_SPEC)
_GUARD_SPEC.loader.exec_module(_guard)


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
    if importlib.util.find_spec("math_verify") is not None:
        _math_verify("1", "<think>.</think><answer>\\boxed{1}</answer>")
    _confine()
    print("ready", flush=True)
    for line in sys.stdin:
        op, a, b = json.loads(line)
        try:
            answer = (
                _ruler_eval(a) if op == "ruler" else _math_verify(a, b) if op == "mathverify" else _symbolic_equal(a, b)
            )
        except Exception:
            answer = False
        print(json.dumps(bool(answer)), flush=True)


def _parse_expr(text: str, **kwargs: Any) -> Any:
    """sympy's ``parse_expr`` (an ``eval``) on a string the guard accepts as mathematics, else ValueError."""
    from sympy.parsing.sympy_parser import parse_expr

    return parse_expr(_guard.check(text), **kwargs)


# Audit events the child never needs once warmed up: writing, deleting or renaming files, starting processes,
# sockets, native code (imports stay: sympy imports lazily). The hook cannot be removed (PEP 578), so code
# that got past the guard still cannot act.
_FORBIDDEN_EVENTS = frozenset(
    """os.system os.exec os.posix_spawn os.spawn os.fork os.forkpty os.startfile subprocess.Popen os.kill os.killpg
    os.remove os.rmdir os.rename os.replace os.mkdir os.symlink os.link os.chmod os.chown os.truncate os.utime
    os.putenv os.unsetenv os.chdir shutil.copyfile shutil.copymode shutil.copystat shutil.copytree shutil.move
    shutil.rmtree shutil.chown socket.__new__ socket.connect socket.bind socket.getaddrinfo ctypes.dlopen
    ctypes.dlsym ctypes.cdata ctypes.call_function ctypes.addressof pickle.find_class
    urllib.Request webbrowser.open sys.setprofile sys.settrace""".split()  # noqa: SIM905
)
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if event in _FORBIDDEN_EVENTS:
        raise PermissionError(f"the grader's sympy child may not {event}")
    if event == "open":
        mode, flags = (*args, None, 0)[1:3]
        if (isinstance(mode, str) and any(c in mode for c in "wax+")) or (int(flags or 0) & _WRITE_FLAGS):
            raise PermissionError("the grader's sympy child may not open files for writing")


def _confine() -> None:
    """Give the child no more than answering needs, where the platform allows it: no file writes (an audit
    hook and RLIMIT_FSIZE 0), no processes, sockets or native calls (the hook), no core dumps, and memory
    bounded (RLIMIT_AS: a huge power raises MemoryError instead of taking the machine's memory)."""
    sys.addaudithook(_audit)
    try:
        import resource
    except ImportError:  # not on Windows: the audit hook still holds
        return
    limits = [(resource.RLIMIT_FSIZE, 0), (resource.RLIMIT_CORE, 0)]
    try:
        with open("/proc/self/statm") as statm:
            pages = int(statm.read().split()[0])
        limits.append((resource.RLIMIT_AS, pages * os.sysconf("SC_PAGE_SIZE") + _MEMORY_HEADROOM))
    except OSError:
        pass
    for which, value in limits:
        try:
            _, hard = resource.getrlimit(which)
            value = value if hard == resource.RLIM_INFINITY else min(value, hard)
            resource.setrlimit(which, (value, hard if hard != resource.RLIM_INFINITY else value))
        except (ValueError, OSError):
            pass


_MEMORY_HEADROOM = 2 << 30  # above the warmed-up child's address space: simplify's working memory


def _ruler_eval(expr: str) -> bool:
    """mathruler's are_equal_under_sympy: parse with implicit multiplication, simplify, compare with 0."""
    from sympy import simplify
    from sympy.parsing import sympy_parser as sp

    parsed = _parse_expr(
        expr.replace("^", "**"), transformations=(*sp.standard_transformations, sp.implicit_multiplication_application)
    )
    return bool(simplify(parsed) == 0)


@functools.lru_cache(maxsize=1)
def _math_verify_metric() -> Callable[..., Any]:
    """MindSpeed-RL's math_verify_reward metric, with the parse_expr that math_verify and latex2sympy2_extended
    imported replaced by the guarded one (they call sympy's ``parse_expr`` on text taken from the response)."""
    import latex2sympy2_extended.latex2sympy2 as l2s  # type: ignore[import-not-found, unused-ignore]
    import math_verify.parser as mv_parser  # type: ignore[import-not-found, unused-ignore]
    from math_verify.metric import math_metric  # type: ignore[import-not-found, unused-ignore]
    from math_verify.parser import ExprExtractionConfig, LatexExtractionConfig  # type: ignore[import-not-found, unused-ignore]

    mv_parser.parse_expr = l2s.parse_expr = _parse_expr
    return math_metric(  # type: ignore[no-any-return, unused-ignore]
        gold_extraction_target=(LatexExtractionConfig(),),
        pred_extraction_target=(ExprExtractionConfig(), LatexExtractionConfig()),
    )


def _math_verify(label: str, text: str) -> bool:
    """math_verify's score of ``text`` against the boxed ``label`` (1.0 or 0.0 there)."""
    score, _ = _math_verify_metric()(["\\boxed{" + label + "}"], [text])
    return bool(score)


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
    return _parse_expr(s, transformations=transformations)


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

    def parse(s: str) -> Any:
        for fn in (_parse_expr, parse_latex, _latex_to_sympy) if _antlr_411() else (_parse_expr, _latex_to_sympy):
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
