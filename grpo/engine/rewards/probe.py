"""``validate``'s look at a user's reward functions, in a child process: a file that fails to import, exits,
hangs or crashes the interpreter costs one line, never the command.

    problems, lines = probe(refs, wheres, examples)   # refs absolute; wheres: "<spec>: rl_config.verifier_function[i]"

The child imports each function (``custom.load_user_reward``: its form and signature) and scores the first
``RECORDS`` examples with a completion that answers each one's label (``\\boxed{label}``), as a trial would
call it; what it returns is shown, an exception or a non-number is a problem line naming the function.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Sequence
from typing import Any

from grpo.engine.datasets import Example
from grpo.errors import UserCodeError, UserError, first_line

RECORDS = 3
SECONDS = 120.0  # importing a user's module may load a package of theirs (sympy, math_verify ...)


def _completion(label: str) -> str:
    return f"<think>...</think><answer>\\boxed{{{label}}}</answer>"


def _row(e: Example) -> dict[str, Any]:
    return {
        "prompt": e.prompt,
        "label": e.label,
        "messages": list(e.messages) if e.messages else None,
        "extra": e.extra,
    }


def _child(request: dict[str, Any]) -> dict[str, list[str]]:
    from grpo.engine.rewards.custom import load_user_reward

    problems: list[str] = []
    lines: list[str] = []
    rows = request["rows"]
    for ref, where in zip(request["refs"], request["wheres"], strict=True):
        try:
            reward = load_user_reward(ref, where=where)
        except UserError as err:
            problems.append(str(err))
            continue
        if not rows:
            lines.append(f"reward {reward.name} ({reward.form} form): imported")
            continue
        try:
            values, metrics = reward.score(
                [r["messages"] or r["prompt"] for r in rows],
                [_completion(r["label"]) for r in rows],
                [r["label"] for r in rows],
                [r["extra"] for r in rows],
            )
        except UserCodeError as err:
            problems.append(f"{where}: scoring the first {len(rows)} records: {err}")
            continue
        shown = ", ".join("None" if v is None else f"{v:g}" for v in values)
        more = f"; also {', '.join(sorted(metrics))}" if metrics else ""
        lines.append(f"reward {reward.name} ({reward.form} form): [{shown}] on the first {len(rows)} records{more}")
    return {"problems": problems, "lines": lines}


def probe(refs: Sequence[str], wheres: Sequence[str], examples: Sequence[Example]) -> tuple[list[str], list[str]]:
    """(problem lines, what each function returned) for ``refs`` scored on the first examples, in a child."""
    if not refs:
        return [], []
    request = {"refs": list(refs), "wheres": list(wheres), "rows": [_row(e) for e in examples[:RECORDS]]}
    code = "import json, sys; "
    code += "from grpo.engine.rewards.probe import _child; print(json.dumps(_child(json.load(sys.stdin))))"
    try:
        done = subprocess.run(
            [sys.executable, "-c", code],
            input=json.dumps(request, default=str),
            capture_output=True,
            text=True,
            timeout=SECONDS,
        )
    except subprocess.TimeoutExpired:
        return [f"{wheres[0]}: importing and scoring the reward functions took over {SECONDS:g} s"], []
    out = done.stdout.strip().splitlines()
    try:
        answer = json.loads(out[-1]) if done.returncode == 0 and out else None
    except json.JSONDecodeError:
        answer = None
    if not isinstance(answer, dict):  # the user's module exited or crashed the interpreter at import
        why = first_line(done.stderr.strip().splitlines()[-1] if done.stderr.strip() else f"exit {done.returncode}")
        return [f"{wheres[0]}: {refs[0]}: importing the reward functions ended the process ({why})"], []
    return list(answer["problems"]), list(answer["lines"])
