"""Model output never runs as code: every verifier, on both the response and the label side, meets a corpus of
injection attempts (code, attribute walks, format strings, Unicode look-alikes, huge powers, deep nesting) and
nothing is executed, nothing written, nothing hangs, and each scores as wrong.

The hole this closes: sympy's ``parse_expr`` is ``eval`` (sympy's docs say so: "this function uses eval"), and
MindSpeed-RL's math_eval_toolkit and mathruler hand it the policy's boxed answer; before the guard a response
boxing ``exec(...)`` created a file when ``VERIFIERS["acc"]`` scored it.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import time
from pathlib import Path

import pytest

from grpo.engine import rewards
from grpo.engine.rewards import _expr_guard

CHILD = Path(rewards.__file__).with_name("_sympy_child.py")


def _payloads(marker: Path) -> list[str]:
    write = f"open('{marker}','w').write('x')"
    return [
        f'exec("{write}")',
        f"exec(chr(111)+chr(112))+{write}",
        write,
        f"__import__('os').system('touch {marker}')",
        "().__class__.__base__.__subclasses__()",
        "x.__class__",
        "S.__class__",
        "(lambda: 1)()",
        "[c for c in ().__class__.__mro__]",
        "'{0.__class__}'.format(1)",
        'f"{1}"',
        "getattr(x, 'y')",
        "eval(chr(49))",
        "ｅｘｅｃ(chr(49))",  # NFKC folds fullwidth letters into "exec"
        "exec chr 49",  # implicit application in mathruler's transformations
        "sympify(chr(49))",
        "Symbol(chr(49))",
        "9**9**9**9",
        "2**2**40",
        "10**" + "9" * 500,
        "(" * 5000 + "1" + ")" * 5000,
        "{" * 300 + "}" * 300,
        "1; import os",
        "x := 1",
        "\\frac{exec(1)}{2}",
        "\\sqrt{__import__}",
    ]


def _responses(payload: str) -> list[str]:
    return [
        f"<think>a</think><answer>\\boxed{{{payload}}}</answer>",
        f"<think>a</think>\n<answer>The answer is \\boxed{{{payload}}}</answer>",
        f"Answer: {payload}",
        f"the answer is {payload}",
    ]


@pytest.mark.parametrize("name", sorted(rewards.VERIFIERS))
def test_no_verifier_runs_model_output(name, tmp_path):
    marker = tmp_path / "pwned"
    verifier = rewards.VERIFIERS[name]
    best = {"acc": 1.0, "strict_format": 1.0, "format": 1.0, "step": 1.0}
    for payload in _payloads(marker):
        for response in _responses(payload):
            for text, label in ((response, "2"), ("<think>a</think><answer>\\boxed{2}</answer>", payload)):
                start = time.monotonic()
                score = verifier(text, label)
                # a grader's time bound is 1 s (10 s for math_verify); the corpus must not hang one
                assert time.monotonic() - start < 15, (name, payload)
                assert not marker.exists(), f"{name} executed {payload!r}"
                if name not in ("strict_format", "format", "step"):  # format scores judge the layout only
                    assert score < best.get(name, 1.0), (name, payload, score)


@pytest.mark.parametrize(
    "text",
    ["exec(1)", "x.y", "__import__", "'a'", "lambda", "ｅ", "1;2", "a:b", "x@y", "(" * 30 + ")" * 30, "9" * 401],
)
def test_the_guard_refuses_what_is_not_mathematics(text):
    assert _expr_guard.refusal(text) is not None
    with pytest.raises(ValueError, match="not a mathematical expression"):
        _expr_guard.check(text)


@pytest.mark.parametrize(
    "text",
    ["(1/2)-(0.5)", "((sqrt(8))-(2*sqrt(2)))", "x**2+3*x-1", "2x", "a_n+x_1", "pi*r**2", "[1, 2]", "{1, 2}",
     "Matrix([[1,2],[3,4]])", "5!", "x>=1", "1e-3", "Abs(-3)", "log(E)"],
)  # fmt: skip
def test_the_guard_accepts_mathematics(text):
    assert _expr_guard.refusal(text) is None


def _confined_child(code: str) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a process confined as the sympy child confines itself (``_confine``), so what code that
    got past the guard could still do is tested on its own."""
    prelude = (
        "import importlib.util as u, sys; s = u.spec_from_file_location('c', sys.argv[1]); "
        "m = u.module_from_spec(s); s.loader.exec_module(m); import sympy; m._confine()\n"
    )
    return subprocess.run(
        [sys.executable, "-c", prelude + code, str(CHILD)], capture_output=True, text=True, timeout=120
    )


def test_the_child_may_not_write_spawn_or_connect(tmp_path):
    marker = tmp_path / "written"
    attempts = {
        "open for writing": f"open({str(marker)!r}, 'w')",
        "os.open with O_CREAT": f"import os; os.open({str(marker)!r}, os.O_CREAT | os.O_WRONLY)",
        "a process": "import subprocess; subprocess.run(['true'])",
        "os.system": "import os; os.system('true')",
        "a socket": "import socket; socket.socket()",
        "a rename": f"import os; os.rename({str(CHILD)!r}, {str(marker)!r})",
    }
    for what, code in attempts.items():
        done = _confined_child(f"try:\n    {code}\nexcept PermissionError:\n    print('refused')\n")
        assert done.stdout.strip() == "refused", (what, done.stdout, done.stderr)
    assert not marker.exists()
    # reading still works: sympy is imported before the child confines itself, its submodules lazily after
    assert _confined_child("import sympy.physics.units; print('read')").stdout.strip() == "read"


def test_the_child_memory_is_bounded():
    done = _confined_child("try:\n    b = bytearray(64 << 30)\nexcept MemoryError:\n    print('bounded')\n")
    assert done.stdout.strip() == "bounded", done.stderr


@pytest.mark.skipif(importlib.util.find_spec("math_verify") is None, reason="the math-verify package is not installed")
def test_math_verify_runs_in_the_confined_child(tmp_path):
    marker = tmp_path / "pwned"
    text = f"<think>a</think><answer>\\boxed{{2}} and exec(\"open('{marker}','w')\")</answer>"
    rewards.VERIFIERS["math_verify_reward"](text, "3")
    assert not marker.exists()
