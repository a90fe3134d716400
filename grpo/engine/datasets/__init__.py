"""Datasets in the formats people have (``formats.py``), read into ``Example``s; verl's parquet written back.

    examples = read_examples("data/gsm8k_train.jsonl")              # format detected from the first record
    examples = read_examples("data/x.parquet", fields={"prompt": "query", "label": "meta.answer"})
    write_verl_parquet(examples, run_dir / "train.parquet")          # verl's data.train_files

Imports no torch (the sweep's driver and ``validate`` read datasets too).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from grpo.engine.datasets._example import Example
from grpo.engine.datasets._files import dataset_files, records
from grpo.engine.datasets.formats import FORMATS, READERS, detect_format, fields_reader, read_record
from grpo.errors import UserError

__all__ = [
    "FORMATS", "VERL_COLUMNS", "Example", "Read", "detect_format", "read_examples", "read_file", "write_verl_parquet",
]  # fmt: skip

# Where a user's columns travel inside verl's extra_info (verl hands a reward function nothing else per row).
VERL_COLUMNS = "grpo_columns"
DEFAULT_DATA_SOURCE = "grpo_sweep"


class Read(list[Example]):
    """The examples of a dataset path, with the format each file was read as (``formats``, one per file)."""

    formats: list[str]


def read_file(file: Path, fields: Mapping[str, str] | None, key: str) -> tuple[str, list[Example]]:
    """(format, examples) of one file."""
    fmt, out = "", []
    reader = fields_reader(fields) if fields else None
    for where, record in records(file, key):
        if not fmt:
            fmt = "fields" if fields else detect_format(record) if isinstance(record, Mapping) else "mindspeed"
        out.append(read_record(reader or READERS[fmt], record, f"{file}:{where}: {key}", fmt))
    return fmt, out


def read_examples(
    path: str | Path, *, fields: Mapping[str, str] | None = None, key: str = "megatron_training.data_path"
) -> Read:
    """Every example of a dataset path (a file, a folder, a MindSpeed prefix); ``key`` is the config key that
    named it (for the one-line errors). ``fields`` is ``engine.data_fields``."""
    out, formats = Read(), []
    for file in dataset_files(str(path), key):
        fmt, examples = read_file(file, fields, key)
        formats.append(fmt or "empty")
        out.extend(examples)
    if not out:
        raise UserError(f"{path}: {key}: the dataset is empty")
    out.formats = formats
    return out


def _verl_row(e: Example, index: int) -> dict[str, Any]:
    messages = list(e.messages) if e.messages else [{"role": "user", "content": e.prompt}]
    info = e.extra.get("extra_info")
    extra_info = dict(info) if isinstance(info, dict) else {}
    extra_info.setdefault("index", index)
    # The record's own columns and prompt text, for a TRL-style user reward run by the generated compute_score.
    prompt = list(e.messages) if e.messages else e.prompt
    extra_info[VERL_COLUMNS] = json.dumps({"prompt": prompt, **e.extra}, default=str)
    return {
        "data_source": str(e.extra.get("data_source", DEFAULT_DATA_SOURCE)),
        "prompt": [{"role": str(m["role"]), "content": str(m["content"])} for m in messages],
        "ability": str(e.extra.get("ability", "")),
        "reward_model": {"style": "rule", "ground_truth": e.label},
        "extra_info": extra_info,
    }


def write_verl_parquet(examples: list[Example], path: str | Path) -> Path:
    """``examples`` as verl's RL parquet (``data_source``, ``prompt`` messages, ``ability``,
    ``reward_model.ground_truth``, ``extra_info``), written atomically."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from grpo._fs import atomic_write

    table = pa.Table.from_pylist([_verl_row(e, i) for i, e in enumerate(examples)])
    return atomic_write(path, lambda tmp: pq.write_table(table, tmp))
