"""The report's figures, as ``Panel`` values in page order, each a figure or a note saying why there is none.

Three groups, one function each:

- ``why_panels``: why these settings win. The Pareto front (several objectives), parameter importances
  with their bootstrap spread (``grpo.report.importance``; a note below ``importance.MIN_TRIALS``
  complete trials), slice plots (``grpo.report.slices``), the contour of the two most important
  parameters (only when importances are drawn: it rests on them), parallel coordinates and the
  optimisation history (Optuna's plots).
- ``curves_panel``: what happened in the runs (``grpo.report.curves``).
- ``cost_panels``: what quality cost (``grpo.report.cost``).

Every plot that shows trials marks the report's best trial (``grpo.report.decision``): a red star
(``_figure.BEST_MARKER``), the red line in parallel coordinates, the black, wider curve.

Big studies stay fast and small because every plot has a budget: Optuna's plots read a
``StudySnapshot`` (the trials read once), never the storage; slice and Pareto plots draw at most
``MAX_PLOT_TRIALS`` completed trials, parallel coordinates at most ``MAX_PARALLEL_TRIALS`` (one SVG line
each), the contour at most ``MAX_CONTOUR_TRIALS`` (its figure grows with the square of the trials): the
best half of the budget plus an even spread of the rest. The optimisation history draws every trial.
"""

from __future__ import annotations

import functools
import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import optuna
import plotly.graph_objects as go
from optuna import visualization as ov
from optuna.trial import FrozenTrial, TrialState

from grpo.report import importance
from grpo.report._figure import BEST_MARKER, MARGIN, best_star, marker_trace
from grpo.report._snapshot import StudySnapshot, snapshot
from grpo.report.best import complete_trials, sign
from grpo.report.collect import Frames, Objective, study_objectives
from grpo.report.cost import cost_figure
from grpo.report.curves import learning_curves
from grpo.report.decision import Decision
from grpo.report.slices import slice_figure

log = logging.getLogger(__name__)

MAX_PLOT_TRIALS = 1000
MAX_PARALLEL_TRIALS = 300  # Optuna draws one SVG line (trace) per trial
MAX_CONTOUR_TRIALS = 300


@dataclass
class Panel:
    """One plot of the report: ``figure``, or ``note`` saying why there is none; ``caption`` under it."""

    id: str
    title: str
    figure: go.Figure | dict[str, Any] | None = None  # a plotly figure or plotly figure JSON
    note: str | None = None
    caption: str | None = None
    height: int = 450


def why_panels(study: optuna.Study, frames: Frames, decision: Decision) -> list[Panel]:
    snap = snapshot(study)
    goals = study_objectives(snap)
    complete = [t for t in snap.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)) if t.values]
    params = sorted({p for t in complete for p in t.params})
    multi = len(goals) > 1
    best = decision.best
    out: list[Panel] = []
    inert = snap.user_attrs.get("inert_knobs")  # grpo.config.inert.STUDY_ATTR (the report imports no config)
    if inert:
        out.append(Panel("inert", "Searched knobs that cannot change training", note="; ".join(inert)))
    if multi:
        out.append(_pareto(snap, complete, goals, best))

    top2: list[str] = []
    for i, goal in enumerate(goals):
        suffix = f" ({goal.metric})" if multi else ""
        target, _ = _target(i, goal, multi)
        title = f"Parameter importances{suffix}"
        if not params:
            out.append(Panel(f"importances{i}", title, note="the study has no parameters"))
            continue
        result = importance.importances(snap, complete, target)
        if isinstance(result, str):
            out.append(Panel(f"importances{i}", title, note=result))
            continue
        if i == 0:
            top2 = result.top(2)
        out.append(
            _guard(
                f"importances{i}",
                title,
                None,
                functools.partial(importance.figure, result),
                caption=result.caption(),
            )
        )

    target, name = _target(0, goals[0], multi)
    first = f" ({goals[0].metric})" if multi else ""  # several objectives: these plots show the first
    sample = sample_trials(snap, MAX_PLOT_TRIALS)
    out.append(
        _guard(
            "slice",
            f"Slice plots{first}",
            _need(complete, 1, params),
            lambda: slice_figure(sample, params, 0, name, best, decision.runner_up),
            caption=_joined(
                "Each point is a completed trial, coloured by trial number; a whisker spans its seeds when it ran "
                "several. The red star is the best trial, the orange diamond the runner-up.",
                _sample_note(len(sample), len(complete)),
            ),
        )
    )
    contour_sample = snap.subset(sample_trials(snap, MAX_CONTOUR_TRIALS))
    contour_why = (
        _need(complete, 2, params)
        or (None if len(params) >= 2 else "needs at least 2 parameters")
        or (None if len(top2) == 2 else "drawn once parameter importances are (it shows the two most important)")
    )
    out.append(
        _guard(
            "contour",
            "Contour of the two most important parameters"
            + (f": {top2[0]} x {top2[1]}" if len(top2) == 2 else "")
            + first,
            contour_why,
            lambda: _star_contour(ov.plot_contour(contour_sample, params=top2, target=target, target_name=name), best),
            caption=_joined(
                "The star is the best trial.", _sample_note(len(contour_sample.get_trials()), len(complete))
            ),
        )
    )
    parallel = snap.subset(sample_trials(snap, MAX_PARALLEL_TRIALS))
    out.append(
        _guard(
            "parallel",
            f"Parallel coordinates{first}",
            _need(complete, 1, params),
            lambda: _best_line_on_top(
                ov.plot_parallel_coordinate(parallel, target=target, target_name=name), parallel, best, target
            ),
            caption=_joined("The red line is the best trial.", _sample_note(len(parallel.get_trials()), len(complete))),
        )
    )
    for i, goal in enumerate(goals):
        suffix = f" ({goal.metric})" if multi else ""
        target, name = _target(i, goal, multi)
        out.append(
            _guard(
                f"history{i}",
                f"Optimisation history{suffix}",
                _need(complete, 1, params=None),
                lambda target=target, name=name, i=i: _star_history(  # type: ignore[misc]
                    ov.plot_optimization_history(snap, target=target, target_name=name), best, i
                ),
                caption="Every finished trial's value and the best value so far; the star is the best trial.",
            )
        )
    return out


