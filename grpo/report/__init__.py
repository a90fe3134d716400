"""Reading a study back: pandas frames (``collect``), the HTML report (``write_report``), exports.

    from grpo.report import collect, write_report, export
    frames = collect(study)                        # frames.trials, frames.metrics, frames.flags
    write_report(study, Path("reports/kl_study"))  # -> reports/kl_study/index.html (+ best_config.yaml)
    export(study, "parquet", Path("reports/kl_study/export"))

All three read only the study storage and the trial dirs, so they work while a study runs and after
it was interrupted. The page answers which settings won, how sure (``stats``, ``decision``), why
(``importance``, ``slices``, Optuna's plots), what happened in the runs (``curves``, ``diagnostics``,
``samples``), what it cost (``cost``) and how to rerun the winner (``reproduce``); ``html`` assembles it
from the ``page_*`` sections. See docs/contracts.md ("Report").
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from grpo.report.collect import Frames, collect
    from grpo.report.export import export
    from grpo.report.html import write_report

__all__ = ["Frames", "collect", "export", "write_report"]
_HOME = {"Frames": "collect", "collect": "collect", "export": "export", "write_report": "html"}


def __getattr__(name: str) -> Any:
    # Lazy (PEP 562): `grpo.report.best` or `.stats` alone must not pull in plotly, pandas and Optuna's
    # importance (about 2 s), which every `grpo-sweep` command would otherwise pay before it says anything.
    if name in _HOME:
        return getattr(importlib.import_module(f"grpo.report.{_HOME[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class _Package(types.ModuleType):
    """Importing the submodule ``grpo.report.collect`` (or ``.export``) binds the package attribute of that
    name to the submodule; the API name stays the function, as when this package imported them eagerly."""

    def __getattribute__(self, name: str) -> Any:
        value = super().__getattribute__(name)
        if name in _HOME and isinstance(value, types.ModuleType):
            return getattr(value, name)
        return value


sys.modules[__name__].__class__ = _Package
