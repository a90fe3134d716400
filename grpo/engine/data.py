"""Prompts and labels: the generated verifiable task, user datasets, the held-out rows, and the data order.

A dataset is a list of ``Example(prompt, label, messages, extra)``; the formats a file may hold (MindSpeed jsonl,
GSM8K, MATH, verl parquet, TRL records, a field map) are read by ``grpo.engine.datasets``.
``train_and_eval_examples(cfg, run_dir)`` is the one place every backend gets its training and held-out rows.

``engine.task`` picks where the data comes from:

- ``arithmetic`` (the CPU default): two-number addition written as a chat question, ``"47+38=?"``,
  label ``"85"``. The expected answer format is ``<think>7+8=15</think><answer>\\boxed{85}</answer>``
  (the units column in the think part, the sum boxed). ``task_size`` training prompts and a disjoint
  evaluation set come from the seed; the training set is written to ``megatron_training.data_path``
  (``<data_path>.jsonl``, or the path itself when it ends in ``.jsonl``; a relative path lands inside the
  run directory so parallel trials never share one file).
- ``dataset``: read ``megatron_training.data_path`` (a file, a folder of ``*.jsonl``/``*.parquet``, or a
  MindSpeed prefix with ``.jsonl``/``.parquet`` appended; relative to the working directory). The held-out rows
  are ``engine.eval_data_path`` when set (same formats), else the ``split``'s validation part.

The order of prompts is a fresh seeded permutation per pass over the data (``no_shuffle`` keeps file
order), a pure function of (seed, samples consumed): resuming at an iteration reproduces the batches.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from grpo._fs import atomic_write_text
from grpo.engine.datasets import Example, read_examples
from grpo.errors import UserError

if TYPE_CHECKING:
    from grpo.config import GRPOConfig

__all__ = ["ArithmeticTask", "Example", "get_task", "read_examples", "train_and_eval_examples"]


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


def split_by_percent(examples: list[Example], split: str) -> tuple[list[Example], list[Example]]:
    """MindSpeed's ``split: train,valid,test`` percentages; the valid part becomes the evaluation set."""
    try:
        parts = [float(x) for x in split.split(",")]
    except ValueError:
        raise UserError(
            f"megatron_training.split: expected three numbers like 100,0,0 (got {split!r}); on the command line "
            f"write it quoted: 'megatron_training.split=\"80,20,0\"'"
        ) from None
    total = sum(parts) or 1.0
    n_train = max(1, round(len(examples) * parts[0] / total))
    n_valid = round(len(examples) * (parts[1] if len(parts) > 1 else 0) / total)
    return examples[:n_train], examples[n_train : n_train + n_valid]


def train_and_eval_examples(cfg: GRPOConfig, run_dir: Path) -> tuple[list[Example], list[Example]]:
    """The training rows and the held-out rows of a run, for every backend: a dataset (``engine.task=dataset``)
    with ``engine.eval_data_path`` or the ``split``'s validation part held out, or the generated task (its
    training prompts written to the data path, as MindSpeed-RL reads them)."""
    mt, eng = cfg.megatron_training, cfg.engine
    if eng.task == "dataset":
        examples = read_examples(mt.data_path, fields=eng.data_fields, key="megatron_training.data_path")
        train, held_out = split_by_percent(examples, mt.split)
        if eng.eval_data_path:
            held_out = read_examples(eng.eval_data_path, fields=eng.data_fields, key="engine.eval_data_path")
        return train, held_out
    task = get_task(eng.task)
    train, held_out = task.split(eng.task_size, eng.eval_size if eng.eval_every else 0, eng.task_seed)
    write_jsonl(train, generated_data_file(mt.data_path, run_dir))
    return train, held_out


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