def curves_panel(study: optuna.Study, frames: Frames, decision: Decision) -> Panel:
    snap = snapshot(study)
    why = None if len(frames.metrics) or _any_intermediate(snap) else "no trial has reported a metric yet"
    panel = _guard("curves", "Learning curves", why, lambda: learning_curves(snap, frames, decision.best))
    if isinstance(panel.figure, dict):
        panel.height = int(panel.figure["layout"].get("height", 450))
    return panel


def cost_panels(study: optuna.Study, frames: Frames, decision: Decision) -> list[Panel]:
    snap = snapshot(study)
    goals = study_objectives(snap)
    multi = len(goals) > 1
    return [
        _guard(
            f"cost{i}",
            "Quality against cost" + (f" ({goal.metric})" if multi else ""),
            None if len(frames.trials) else "no trials yet",
            functools.partial(cost_figure, snap, frames, decision.best, i),
            caption="Left: each trial's value against the device-seconds it used (pruned trials at their last "
            "reported value); the green steps are the cost front, the trials no cheaper trial beats. Right: the "
            "best value so far against the study's cumulative device-seconds.",
        )
        for i, goal in enumerate(goals)
    ]


# ------------------------------------------------------------------------------------------ helpers
def _target(i: int, goal: Objective, multi: bool) -> tuple[Callable[[FrozenTrial], float] | None, str]:
    if not multi:
        return None, goal.metric
    return (lambda t: t.values[i]), goal.metric


def _joined(*sentences: str | None) -> str | None:
    return " ".join(s for s in sentences if s) or None


def _need(complete: Sequence[FrozenTrial], n: int, params: Sequence[str] | None) -> str | None:
    """Why a plot cannot be drawn yet (None: it can)."""
    if len(complete) < n:
        return f"needs at least {n} completed trial{'s' if n > 1 else ''} ({len(complete)} so far)"
    if params is not None and not params:
        return "the study has no parameters"
    return None


def _guard(
    id: str,
    title: str,
    why_not: str | None,
    draw: Callable[[], go.Figure | dict[str, Any]],
    caption: str | None = None,
) -> Panel:
    """A panel from ``draw()``; a note instead when ``why_not`` or when drawing raised.

    A report is a read-only view that every sweep ends with: one plot Optuna cannot draw for this
    study (say, a degenerate search space) becomes a note in the report rather than a lost report.
    """
    if why_not:
        return Panel(id, title, note=why_not)
    try:
        figure = draw()
    except Exception as err:
        log.warning("report: could not draw %s: %s", title, err)
        return Panel(id, title, note=f"could not draw this plot: {type(err).__name__}: {err}")
    if isinstance(figure, dict):
        figure["layout"].pop("title", None)
        figure["layout"].setdefault("margin", dict(MARGIN))
    else:
        figure.update_layout(title=None, margin=MARGIN)
    return Panel(id, title, figure=figure, caption=caption)


def _sample_note(shown: int, total: int) -> str | None:
    if shown >= total:
        return None
    return (
        f"Drawn from {shown} of {total} completed trials: the best half of that budget and an even spread of the rest."
    )


