"""The records of a dataset path: a file (``.jsonl``, ``.json``, ``.parquet``), a folder of them, or a MindSpeed
prefix with one of those suffixes appended; each record is a plain dict (numpy values made Python values)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from grpo.errors import UserError

SUFFIXES = (".jsonl", ".parquet", ".json")


def dataset_files(data_path: str, key: str) -> list[Path]:
    path = Path(data_path).expanduser()
    if path.is_file():
        return [path]
    if path.is_dir():
        files = sorted(f for s in SUFFIXES for f in path.glob(f"*{s}"))
        if files:
            return files
        raise UserError(f"{path}: {key}: folder has no *.jsonl, *.parquet or *.json file")
    for suffix in SUFFIXES:
        candidate = path.with_name(path.name + suffix)
        if candidate.is_file():
            return [candidate]
    raise UserError(
        f"{path}: {key}: no such dataset (also looked for {path.name}.jsonl, {path.name}.parquet, {path.name}.json)"
    )


def plain(value: Any) -> Any:
    """A parquet cell as JSON would give it: numpy arrays as lists, numpy scalars as Python numbers."""
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    tolist = getattr(value, "tolist", None)  # numpy arrays and scalars
    if callable(tolist):
        return plain(tolist())
    return value


def records(file: Path, key: str) -> Iterator[tuple[str, Any]]:
    """(where, record) for each record of ``file``: ``where`` is its line (jsonl), item or row number."""
    if file.suffix == ".parquet":
        import pyarrow.parquet as pq  # a dependency of pandas here; imported only for parquet files

        try:
            rows = pq.read_table(file).to_pylist()
        except Exception as err:  # pyarrow raises several types for a bad file
            raise UserError(f"{file}: {key}: cannot read parquet ({err})") from None
        for i, row in enumerate(rows):
            yield f"row {i + 1}", plain(row)
        return
    try:
        text = file.read_text()
    except (OSError, UnicodeDecodeError) as err:
        raise UserError(f"{file}: {key}: cannot read ({err})") from None
    if file.suffix == ".json" and text.lstrip().startswith("["):
        try:
            items = json.loads(text)
        except json.JSONDecodeError as err:
            raise UserError(f"{file}:{err.lineno}: {key}: invalid JSON ({err.msg})") from None
        for i, item in enumerate(items):
            yield f"item {i + 1}", item
        return
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            yield str(n), json.loads(line)
        except json.JSONDecodeError as err:
            raise UserError(f"{file}:{n}: {key}: invalid JSON line ({err.msg})") from None
