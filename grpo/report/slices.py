"""Slice plots: each searched parameter against the objective, one subplot per parameter.

Our own figure rather than Optuna's ``plot_slice``: Optuna colours points by trial number on a white-to-blue
scale, which drew an early best trial white, invisible. Here every completed trial is a point coloured by
its trial number on a scale without white, with a whisker over its seeds (its ``value_interval`` attr,
else the min and max of ``values_per_seed``) when it ran several; the best trial is a red star named
``best trial #n`` and the runner-up an orange diamond in *every* subplot, whose hover shows all their
parameters (other points show their trial number and value). Categorical parameters get a category
axis in the order of their choices, log-scale ones a log axis.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from html import escape
from typing import Any

from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.trial import FrozenTrial

from grpo.report._figure import BEST_MARKER, RUNNER_UP_MARKER, axis, axis_title, grid, marker_trace
from grpo.trial_attrs import VALUE_INTERVAL, VALUES_PER_SEED

COLORSCALE = "Viridis"
MAX_TICK_CHARS = 20


def seed_range(trial: FrozenTrial, objective: int = 0) -> tuple[float, float] | None:
    """The trial's value range over seeds: its ``value_interval`` attr, else min/max of ``values_per_seed``."""
    interval = trial.user_attrs.get(VALUE_INTERVAL)
    if isinstance(interval, list) and objective < len(interval):
        entry = interval[objective]
        if isinstance(entry, (list, tuple)) and len(entry) == 2 and all(_finite(v) for v in entry):
            return float(entry[0]), float(entry[1])
    per_seed = trial.user_attrs.get(VALUES_PER_SEED)
    if isinstance(per_seed, list) and objective < len(per_seed) and isinstance(per_seed[objective], list):
        values = [float(v) for v in per_seed[objective] if _finite(v)]
        if len(values) > 1:
            return min(values), max(values)
    return None


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def params_text(trial: FrozenTrial) -> str:
    """The trial's parameters for a hover label (escaped: plotly renders a few HTML tags)."""
    return "<br>".join(escape(f"{k} = {_short(v)}") for k, v in trial.params.items())


def _short(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _x(trial: FrozenTrial, param: str) -> Any:
    value = trial.params[param]
    return str(value) if isinstance(trial.distributions[param], CategoricalDistribution) else value


def slice_figure(
    trials: Sequence[FrozenTrial],
    params: Sequence[str],
    objective: int,
    metric: str,
    best: FrozenTrial | None,
    runner_up: FrozenTrial | None = None,
) -> dict[str, Any]:
    """The slice plots of ``trials`` (complete ones, with values) as figure JSON."""
    cols = 3 if len(params) > 4 else min(2, len(params))
    layout, refs = grid(len(params), list(params), 340, cols=cols)
    traces: list[dict[str, Any]] = []
    numbers = [t.number for t in trials]
    low, high = (min(numbers), max(numbers)) if numbers else (0, 1)
    for k, param in enumerate(params):
        ref = refs[k]
        shown = [t for t in trials if param in t.params and t.values is not None]
        ranges = [seed_range(t, objective) for t in shown]
        y = [t.values[objective] for t in shown]
        point: dict[str, Any] = {
            "type": "scatter",
            "mode": "markers",
            "name": "trials",
            "legendgroup": "trials",
            "showlegend": False,
            "xaxis": ref[0],
            "yaxis": ref[1],
            "x": [_x(t, param) for t in shown],
            "y": y,
            # Only the trial and its point: the parameters of every point of every subplot would be
            # most of a 10,000-trial report (the stars carry them, and so do the learning curves).
            "text": [f"trial {t.number}" for t in shown],
            "hovertemplate": "%{text}<br>"
            + escape(param)
            + " = %{x}<br>"
            + escape(metric)
            + " %{y:.4g}<extra></extra>",
            "marker": {
                "size": 8,
                "color": [t.number for t in shown],
                "colorscale": COLORSCALE,
                "cmin": low,
                "cmax": max(high, low + 1),
                "line": {"color": "#444444", "width": 0.5},
                "showscale": k == 0,
                "colorbar": {"title": {"text": "trial"}, "thickness": 12, "len": 0.5},
            },
        }
        if any(r is not None for r in ranges):
            point["error_y"] = {
                "type": "data",
                "symmetric": False,
                "array": [0.0 if r is None else max(0.0, r[1] - v) for r, v in zip(ranges, y, strict=True)],
                "arrayminus": [0.0 if r is None else max(0.0, v - r[0]) for r, v in zip(ranges, y, strict=True)],
                "color": "#9a9a9a",
                "thickness": 1,
                "width": 0,
            }
        traces.append(point)
        distribution = shown[0].distributions[param] if shown else None
        if isinstance(distribution, CategoricalDistribution):
            choices = [str(c) for c in distribution.choices]
            axis(
                layout,
                ref[0],
                type="category",
                categoryorder="array",
                categoryarray=choices,
                tickvals=choices,  # long choices shortened on the axis (they ran into the next subplot)
                ticktext=[c if len(c) <= MAX_TICK_CHARS else c[: MAX_TICK_CHARS - 1] + "…" for c in choices],
            )
        elif isinstance(distribution, (FloatDistribution, IntDistribution)) and distribution.log:
            axis(layout, ref[0], type="log")
        axis_title(layout, ref[1], metric if k % cols == 0 else "")
        for trial, marker, name in (
            (runner_up, RUNNER_UP_MARKER, "runner-up"),
            (best, BEST_MARKER, "best trial"),  # last: drawn on top
        ):
            if trial is None or param not in trial.params or trial.values is None:
                continue
            star = marker_trace(
                _x(trial, param), trial.values[objective], f"{name} #{trial.number}", marker, ref, legend=k == 0
            )
            star["hovertemplate"] = (
                f"{name} #{trial.number}<br>{params_text(trial)}<br>{escape(metric)} %{{y:.4g}}<extra></extra>"
            )
            traces.append(star)
    # The legend in the top margin, above the subplot titles (inside the plot it ran into them).
    layout["legend"] = {"orientation": "h", "yref": "container", "y": 1, "yanchor": "top", "x": 0}
    layout["margin"] = {**layout["margin"], "t": 70}
    return {"data": traces, "layout": layout}
