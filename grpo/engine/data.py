"""Prompts and labels: the generated verifiable task, user jsonl/parquet datasets, and the data order.

A dataset is a list of ``Example(prompt, label)``; on disk it is MindSpeed-style jsonl, one
``{"prompt": ..., "label": ...}`` object per line (``labels`` and ``answer`` are accepted for the label,
``problem`` and ``question`` for the prompt; parquet files use the same columns).

``engine.task`` picks where the data comes from:

- ``arithmetic`` (the CPU default): two-number addition written as a chat question, ``"47+38=?"``,
  label ``"85"``. The expected answer format is ``<think>7+8=15</think><answer>\\boxed{85}</answer>``
  (the units column in the think part, the sum boxed). ``task_size`` training prompts and a disjoint
  evaluation set come from the seed; the training set is written to ``megatron_training.data_path``
  (``<data_path>.jsonl``, or the path itself when it ends in ``.jsonl``; a relative path lands inside the
  run directory so parallel trials never share one file).
- ``dataset``: read ``megatron_training.data_path`` (a file, a folder of ``*.jsonl``/``*.parquet``, or a
  MindSpeed prefix with ``.jsonl``/``.parquet`` appended; relative to the working directory).

The order of prompts is a fresh seeded permutation per pass over the data (``no_shuffle`` keeps file
order), a pure function of (seed, samples consumed): resuming at an iteration reproduces the batches.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from grpo._fs import atomic_write_text
from grpo.errors import UserError

PROMPT_KEYS = ("prompt", "problem", "question")
LABEL_KEYS = ("label", "labels", "answer")


@dataclass(frozen=True)
class Example:
    prompt: str
    label: str


# ------------------------------------------------------------------------------ the generated task
class ArithmeticTask:
    """a+b with two-digit operands; the demonstration shows the units column, then the boxed sum."""

    name = "arithmetic"
    low, high = 10, 99
    demo_pool = 2000  # warm-start demonstrations, disjoint from every RL prompt

    @classmethod
    def distinct_prompts(cls) -> int:
        """How many different prompts the task has (every operand pair)."""
        return (cls.high - cls.low + 1) ** 2

    def examples(
        self, count: int, seed: int, exclude: set[tuple[int, int]] | frozenset[tuple[int, int]] = frozenset()
    ) -> list[Example]:
        rng = random.Random(seed)
        space = self.distinct_prompts() - len(exclude)
        if count > space:
            raise UserError(
                f"engine.task_size: at most {space} distinct arithmetic prompts are left after the "
                f"warm-start demonstrations and the evaluation set (got {count})"
            )
        seen: set[tuple[int, int]] = set()
        out: list[Example] = []
        while len(out) < count:
            pair = (rng.randint(self.low, self.high), rng.randint(self.low, self.high))
            if pair in seen or pair in exclude:
                continue
            seen.add(pair)
            out.append(Example(f"{pair[0]}+{pair[1]}=?", str(pair[0] + pair[1])))
        return out

    @staticmethod
    def operands(example: Example) -> tuple[int, int]:
        a, b = example.prompt.rstrip("=?").split("+")
        return int(a), int(b)

    def demonstration(self, example: Example) -> str:
        a, b = self.operands(example)
        units = f"{a % 10}+{b % 10}={a % 10 + b % 10}"
        return f"<think>{units}</think><answer>\\boxed{{{a + b}}}</answer>"

    def demonstrations(self, seed: int) -> list[Example]:
        """The warm start's examples: the same for every task_size, so trials share one warm start."""
        return self.examples(self.demo_pool, seed)

    def split(self, task_size: int, eval_size: int, seed: int) -> tuple[list[Example], list[Example]]:
        """Training prompts and a held-out set from ``seed``, disjoint from each other and from the demos."""
        used = {self.operands(e) for e in self.demonstrations(seed)}
        train = self.examples(task_size, seed + 1, exclude=used)
        used |= {self.operands(e) for e in train}
        held_out = self.examples(eval_size, seed + 2, exclude=used) if eval_size else []
        return train, held_out


def get_task(name: str) -> ArithmeticTask:
    if name == "arithmetic":
        return ArithmeticTask()
    raise UserError(
        f"engine.task: unknown generated task {name!r} (known: arithmetic, or 'dataset' to read "
        f"megatron_training.data_path)"
    )


# ------------------------------------------------------------------------------------ files
def generated_data_file(data_path: str | None, run_dir: Path) -> Path:
    """Where a generated task's jsonl is written (see the module docstring)."""
    path = Path(data_path or "dataset/data").expanduser()
    if not path.is_absolute():
        path = Path(run_dir) / path
    return path if path.suffix == ".jsonl" else path.with_name(path.name + ".jsonl")


