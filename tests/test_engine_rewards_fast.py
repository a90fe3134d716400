"""The rewards' fast paths and batched sympy give exactly the full path's scores (issue 26).

The full path is the graders as MindSpeed-RL runs them (``rule_verifier.verifier()`` calling math_eval_toolkit's
``math_equal`` and mathruler's ``grade_answer``, see tests/test_engine_rewards.py): every response on its own,
every sympy question sent to the child. The fast path (``grpo.engine.rewards._fast``) skips strip_string's unit
loop when no unit pattern matches, compares canonical integers without sympy and remembers sympy's answers, and
``rewards.score`` sends a batch's questions to the child in one round trip. Compared here on the parity table and
on a few thousand generated responses.
"""

import random
import time
from pathlib import Path

import pytest
import yaml

from grpo.engine import rewards
from grpo.engine.rewards import _fast, _sympy, math_eval, mathruler

TABLE = yaml.safe_load((Path(__file__).parent / "data" / "reward_parity.yaml").read_text())
SCORED = [name for name in rewards.VERIFIERS if name != "math_verify_reward"]

# The shapes a policy writes around an answer, and answers from plain integers to LaTeX, units and words.
_WRAPS = (
    "<think>{w}</think><answer>\\boxed{{{a}}}</answer>",
    "<think>{w}</think> <answer>so \\boxed{{{a}}}</answer>",
    "<think>{w}</think><answer>{a}</answer>",
    "{w} The answer is {a}.",
    "<|im_start|>assistant\n<think>{w}</think><answer>\\boxed{{{a}}}</answer><|im_end|>\\boxed{{1}}",
    "<think>{w}</think><answer>\\boxed{{{a}}}</answer>\nAnswer: {a}",
    "Step 1: {w}\nStep 2: add\n\\boxed{{{a}}}",
    "<think>{w}</think><answer>\\boxed{{{a}",
    "{w}",
)
_UNIT_WORDS = ("cm", "m", "s", "apples", "degrees", "hours", "a .", "mph", "inch", "t", "rs .", "sq m")


def _answer(rng: random.Random, label: int) -> str:
    n = label + rng.choice((0, 0, 0, 1, -1, 10, -10, 100))
    return rng.choice(
        (
            str(n),
            str(n),
            f"0{n}",
            f"{n}.0",
            f"{n}.50",
            f"-{n}",
            f"{n:,}",
            f"{n} {rng.choice(_UNIT_WORDS)}",
            f"{n}\\text{{ {rng.choice(_UNIT_WORDS)}}}",
            f"\\frac{{{2 * n}}}{{2}}",
            f"{2 * n}/2",
            f"\\dfrac{n}{rng.randint(1, 9)}",
            f"x={n}",
            f"${n}$",
            f"{n}\\%",
            f"{n}^\\circ",
            f"{n // 2}+{n - n // 2}",
            f"\\sqrt{{{n * n}}}",
            f"({n}, {n + 1})",
            "eighty-five",
            "two hundred",
            "",
            " ",
            "".join(rng.choice("0123456789+=-*/.<>{}abcxyz \\") for _ in range(rng.randint(1, 12))),
        )
    )


def _responses(count: int, seed: int = 0) -> tuple[list[str], list[str]]:
    rng = random.Random(seed)
    texts, labels = [], []
    for _ in range(count):
        label = rng.randint(10, 198)
        work = f"{label // 10}+{label % 10}={label}" if rng.random() < 0.5 else "".join(rng.sample("0123456789+=", 6))
        texts.append(rng.choice(_WRAPS).format(w=work, a=_answer(rng, label)))
        labels.append(rng.choice((str(label), str(label), f"{label}.0", f"\\frac{{{2 * label}}}{{2}}", "0.5")))
    return texts, labels


def _full_path(texts: list[str], labels: list[str], monkeypatch) -> dict[str, list[float]]:
    """Every verifier on every response on its own, fast paths off, nothing remembered."""
    monkeypatch.setattr(_fast, "ENABLED", False)
    _sympy._CACHE.clear()
    try:
        return {name: [rewards.VERIFIERS[name](t, lb) for t, lb in zip(texts, labels, strict=True)] for name in SCORED}
    finally:
        monkeypatch.setattr(_fast, "ENABLED", True)


@pytest.fixture
def generous_budget(monkeypatch):
    # Equal scores are the point here, not the 1 s bound: on a loaded machine a 1 s bound decides by speed
    # (4 s: the table's one hanging case runs out twice, full path and fast path).
    monkeypatch.setattr(_sympy, "SYMPY_SECONDS", 4.0)


def test_fast_batched_scores_equal_the_full_path_on_the_parity_table(generous_budget, monkeypatch):
    texts = [case["response"] for case in TABLE["cases"]]
    labels = [str(case["label"]) for case in TABLE["cases"]]
    full = _full_path(texts, labels, monkeypatch)
    _, fast = rewards.score(texts, labels, SCORED, [1.0] * len(SCORED))
    assert fast == full
    for name in SCORED:  # and both are MindSpeed-RL's
        assert fast[name] == pytest.approx([case["scores"][name] for case in TABLE["cases"]]), name


