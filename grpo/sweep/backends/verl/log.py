"""Reading verl's ``file`` logger (``FileLogger``, verl-0.9.1:verl/utils/tracking.py) as a metric stream.

The logger writes one JSON line ``{"step": N, "data": {...}}`` per training step to
``$VERL_FILE_LOGGER_PATH`` and opens that file with ``"wb"``: a resumed run truncates it. The tail
here notices the truncation (the file got shorter than what it had read) and reads again from the top,
keeping the rows it already had, so a trial's history survives its resumes; a step logged again after
a resume is merged into the row it had (its values win).

``project_metrics`` adds the project's names (MindSpeed-RL's, docs/DESIGN.md) beside verl's own, from verl's
metric_utils names: ``critic/score/mean`` is ``grpo/score/mean``, ``timing_s/step`` is ``timing/all``; verl's keys
stay as logged. Held-out evaluation: verl reports ``val-core/<data source>/<acc|reward>/mean@N`` per data source
(``acc`` when the reward function reports one), the mean over N responses per held-out prompt sampled as
``rollout.val_kwargs`` says (the trial's sampling parameters, N = _render.EVAL_SAMPLES: the engine's ``eval/acc``);
``eval/acc`` (``eval/reward``) is their mean over the held-out rows, each source weighted by its rows, and
``eval/prompts`` the number of held-out prompts, as the embedded engine reports them.
"""

from __future__ import annotations

import json
import re
from pathlib import Path


class VerlLogTail:
    """Incremental reader of one trial's verl JSONL log; ``poll()`` returns the steps that are new."""

    def __init__(self, path: Path):
        self.path = path
        self.rows: dict[int, dict[str, float]] = {}
        self._offset = 0
        self._partial = b""

    def poll(self) -> list[tuple[int, dict[str, float]]]:
        """New ``(step, metrics)`` rows since the last poll, in file order; [] while the file is absent."""
        try:
            size = self.path.stat().st_size
        except FileNotFoundError:
            return []
        if size < self._offset:  # truncated by a resume: the logger reopened it with "wb"
            self._offset, self._partial = 0, b""
        with self.path.open("rb") as handle:
            handle.seek(self._offset)
            chunk = handle.read()
        self._offset += len(chunk)
        lines = (self._partial + chunk).split(b"\n")
        self._partial = lines.pop()  # an unfinished last line waits for the next poll
        new = []
        for line in lines:
            row = _row(line)
            if row is not None:
                self.rows.setdefault(row[0], {}).update(row[1])
                new.append(row)
        return new


def _row(line: bytes) -> tuple[int, dict[str, float]] | None:
    """One logged step; None for a blank or malformed line (a crash can leave one)."""
    try:
        record = json.loads(line)
        step, data = int(record["step"]), record["data"]
    except (ValueError, KeyError, TypeError):
        return None
    metrics = {k: float(v) for k, v in data.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    return step, metrics


# verl's metric name -> the project's (MindSpeed-RL's where it has one); verl-0.9.1:verl/trainer/ppo/metric_utils.py
RENAMES = {
    "critic/score/mean": "grpo/score/mean",
    "critic/score/max": "grpo/score/max",
    "critic/score/min": "grpo/score/min",
    "critic/rewards/mean": "grpo/rewards/mean",
    "timing_s/step": "timing/all",
    "perf/throughput": "e2e_tps",
}
VAL_CORE = re.compile(r"^val-core/(?P<source>.+)/(?P<name>acc|reward)/mean@\d+$")
# The held-out names a trial reports: verl's val-core is acc whenever the reward reports one, and the generated
# compute_score always does (_reward.score_one), so eval/reward never appears.
EVAL_REPORTED = ("eval/acc", "eval/prompts")


def unreported(metric: str) -> str | None:
    """Why a verl trial never reports ``metric`` (an ``eval/*`` name ``project_metrics`` cannot produce); None for
    the rest (verl's own names pass through as logged, so they are not checked here)."""
    if not metric.startswith("eval/") or metric in EVAL_REPORTED:
        return None
    if metric == "eval/acc_greedy":
        return (
            "backend verl never reports it: verl runs one validation setting per run (rollout.val_kwargs, sampled "
            "as the rollout samples), reported as eval/acc; use eval/acc"
        )
    return f"backend verl never reports it (its held-out metrics are {', '.join(EVAL_REPORTED)})"


def project_metrics(data: dict[str, float], val_sources: dict[str, int] | None = None) -> dict[str, float]:
    """verl's step metrics with the project's names added (verl's own kept); ``val_sources``: held-out rows per
    data source (the weights of each source's eval mean; unknown sources weigh 1)."""
    out = dict(data)
    for theirs, ours in RENAMES.items():
        if theirs in data:
            out[ours] = data[theirs]
    sums: dict[str, tuple[float, float]] = {}
    for key, value in data.items():
        match = VAL_CORE.match(key)
        if match:
            weight = float((val_sources or {}).get(match["source"], 1))
            total, weights = sums.get(match["name"], (0.0, 0.0))
            sums[match["name"]] = (total + weight * value, weights + weight)
    for name, (total, weights) in sums.items():
        out[f"eval/{name}"] = total / weights
    if sums and val_sources:
        out["eval/prompts"] = float(sum(val_sources.values()))
    return out


def latest_checkpoint(save_dir: Path) -> Path | None:
    """``<save_dir>/global_step_N`` named by verl's ``latest_checkpointed_iteration.txt``; None if absent."""
    try:
        step = int((save_dir / "latest_checkpointed_iteration.txt").read_text().strip())
    except (OSError, ValueError):
        return None
    folder = save_dir / f"global_step_{step}"
    return folder if folder.is_dir() else None