def write_jsonl(examples: list[Example], path: Path) -> None:
    """One ``{"prompt", "label"}`` line per example; atomic (a reader never sees half a file)."""
    atomic_write_text(path, "".join(json.dumps({"prompt": e.prompt, "label": e.label}) + "\n" for e in examples))


def _dataset_files(data_path: str) -> list[Path]:
    path = Path(data_path).expanduser()
    if path.is_file():
        return [path]
    if path.is_dir():
        files = sorted([*path.glob("*.jsonl"), *path.glob("*.parquet"), *path.glob("*.json")])
        if files:
            return files
        raise UserError(f"{path}: megatron_training.data_path: folder has no *.jsonl, *.parquet or *.json file")
    for suffix in (".jsonl", ".parquet", ".json"):
        candidate = path.with_name(path.name + suffix)
        if candidate.is_file():
            return [candidate]
    raise UserError(
        f"{path}: megatron_training.data_path: no such dataset (also looked for {path.name}.jsonl, "
        f"{path.name}.parquet, {path.name}.json)"
    )


def _pick(record: dict, keys: tuple[str, ...], file: Path, where: str, what: str) -> str:
    for k in keys:
        if k in record and record[k] is not None:
            value = record[k]
            if isinstance(value, list):  # MindSpeed's labels may be a one-element list
                value = value[0] if value else ""
            return str(value)
    raise UserError(
        f"{file}:{where}: megatron_training.data_path: record has no {what} field (expected one of {', '.join(keys)})"
    )


def read_dataset(data_path: str) -> list[Example]:
    """Every example of a user dataset; UserError naming the file for any problem."""
    out: list[Example] = []
    for file in _dataset_files(data_path):
        if file.suffix == ".parquet":
            import pandas as pd

            try:
                records = pd.read_parquet(file).to_dict("records")
            except Exception as err:  # pyarrow raises several types for a bad file
                raise UserError(f"{file}: megatron_training.data_path: cannot read parquet ({err})") from None
            rows = [(f"row {i + 1}", r) for i, r in enumerate(records)]
        else:
            rows = []
            text = file.read_text()
            if file.suffix == ".json" and text.lstrip().startswith("["):
                try:
                    rows = [(f"item {i + 1}", r) for i, r in enumerate(json.loads(text))]
                except json.JSONDecodeError as err:
                    raise UserError(
                        f"{file}:{err.lineno}: megatron_training.data_path: invalid JSON ({err.msg})"
                    ) from None
            else:
                for n, line in enumerate(text.splitlines(), 1):
                    if not line.strip():
                        continue
                    try:
                        rows.append((str(n), json.loads(line)))
                    except json.JSONDecodeError as err:
                        raise UserError(
                            f"{file}:{n}: megatron_training.data_path: invalid JSON line ({err.msg})"
                        ) from None
        for where, record in rows:
            if not isinstance(record, dict):
                raise UserError(f"{file}:{where}: megatron_training.data_path: each record must be an object")
            out.append(
                Example(
                    _pick(record, PROMPT_KEYS, file, where, "prompt"), _pick(record, LABEL_KEYS, file, where, "label")
                )
            )
    if not out:
        raise UserError(f"{data_path}: megatron_training.data_path: the dataset is empty")
    return out


def split_by_percent(examples: list[Example], split: str) -> tuple[list[Example], list[Example]]:
    """MindSpeed's ``split: train,valid,test`` percentages; the valid part becomes the evaluation set."""
    try:
        parts = [float(x) for x in split.split(",")]
    except ValueError:
        raise UserError(f"megatron_training.split: expected three numbers like 100,0,0 (got {split!r})") from None
    total = sum(parts) or 1.0
    n_train = max(1, round(len(examples) * parts[0] / total))
    n_valid = round(len(examples) * (parts[1] if len(parts) > 1 else 0) / total)
    return examples[:n_train], examples[n_train : n_train + n_valid]


# ------------------------------------------------------------------------------- the data order
def batch_indices(n_examples: int, batch: int, consumed: int, seed: int, shuffle: bool) -> list[int]:
    """Indices of the ``batch`` prompts after the first ``consumed`` ones of the seeded order."""
    out: list[int] = []
    while len(out) < batch:
        epoch, offset = divmod(consumed, n_examples)
        order = np.random.default_rng([seed, epoch]).permutation(n_examples) if shuffle else np.arange(n_examples)
        take = min(batch - len(out), n_examples - offset)
        out += order[offset : offset + take].tolist()
        consumed += take
    return out
