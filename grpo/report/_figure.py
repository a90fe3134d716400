"""What the report's own figures share: the subplot grid, the markers of the best trial, trial colours.

The report's own figures (learning curves, slices, importances, cost) are plotly figure JSON: the layout
comes from ``make_subplots``, the traces are appended as plain dicts (thousands of validated graph
objects would cost more than the rest of the report).

The best trial looks the same in every figure: a red star with a black rim (``BEST_MARKER``) on
scatter plots, a black line 2.2x as wide on learning curves; the runner-up is an orange diamond.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from plotly.subplots import make_subplots

BEST_COLOR = "#d62728"
BEST_MARKER = {"symbol": "star", "size": 16, "color": BEST_COLOR, "line": {"color": "#000000", "width": 1}}
RUNNER_UP_MARKER = {"symbol": "diamond", "size": 12, "color": "#ff7f0e", "line": {"color": "#000000", "width": 1}}
BEST_LINE_COLOR, BEST_LINE_WIDTH = "#000000", 2.2  # the best trial's curve: black, 2.2x as wide
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22")
PRUNED_COLOR, FAIL_COLOR, MISSING_COLOR = "#9a9a9a", "#d62728", "#bbbbbb"
MARGIN = {"t": 30, "l": 60, "r": 20, "b": 50}


def grid(n: int, titles: list[str], height: int, cols: int = 2) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    """Layout JSON of ``n`` subplots in ``cols`` columns (``make_subplots``) and each cell's (xaxis, yaxis) refs."""
    cols = max(1, min(cols, n))
    rows = max(1, -(-n // cols))
    specs: list[list[dict[str, Any] | None]] = [
        [{} if r * cols + c < n else None for c in range(cols)] for r in range(rows)
    ]
    fig = make_subplots(
        rows=rows,
        cols=cols,
        specs=specs,
        subplot_titles=titles,
        horizontal_spacing=0.08 if cols < 3 else 0.06,
        vertical_spacing=min(0.1, 0.3 / rows),
    )
    layout = fig.layout.to_plotly_json()
    layout.pop("template", None)  # plotly.js's defaults: the same look, 10 kB less per figure
    layout.update(height=max(height, 290 * rows), hovermode="closest", margin=dict(MARGIN))
    refs = []
    for k in range(n):
        cell = fig.get_subplot(k // cols + 1, k % cols + 1)
        refs.append((cell.xaxis.plotly_name.replace("axis", ""), cell.yaxis.plotly_name.replace("axis", "")))
    return layout, refs


def axis(layout: dict[str, Any], ref: str, **settings: Any) -> None:
    """Update the layout's axis ``ref`` (``x``, ``y3``...) with ``settings``."""
    layout.setdefault(ref[0] + "axis" + ref[1:], {}).update(settings)


def axis_title(layout: dict[str, Any], ref: str, text: str) -> None:
    axis(layout, ref, title={"text": text})


def marker_trace(
    x: Any, y: Any, name: str, marker: dict[str, Any], ref: tuple[str, str] = ("x", "y"), legend: bool = False
) -> dict[str, Any]:
    """One highlighted point (the best trial, the runner-up) as a scatter trace named ``name``."""
    return {
        "type": "scatter",
        "mode": "markers",
        "x": [x],
        "y": [y],
        "xaxis": ref[0],
        "yaxis": ref[1],
        "marker": marker,
        "name": name,
        "legendgroup": name,
        "showlegend": legend,
        "hovertemplate": f"{name}<br>%{{x}}<br>%{{y:.4g}}<extra></extra>",
    }


def best_star(x: Any, y: Any, number: int, ref: tuple[str, str] = ("x", "y"), legend: bool = False) -> dict[str, Any]:
    """The best trial's red star, named ``best trial #n``."""
    return marker_trace(x, y, f"best trial #{number}", BEST_MARKER, ref, legend)


def finite_list(values: np.ndarray) -> list[float | None]:
    """A float array as a JSON-ready list, None where it is not finite (plotly leaves a gap)."""
    return [float(v) if np.isfinite(v) else None for v in values]
