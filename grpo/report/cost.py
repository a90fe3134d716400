"""What quality cost: each trial's value against its device-seconds, the front of the best value for the
compute, and the best value so far against the study's cumulative compute.

``cost_front(points, direction)`` is the quality-versus-cost front: the trials no cheaper trial beats (a
trial is on it when every trial that used less compute has a worse value). ``cost_figure`` draws it over
every trial (pruned ones at their last reported value, grey crosses), rings the trials a health rule
flagged, and stars the best trial. Device-seconds are ``compute_s`` of the trials frame: accelerator-
seconds (NPU or GPU) where a trial held one, else CPU-seconds.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Sequence
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from grpo.report import diagnostics
from grpo.report._figure import axis_title, best_star, grid
from grpo.report._snapshot import snapshot
from grpo.report.best import sign
from grpo.report.collect import Frames, study_objectives


def cost_front(points: Sequence[tuple[float, float, int]], better: float) -> list[tuple[float, float, int]]:
    """The (compute, value, trial) points no cheaper point beats, by compute; ``better`` * value: lower is better."""
    front: list[tuple[float, float, int]] = []
    for c, v, n in sorted(points, key=lambda p: (p[0], better * p[1], p[2])):
        if not front or better * v < better * front[-1][1]:
            front.append((c, v, n))
    return front


def cost_figure(study: optuna.Study, frames: Frames, best: FrozenTrial | None, index: int = 0) -> dict[str, Any]:
    """Left: value of objective ``index`` against device-seconds, with the cost front; right: best so far
    against cumulative device-seconds. Returns plotly figure JSON."""
    snap = snapshot(study)
    goal = study_objectives(snap)[index]
    better = sign(snap.directions[index])
    compute = dict(zip(frames.trials["number"].tolist(), frames.trials["compute_s"].tolist(), strict=True))
    layout, refs = grid(2, ["value against device-seconds", "best so far against cumulative device-seconds"], 420)
    groups: dict[str, list[tuple[float, float, int, list[diagnostics.Flag]]]] = {"COMPLETE": [], "PRUNED": []}
    for trial in snap.get_trials(deepcopy=False):
        c = compute.get(trial.number)
        if c is None or not math.isfinite(c):
            continue
        if trial.state == TrialState.COMPLETE and trial.values:
            value = trial.values[index]
        elif trial.state == TrialState.PRUNED and trial.intermediate_values and len(snap.directions) == 1:
            value = trial.intermediate_values[max(trial.intermediate_values)]
        else:
            continue
        groups[trial.state.name].append((c, value, trial.number, frames.flags.get(trial.number, [])))
    traces: list[dict[str, Any]] = []
    for state, points in groups.items():
        if not points:
            continue
        pruned = state == "PRUNED"
        traces.append(
            {
                "type": "scatter",
                "mode": "markers",
                "name": "pruned (last reported value)" if pruned else "complete",
                "xaxis": refs[0][0],
                "yaxis": refs[0][1],
                "x": [p[0] for p in points],
                "y": [p[1] for p in points],
                "marker": {
                    "symbol": "x" if pruned else "circle",
                    "size": 7,
                    "color": "#9a9a9a" if pruned else "#1f77b4",
                },
                "opacity": 0.6 if pruned else 0.9,
                "text": [f"trial {p[2]}" for p in points],
                "hovertemplate": "%{text}<br>%{x:.4g} device-s<br>value %{y:.4g}<extra></extra>",
            }
        )
    front = cost_front([(p[0], p[1], p[2]) for p in groups["COMPLETE"]], better)
    if front:
        traces.append(
            {
                "type": "scatter",
                "mode": "lines+markers",
                "name": "cost front",
                "xaxis": refs[0][0],
                "yaxis": refs[0][1],
                "x": [p[0] for p in front],
                "y": [p[1] for p in front],
                "line": {"shape": "hv", "color": "#2ca02c", "width": 2},
                "marker": {"size": 5, "color": "#2ca02c"},
                "text": [f"trial {p[2]}" for p in front],
                "hovertemplate": "cost front: %{text}<br>%{x:.4g} device-s<br>value %{y:.4g}<extra></extra>",
            }
        )
    flagged = [p for points in groups.values() for p in points if p[3]]
    if flagged:  # a red ring around each flagged trial, naming its flags on hover
        traces.append(
            {
                "type": "scatter",
                "mode": "markers",
                "name": "health flag",
                "xaxis": refs[0][0],
                "yaxis": refs[0][1],
                "x": [p[0] for p in flagged],
                "y": [p[1] for p in flagged],
                "marker": {"symbol": "circle-open", "size": 14, "color": "#d62728", "line": {"width": 2}},
                "text": [f"trial {p[2]}: " + ", ".join(f.name for f in p[3]) for p in flagged],
                "hovertemplate": "%{text}<extra></extra>",
            }
        )
    xs, ys = _best_so_far(snap, compute, index, better)
    if xs:
        traces.append(
            {
                "type": "scatter",
                "mode": "lines",
                "line": {"shape": "hv", "color": "#1f77b4"},
                "name": "best so far",
                "xaxis": refs[1][0],
                "yaxis": refs[1][1],
                "x": xs,
                "y": ys,
                "hovertemplate": "cumulative %{x:.4g} device-s<br>best %{y:.4g}<extra></extra>",
            }
        )
    if best is not None and best.values and math.isfinite(compute.get(best.number) or math.nan):
        traces.append(best_star(compute[best.number], best.values[index], best.number, refs[0], legend=True))
    axis_title(layout, refs[0][0], "device-seconds")
    axis_title(layout, refs[1][0], "cumulative device-seconds")
    axis_title(layout, refs[0][1], goal.metric)
    return {"data": traces, "layout": layout}


def _best_so_far(
    study: optuna.Study, compute: dict[int, Any], index: int, better: float
) -> tuple[list[float], list[float]]:
    finished = [t for t in study.get_trials(deepcopy=False) if t.state.is_finished()]
    finished.sort(key=lambda t: (t.datetime_complete or t.datetime_start or dt.datetime.max, t.number))
    total, best = 0.0, None
    xs: list[float] = []
    ys: list[float] = []
    for t in finished:
        c = compute.get(t.number)
        total += float(c) if c is not None and math.isfinite(c) else 0.0
        if t.state == TrialState.COMPLETE and t.values:
            v = t.values[index]
            best = v if best is None or better * v < better * best else best
        if best is not None:
            xs.append(total)
            ys.append(best)
    return xs, ys
