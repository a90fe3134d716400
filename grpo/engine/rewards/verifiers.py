"""The verifiers of MindSpeed-RL's ``verifier()`` table (``mindspeed_rl/models/rule_verifier.py``), registered by
name, and ``score``, their weighted sum over a batch (see the package docstring for each one's rule)."""

from __future__ import annotations

import functools
import importlib.util
import math
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from grpo.engine.rewards import _sympy
from grpo.engine.rewards._registry import VERIFIERS, Verifier, optional_verifier, verifier
from grpo.engine.rewards.custom import cached_user_reward, is_user_ref, trainer_state
from grpo.engine.rewards.dapo import _minerva_normal
from grpo.engine.rewards.math_eval import Symbolic, extract_math_answer, math_equal
from grpo.engine.rewards.mathruler import boxed_content, grade_answer

TAGS = ("<think>", "</think>", "<answer>", "</answer>")
_BOXED = re.compile(r"\\boxed\{.*?\}")
_FORMAT = re.compile(r"^<think>.*?</think>\s*<answer>.*?</answer>$", re.DOTALL | re.MULTILINE)
_BASE_ACC_FORMAT = re.compile(r"<think>.*</think>.*<answer>.*\\boxed\{.*\}.*</answer>", re.DOTALL)
_STEP = re.compile(r"(Step \d+:|^\d+\.|\n-|\n\*|First,|Second,|Next,|Finally,)")
_STOP_WORDS = ("</s>", "<|im_end|>", "<|endoftext|>")
# math_verify bounds itself (5 s to parse, 2 s to compare); MindSpeed-RL adds no bound of its own.
MATH_VERIFY_SECONDS = 10.0
MATH_VERIFY_MISSING = "math_verify_reward needs the math-verify package: pip install math-verify"


@verifier("acc", sympy=True)
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
        score = 1.0 if math_equal(answer, label, _bounded_symbolic(_sympy.Budget())) else -0.5
    except _sympy.OutOfTime:
        return 0.0
    return score if "boxed" in text else -1.0


def _bounded_symbolic(budget: _sympy.Budget) -> Symbolic:
    return lambda a, b: _sympy.ask("msrl", a, b, budget)


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


@verifier("strict_format")
def strict_format(text: str, label: str = "") -> float:
    return 1.0 if valid_structure(text) else -0.5


@verifier("format")
def format_(text: str, label: str = "") -> float:
    return 1.0 if _FORMAT.match(text) else 0.0


@verifier("base_acc", sympy=True)
def base_acc(text: str, label: str) -> float:
    if not _BASE_ACC_FORMAT.fullmatch(text):
        return 0.0
    return 1.0 if grade_answer(boxed_content(text), label, _sympy.Budget()) else 0.0


# ppo_accuracy_reward -> math_acc_reward: the same mathruler check
@verifier("math_17k_acc", "acc_for_ppo", sympy=True)
def math_17k_acc(text: str, label: str) -> float:
    return 1.0 if grade_answer(boxed_content(text), label, _sympy.Budget()) else 0.0


@verifier("acc_for_dapo")
def acc_for_dapo(text: str, label: str) -> float:
    lines = re.findall(r"(?i)Answer\s*:\s*([^\n]+)", text[-300:])
    prediction = _minerva_normal(lines[-1] if lines else "[INVALID]")
    return 1.0 if prediction == _minerva_normal(label) else -1.0


@verifier("step")
def step(text: str, label: str = "") -> float:
    return min(1.0, len(_STEP.findall(text)) / 3)


@optional_verifier("math_verify_reward")
def _math_verify_reward() -> Verifier | None:
    """MindSpeed-RL's math_verify_reward, when the optional ``math_verify`` package is installed. It parses the
    response with sympy, so it runs in the confined sympy child behind the expression guard, like ``acc``."""
    if importlib.util.find_spec("math_verify") is None:
        return None
    VERIFIERS.sympy_users.add("math_verify_reward")

    def math_verify_reward(text: str, label: str) -> float:
        if not _BASE_ACC_FORMAT.fullmatch(text):
            return 0.0
        try:
            return 1.0 if _sympy.ask("mathverify", label, text, _sympy.Budget(MATH_VERIFY_SECONDS)) else 0.0
        except _sympy.OutOfTime:
            return 0.0

    return math_verify_reward


def score(
    texts: list[str],
    labels: list[str],
    names: Sequence[str],
    weights: Sequence[float],
    *,
    prompts: Sequence[Any] | None = None,
    extras: Sequence[Mapping[str, Any]] | None = None,
    completion_ids: Sequence[Sequence[int]] | None = None,
    progress: tuple[int, int] | None = None,
) -> tuple[list[float], dict[str, list[float]]]:
    """Total reward per response and each verifier's scores (MindSpeed-RL's ``verifier``). Every verifier's
    sympy questions for the whole batch go to the child together (``_sympy.batched``).

    A name may be a user reward (``file.py:function``, ``custom.py``): it is called once for the batch with
    ``prompts`` (each record's prompt as given: text or chat messages), ``extras`` (each row's dataset columns),
    ``completion_ids`` (the responses' token ids) and, from ``progress`` (optimizer steps done, steps in the run),
    a TRL ``trainer_state``; its scores are under its function's name, NaN where it returned None (left out of
    that response's total), and a dict's other numeric keys under ``<name>/<key>``."""
    unknown = [n for n in names if n not in VERIFIERS and not is_user_ref(n)]
    if unknown:  # the schema rejects these first; never skip a verifier silently
        raise ValueError(f"unknown verifier_function {unknown}; known: {sorted(VERIFIERS)}")
    builtin = [n for n in names if not is_user_ref(n)]
    if any(name in VERIFIERS.sympy_users for name in builtin):
        _sympy.start_soon()
    calls: list[Callable[[], float]] = [
        functools.partial(VERIFIERS[name], text, label)
        for name in builtin
        for text, label in zip(texts, labels, strict=True)
    ]
    flat = _sympy.batched(calls)
    totals = [0.0] * len(texts)
    per: dict[str, list[float]] = {}
    metrics: dict[str, list[float]] = {}
    k = 0
    for name, weight in zip(names, weights, strict=True):
        if is_user_ref(name):
            reward = cached_user_reward(name)
            values, more = reward.score(
                prompts if prompts is not None else texts_as_prompts(texts),
                texts,
                labels,
                extras if extras is not None else [{} for _ in texts],
                completion_ids,
                **({"trainer_state": trainer_state(*progress)} if progress and reward.form == "trl" else {}),
            )
            scores = [math.nan if v is None else v for v in values]
            per[reward.name] = scores
            metrics.update(more)
        else:
            scores = flat[k * len(texts) : (k + 1) * len(texts)]
            per[name] = scores
            k += 1
        totals = [a if math.isnan(s) else a + weight * s for a, s in zip(totals, scores, strict=True)]
    return totals, {**per, **metrics}


def texts_as_prompts(texts: Sequence[str]) -> list[str]:
    """Empty prompts where a caller has none (a user reward still gets its ``prompts`` argument)."""
    return ["" for _ in texts]


def reward_means(per: Mapping[str, Sequence[float]]) -> dict[str, float]:
    """The metrics of ``score``'s per-verifier lists: ``<name>_rewards/mean`` for each verifier or user function
    over the responses it scored (NaN = not applicable), and a user dict's ``<name>/<key>`` means as they are."""
    out: dict[str, float] = {}
    for name, values in per.items():
        kept = [v for v in values if not math.isnan(v)]
        out[name if "/" in name else f"{name}_rewards/mean"] = sum(kept) / len(kept) if kept else math.nan
    return out
