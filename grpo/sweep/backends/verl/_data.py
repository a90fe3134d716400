"""A verl trial's rows: the training and held-out prompts every backend uses, written as verl's parquet.

The rows come from ``grpo.engine.data.train_and_eval_examples`` (the one place every backend gets them: a dataset
split as the embedded engine splits it, or ``engine.eval_data_path``, or the generated task), so ``eval/*`` on verl
is measured on the same held-out prompts as on the other backends, never on the training file. They are written
into the trial's run folder as ``data.train_files`` and ``data.val_files``.

The run's length: verl 0.9.1's loop (``verl/trainer/ppo/v1/trainer_base.py`` ``fit``) stops at
``trainer.total_training_steps`` or after ``trainer.total_epochs`` epochs (default 30) of ``len(train) //
train_batch_size`` steps (``drop_last``), whichever comes first, and divides by that step count (a dataset smaller
than one batch is a ZeroDivisionError there). ``epochs`` gives the epochs that cover ``train_iters``; a dataset
smaller than one batch is refused here, in one line, before anything launches.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from grpo.config import GRPOConfig
from grpo.engine.data import Example, read_examples, split_by_percent, train_and_eval_examples
from grpo.engine.datasets import DEFAULT_DATA_SOURCE, write_verl_parquet
from grpo.engine.datasets._files import dataset_files
from grpo.errors import UserError

TRAIN_FILE = "verl_train.parquet"
VAL_FILE = "verl_val.parquet"


@dataclass(frozen=True)
class TrialData:
    train: Path
    val: Path
    train_rows: int
    val_rows: int
    val_sources: dict[str, int]  # held-out rows per data_source (verl reports eval per data source)


def train_batch(cfg: GRPOConfig) -> int:
    """Prompts per verl step (``data.train_batch_size``): with DAPO's dynamic sampling the kept groups trained on
    (verl's v1 replay buffer refills prompts until that many are kept), else ``global_batch_size``."""
    rl = cfg.rl_config
    if getattr(rl, "filter_groups_enable", False):
        return int(getattr(rl, "filter_groups_train_batch_size", 0))
    return int(cfg.megatron_training.global_batch_size)


def too_few_rows(cfg: GRPOConfig, rows: int, where: str) -> str | None:
    """The one-line refusal of a training set smaller than one verl step (None when it is large enough)."""
    batch = train_batch(cfg)
    if rows >= batch:
        return None
    return (
        f"{where}: megatron_training.data_path: {rows} training rows are fewer than one verl step of {batch} prompts "
        "(data.train_batch_size; verl drops an incomplete last batch, so it would train on nothing)"
    )


def epochs(cfg: GRPOConfig, train_rows: int) -> int:
    """``trainer.total_epochs`` that lets verl reach ``train_iters`` (its epoch is train_rows // batch steps)."""
    per_epoch = max(1, train_rows // train_batch(cfg))
    return -(-int(cfg.megatron_training.train_iters) // per_epoch)


def row_counts(cfg: GRPOConfig) -> tuple[int, int] | None:
    """(training rows, held-out rows) as a trial will have them, when this machine can tell (None: the dataset
    is not here; trials may launch on another machine)."""
    mt, eng = cfg.megatron_training, cfg.engine
    if eng.task != "dataset":
        return int(eng.task_size), int(eng.eval_size) if eng.eval_every else 0
    if not mt.data_path or not present(str(mt.data_path), "megatron_training.data_path"):
        return None
    fields = tuple(sorted((eng.data_fields or {}).items()))
    train, held_out = _split(str(mt.data_path), fields, str(mt.split))
    if eng.eval_data_path:
        if not present(str(eng.eval_data_path), "engine.eval_data_path"):
            return train, 1  # not here: counted where the trial launches
        return train, _count(str(eng.eval_data_path), fields, "engine.eval_data_path")
    return train, held_out


def present(path: str, key: str) -> bool:
    """Whether this machine has the dataset ``path`` names (a file, a folder, a MindSpeed prefix)."""
    try:
        dataset_files(path, key)
    except UserError:
        return False
    return True


@lru_cache(maxsize=8)  # check() runs once per trial point of a validate: the file is read once
def _split(path: str, fields: tuple[tuple[str, str], ...], split: str) -> tuple[int, int]:
    train, held_out = split_by_percent(read_examples(path, fields=dict(fields) or None), split)
    return len(train), len(held_out)


@lru_cache(maxsize=8)
def _count(path: str, fields: tuple[tuple[str, str], ...], key: str) -> int:
    return len(read_examples(path, fields=dict(fields) or None, key=key))


def problems(cfg: GRPOConfig) -> list[str]:
    """One line per reason the trial's rows cannot make its verl run: fewer rows than one step, or evaluation
    asked for with no held-out rows (verl would evaluate on training rows)."""
    counts = row_counts(cfg)
    if counts is None:
        return []
    out = [line] if (line := too_few_rows(cfg, counts[0], cfg._source)) else []
    if cfg.engine.eval_every and not counts[1]:
        out.append(no_held_out(cfg))
    return out


def no_held_out(cfg: GRPOConfig) -> str:
    return (
        f"{cfg._source}: engine.eval_every: no held-out rows to evaluate on (megatron_training.split "
        f"{cfg.megatron_training.split!r} holds none out and engine.eval_data_path is not set)"
    )


def write(cfg: GRPOConfig, run_dir: Path) -> TrialData:
    """The trial's training and held-out rows as verl parquet files in ``run_dir`` (UserError for bad data)."""
    train, held_out = train_and_eval_examples(cfg, run_dir)
    if (line := too_few_rows(cfg, len(train), cfg._source)) is not None:
        raise UserError(line)
    if cfg.engine.eval_every and not held_out:
        raise UserError(no_held_out(cfg))
    if not held_out:
        # verl builds its validation dataset even when it never evaluates (test_freq -1); one training row keeps
        # its loader valid. With eval_every set, check() has refused a run without held-out rows.
        held_out = train[:1]
    sources: dict[str, int] = {}
    for example in held_out:
        source = _source(example)
        sources[source] = sources.get(source, 0) + 1
    return TrialData(
        train=write_verl_parquet(train, run_dir / TRAIN_FILE),
        val=write_verl_parquet(held_out, run_dir / VAL_FILE),
        train_rows=len(train),
        val_rows=len(held_out),
        val_sources=sources,
    )


def _source(example: Example) -> str:
    return str(example.extra.get("data_source", DEFAULT_DATA_SOURCE))