def test_fast_batched_scores_equal_the_full_path_on_generated_responses(generous_budget, monkeypatch):
    texts, labels = _responses(2000)
    full = _full_path(texts, labels, monkeypatch)
    _sympy._CACHE.clear()
    _, fast = rewards.score(texts, labels, SCORED, [1.0] * len(SCORED))
    for name in SCORED:
        differ = [(t, lb, f, s) for t, lb, f, s in zip(texts, labels, full[name], fast[name], strict=True) if f != s]
        assert not differ, f"{name}: {len(differ)} differ, e.g. {differ[:3]}"
    # the generator reaches every branch the fast paths decide
    assert len({s for scores in full.values() for s in scores}) >= 5
    assert sum(s == -0.5 for s in full["acc"]) > 100 and sum(s == 1.0 for s in full["math_17k_acc"]) > 50


def test_the_unit_loop_shortcut_leaves_every_string_as_the_loop_does(monkeypatch):
    rng = random.Random(1)
    words = [*(u.strip() for u in math_eval._UNITS[::3]), "85", "3.5", "x", "-", ".", "(", "\\text{", "°"]
    strings = [" ".join(rng.choice(words) for _ in range(rng.randint(1, 5))) for _ in range(1500)]
    strings += [_answer(rng, rng.randint(10, 198)) for _ in range(1000)]
    fast = [math_eval.strip_string(s) for s in strings]
    monkeypatch.setattr(_fast, "ENABLED", False)
    assert [math_eval.strip_string(s) for s in strings] == fast
    assert sum(math_eval._ANY_UNIT.search(s) is None for s in strings) > 500  # the shortcut is taken


def test_integers_compare_as_sympy_compares_them(generous_budget, monkeypatch):
    """mathruler's are_equal_under_sympy on "(t)-(g)" against the fast path's t == g."""
    rng = random.Random(2)
    pairs = [("0", "0"), ("0", "-1"), ("-5", "-5"), ("12345678901234567890123", "12345678901234567890124")]
    for _ in range(300):
        a = rng.choice((rng.randint(-200, 200), rng.randint(-(10**30), 10**30)))
        pairs.append((str(a), str(rng.choice((a, a + 1, -a, a * 10)))))
    assert all(mathruler._INTEGER.fullmatch(t) and mathruler._INTEGER.fullmatch(g) for t, g in pairs)
    fast = [mathruler._ruler_sympy_equal(t, g, _sympy.Budget()) for t, g in pairs]
    monkeypatch.setattr(_fast, "ENABLED", False)
    _sympy._CACHE.clear()
    assert [mathruler._ruler_sympy_equal(t, g, _sympy.Budget()) for t, g in pairs] == fast
    assert any(fast) and not all(fast)


def test_a_batch_goes_to_the_sympy_child_in_one_round_trip(monkeypatch):
    asked: list[int] = []
    ask_many = _sympy._Child.ask_many

    def counting(self, questions):
        asked.append(len(questions))
        return ask_many(self, questions)

    monkeypatch.setattr(_sympy._Child, "ask_many", counting)
    _sympy._CACHE.clear()
    texts = [f"<think>a</think><answer>\\boxed{{\\frac{{{k}}}{{4}}}}</answer>" for k in range(1, 201)]
    labels = [str(k / 4) for k in range(1, 201)]
    _, per = rewards.score(texts, labels, ["acc", "math_17k_acc"], [1.0, 1.0])
    assert per["acc"] == [1.0] * 200 and sum(per["math_17k_acc"]) > 100
    assert len(asked) == 1 and asked[0] > 200  # both verifiers' questions at once
    rewards.score(texts, labels, ["acc", "math_17k_acc"], [1.0, 1.0])
    assert len(asked) == 1  # answered before: remembered


def test_a_hanging_question_in_a_batch_scores_zero_and_the_rest_are_answered():
    rewards.acc("<answer>\\boxed{85}</answer>", "85")
    _sympy._CACHE.clear()
    texts = [
        "<answer>\\boxed{\\frac{1}{2}}</answer>",
        "<answer>\\boxed{9^{9^{9^{9}}}}</answer>",
        "<answer>\\boxed{\\frac{3}{4}}</answer>",
        "<answer>\\boxed{\\frac{1}{3}}</answer>",
    ]
    start = time.monotonic()
    _, per = rewards.score(texts, ["0.5", "1", "0.75", "0.5"], ["acc"], [1.0])
    assert per["acc"] == [1.0, 0.0, 1.0, -0.5]  # acc_subprocess's timeout scores 0.0
    assert time.monotonic() - start < 30  # 1 s for the hang, then a fresh child (importing sympy, loaded machine)


def test_importing_the_rewards_starts_nothing_and_scoring_starts_the_child_in_the_background():
    import subprocess
    import sys

    code = (
        "import atexit, sys; before = atexit._ncallbacks(); import grpo.engine.rewards as r; "
        "from grpo.engine.rewards import _sympy; "
        "print(atexit._ncallbacks() - before, _sympy._CHILD is None, 'math_verify' in sys.modules, "
        "'sympy' in sys.modules); "
        "r.score(['<answer>\\\\boxed{85}</answer>'], ['85'], ['strict_format', 'format'], [1.0, 1.0]); "
        "print(_sympy._STARTER is None); "
        "r.score(['<answer>\\\\boxed{85}</answer>'], ['85'], ['acc'], [1.0]); "  # no question: a number
        "_sympy._STARTER.join(120); print(_sympy._CHILD.proc.poll() is None)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["0", "True", "False", "False", "True", "True"]
