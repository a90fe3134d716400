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

from grpo.report.collect import Frames, collect
from grpo.report.export import export
from grpo.report.html import write_report

__all__ = ["Frames", "collect", "export", "write_report"]
