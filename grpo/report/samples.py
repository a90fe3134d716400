"""What the model says: the prompts and responses a trial wrote at its held-out evaluations.

The engine appends a few held-out prompts with their responses to each seed's ``samples.jsonl`` at
iteration 0 (the base policy) and at every evaluation, one JSON object per line::

    {"iteration": 40, "kind": "greedy" | "sampled", "prompt": "...", "label": "...", "response": "...",
     "reward": 1.0, "correct": true}

``trial_samples(directory)`` reads the first seed that wrote any (``runs/seed<k>/``, ``seed<k>/`` or the
trial dir itself) and keeps the first and the last evaluation, at most ``PER_KIND`` prompts of each kind:
enough to see format hacking with one's own eyes, small enough for a page of many trials. A line that
is not such an object (cut off by a kill) is skipped.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path

from grpo._fs import SAMPLES_FILE, read_jsonl

PER_KIND = 3
KINDS = ("greedy", "sampled")


@dataclass(frozen=True)
class Sample:
    iteration: int
    kind: str
    prompt: str
    label: str
    response: str
    reward: float | None
    correct: bool | None


def samples_file(directory: Path) -> Path | None:
    """The first seed's ``samples.jsonl`` in a trial dir (lowest seed index first), or None."""
    candidates = [directory / SAMPLES_FILE]
    for pattern in ("runs/seed*", "seed*"):
        found = [p for p in directory.glob(pattern) if p.is_dir()]
        candidates.extend(p / SAMPLES_FILE for p in sorted(found, key=_seed_index))
    return next((p for p in candidates if p.is_file()), None)


def _seed_index(path: Path) -> tuple[int, str]:
    match = re.fullmatch(r"seed(\d+)", path.name)
    return (int(match.group(1)) if match else 1 << 30, path.name)


def read_samples(path: Path) -> list[Sample]:
    out = []
    for row in read_jsonl(path):
        iteration = row.get("iteration")
        if not isinstance(iteration, int) or isinstance(iteration, bool):
            continue
        reward = row.get("reward")
        correct = row.get("correct")
        out.append(
            Sample(
                iteration=iteration,
                kind=str(row.get("kind", "")),
                prompt=str(row.get("prompt", "")),
                label=str(row.get("label", "")),
                response=str(row.get("response", "")),
                reward=float(reward)
                if isinstance(reward, (int, float)) and not isinstance(reward, bool) and math.isfinite(reward)
                else None,
                correct=correct if isinstance(correct, bool) else None,
            )
        )
    return out


def first_and_last(samples: list[Sample], per_kind: int = PER_KIND) -> dict[int, list[Sample]]:
    """The first and last evaluation's samples (iteration -> samples, at most ``per_kind`` per kind)."""
    if not samples:
        return {}
    iterations = sorted({s.iteration for s in samples})
    out: dict[int, list[Sample]] = {}
    for iteration in dict.fromkeys((iterations[0], iterations[-1])):
        rows = [s for s in samples if s.iteration == iteration]
        kinds = [k for k in KINDS if any(s.kind == k for s in rows)] + sorted({s.kind for s in rows} - set(KINDS))
        out[iteration] = [s for kind in kinds for s in [r for r in rows if r.kind == kind][:per_kind]]
    return out


def trial_samples(directory: Path | None) -> dict[int, list[Sample]]:
    """``first_and_last`` of the first seed that wrote samples in ``directory`` ({} when none did)."""
    if directory is None:
        return {}
    path = samples_file(directory)
    return first_and_last(read_samples(path)) if path is not None else {}
