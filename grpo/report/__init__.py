"""Reading a study back: pandas frames (``collect``), the HTML report (``write_report``), exports.

    from grpo.report import collect, write_report, export
    frames = collect(study)                        # frames.trials, frames.metrics
    write_report(study, Path("reports/kl_study"))  # -> reports/kl_study/index.html
    export(study, "parquet", Path("reports/kl_study/export"))

All three read only the study storage and the trial dirs, so they work while a study runs and after
it was interrupted. See docs/contracts.md ("Report").
"""

from grpo.report.collect import Frames, collect
from grpo.report.export import export
from grpo.report.html import write_report

__all__ = ["Frames", "collect", "export", "write_report"]