def sample_trials(study: optuna.Study, cap: int) -> list[FrozenTrial]:
    """At most ``cap`` of the study's completed trials: the best ``cap // 2`` and an even spread of the rest.

    Deterministic, in trial-number order. Best means by the first objective's value; every completed trial is
    a point here, a pbt study's earlier segments too (``best.ranked`` would leave them out: they are no
    candidates for the winner, but the plots show what every trial scored).
    """
    s = sign(study.directions[0])
    order = sorted(complete_trials(study), key=lambda t: (s * t.values[0], t.number))
    if len(order) <= cap:
        return sorted(order, key=lambda t: t.number)
    best, rest = order[: cap // 2], order[cap // 2 :]
    rest = sorted(rest, key=lambda t: t.number)
    picks = np.linspace(0, len(rest) - 1, cap - len(best)).round().astype(int)
    chosen = best + [rest[i] for i in sorted(set(picks.tolist()))]
    return sorted(chosen, key=lambda t: t.number)


def _pareto(
    snap: StudySnapshot, complete: Sequence[FrozenTrial], goals: Sequence[Objective], best: FrozenTrial | None
) -> Panel:
    names = [g.metric for g in goals]
    if len(names) > 3:
        return Panel(
            "pareto",
            "Pareto front",
            note=f"Optuna draws Pareto fronts of 2 or 3 objectives; this study has {len(names)}",
        )
    front = {t.number for t in snap.best_trials} if complete else set()
    sample = sample_trials(snap, MAX_PLOT_TRIALS)
    chosen = sorted(
        {t.number: t for t in [*sample, *(t for t in complete if t.number in front)]}.values(), key=lambda t: t.number
    )
    sub = snap.subset(chosen)
    return _guard(
        "pareto",
        "Pareto front",
        _need(complete, 1, None),
        lambda: _star_pareto(ov.plot_pareto_front(sub, target_names=names), best),
        caption=f"{len(front)} Pareto-optimal trial(s); the red star is the chosen trade-off (the front's best on "
        f"{names[0]}). " + (_sample_note(len(chosen), len(complete)) or ""),
    )


def _any_intermediate(snap: StudySnapshot) -> bool:
    return any(t.intermediate_values for t in snap.get_trials(deepcopy=False))


# ---------------------------------------------------------------------------- the best trial, marked
def _star_history(fig: go.Figure, best: FrozenTrial | None, index: int) -> go.Figure:
    if best is not None and best.values:
        fig.add_trace(best_star(best.number, best.values[index], best.number))
    return fig


def _star_contour(fig: go.Figure, best: FrozenTrial | None) -> go.Figure:
    """A star at the best trial's two parameters (a contour of two parameters is one plot)."""
    if best is None or not isinstance(fig.layout.xaxis.title.text, str):
        return fig
    x_name, y_name = fig.layout.xaxis.title.text, fig.layout.yaxis.title.text
    if x_name not in best.params or y_name not in best.params:
        return fig

    def shown(name: str, axis: Any) -> Any:  # Optuna draws a categorical parameter as its str()
        return str(best.params[name]) if axis.type == "category" else best.params[name]

    fig.add_trace(best_star(shown(x_name, fig.layout.xaxis), shown(y_name, fig.layout.yaxis), best.number))
    return fig


def _best_line_on_top(
    fig: go.Figure, study: optuna.Study, best: FrozenTrial | None, target: Callable[[FrozenTrial], float] | None
) -> go.Figure:
    """Draw the best trial's line red, thick and last (on top). Optuna draws one line per completed trial
    with a finite target, not in trial order (it groups them), and its first coordinate is the target scaled
    to [0, 1] over those trials: the best trial's line is the one at its scaled target. When the lines do not
    match those trials, nothing changes."""
    if best is None:
        return fig
    lines = [i for i, trace in enumerate(fig.data) if trace.mode == "lines" and trace.customdata is not None]
    value = target or (lambda t: t.values[0])
    drawn = [
        t
        for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
        if t.values and all(math.isfinite(v) for v in t.values) and math.isfinite(value(t))
    ]
    if len(lines) != len(drawn) or best.number not in {t.number for t in drawn}:
        return fig
    low, high = min(value(t) for t in drawn), max(value(t) for t in drawn)
    scaled = (value(best) - low) / (high - low) if high > low else None
    if scaled is None:  # every target equal: no line is distinguishable by it
        return fig
    at = min(lines, key=lambda i: abs(float(fig.data[i].y[0]) - scaled))
    traces = list(fig.data)
    line = traces.pop(at)
    line.update(line={"color": BEST_MARKER["color"], "width": 3.5}, opacity=1.0, name=f"best trial #{best.number}")
    fig.data = (*traces, line)
    return fig


def _star_pareto(fig: go.Figure, best: FrozenTrial | None) -> go.Figure:
    if best is None or not best.values:
        return fig
    name = f"chosen trade-off: best trial #{best.number}"
    if len(best.values) == 2:
        fig.add_trace(marker_trace(best.values[0], best.values[1], name, BEST_MARKER, legend=True))
    elif len(best.values) == 3:
        star = marker_trace(best.values[0], best.values[1], name, {**BEST_MARKER, "size": 8}, legend=True)
        star.update(type="scatter3d", z=[best.values[2]])
        for key in ("xaxis", "yaxis"):
            star.pop(key)
        star["hovertemplate"] = f"{name}<extra></extra>"
        fig.add_trace(star)
    return fig
