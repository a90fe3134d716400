"""``export(study, fmt, out_dir)``: the trials and metrics frames of ``collect`` as files.

Writes ``out_dir/trials.<ext>`` and ``out_dir/metrics.<ext>`` for ``fmt`` in ``csv``, ``parquet``
(pyarrow) or ``json`` (records, one object per row). Each file is written to a temporary name and
renamed, so a reader never sees half a file.

    from grpo.report import export
    export(study, "parquet", Path("reports/kl_study/export"))
    pandas.read_parquet("reports/kl_study/export/metrics.parquet")
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import optuna
import pandas as pd

from grpo._fs import atomic_write
from grpo.errors import UserError
from grpo.report.collect import Frames, collect

FORMATS = ("csv", "parquet", "json")


def export(study: optuna.Study, fmt: str, out_dir: Path, frames: Frames | None = None) -> list[Path]:
    """Write the study's frames in ``fmt``; return the paths written (trials first).

    An unknown ``fmt`` is a ``UserError``, raised before anything is written.
    """
    if fmt not in FORMATS:
        raise UserError(f"--format: unknown export format {fmt!r}; use one of {', '.join(FORMATS)}")
    frames = frames or collect(study)
    out_dir = Path(out_dir)
    written = []
    for name, frame in (("trials", frames.trials), ("metrics", frames.metrics)):
        path = out_dir / f"{name}.{fmt}"
        written.append(atomic_write(path, functools.partial(_write, frame, fmt)))
    return written


def _write(frame: pd.DataFrame, fmt: str, path: Path) -> None:
    if fmt == "csv":
        frame.to_csv(path, index=False)
    elif fmt == "json":
        # Not DataFrame.to_json: it keeps a fixed number of decimals (a 1.2345678901234e-7 learning rate came
        # back as 1.23456789e-7). Python's json writes the shortest repr that reads back to the same float.
        records = frame.astype(object).where(frame.notna(), None).to_dict(orient="records")
        path.write_text(json.dumps(records, default=_json_value, allow_nan=False), encoding="utf-8")
    else:
        _arrow_safe(frame).to_parquet(path, index=False, engine="pyarrow")


def _json_value(value: Any) -> Any:
    """Timestamps as ISO 8601 text (as ``to_json(date_format="iso")`` wrote them), numpy scalars as numbers."""
    if isinstance(value, (pd.Timestamp, pd.Timedelta)):
        return value.isoformat()
    if hasattr(value, "item"):
        return value.item()
    return str(value)


def _arrow_safe(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with every object column Arrow cannot type (a categorical parameter mixing ints and
    strings, say) turned into strings, so parquet can always be written."""
    import pyarrow as pa

    out = frame.copy()
    for column in out.columns:
        if out[column].dtype != object:
            continue
        try:
            pa.array(out[column], from_pandas=True)
        except (pa.ArrowInvalid, pa.ArrowTypeError):
            out[column] = out[column].map(lambda v: None if v is None or (isinstance(v, float) and v != v) else str(v))
    return out
