"""The report's figures (plotly): Optuna's own plots where Optuna has one, plus learning curves and compute.

``panels(study, frames)`` returns the report's plots in order, each a ``Panel`` holding a figure or, when
the plot cannot be drawn yet (too few completed trials, no parameter), a note saying why.

Big studies stay fast and small because every plot has a budget:

- Optuna's plots read a ``StudySnapshot`` (the trials read once), never the storage.
- Slice and Pareto plots draw at most ``MAX_PLOT_TRIALS`` completed trials, parallel coordinates at
  most ``MAX_PARALLEL_TRIALS`` (one SVG line each), the contour at most ``MAX_CONTOUR_TRIALS`` (its
  figure grows with the square of the trials): the best half of the budget plus an even spread of the
  rest. The optimisation history draws every trial.
- Parameter importances use Optuna's default fANOVA up to ``FANOVA_MAX_TRIALS`` completed trials (its
  random forest grows faster than linearly) and Optuna's PED-ANOVA evaluator beyond.
- Learning curves draw at most ``MAX_CURVE_TRIALS`` trials (every trial of a smaller study), each curve
  thinned to ``MAX_CURVE_POINTS`` points.
- The report's own figures (learning curves, compute) are plotly figure JSON: the layout from
  ``make_subplots``, the traces appended as plain dicts (thousands of validated graph objects would
  cost more than the rest of the report).

Every plot that shows trials marks the best trial (``grpo.report.best.best_trial``) the same way: a
red star (``BEST_MARKER``), or a black, thicker line for curves.
"""

from __future__ import annotations

import datetime as dt
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
from optuna.importance import BaseImportanceEvaluator, FanovaImportanceEvaluator, PedAnovaImportanceEvaluator
from optuna.trial import FrozenTrial, TrialState
from plotly.subplots import make_subplots

from grpo.report import diagnostics
from grpo.report._snapshot import StudySnapshot, snapshot
from grpo.report.best import best_trial, ranked, sign
from grpo.report.collect import Frames, Objective, study_objectives

log = logging.getLogger(__name__)

MAX_PLOT_TRIALS = 1000
MAX_PARALLEL_TRIALS = 300  # Optuna draws one SVG line (trace) per trial
MAX_CONTOUR_TRIALS = 300
FANOVA_MAX_TRIALS = 100
MAX_CURVE_TRIALS = 100
MAX_CURVE_POINTS = 150

# Learning-curve rows after the objective(s): (title, candidate metric names).
CURVE_METRICS = (
    ("reward", ("grpo/score/mean", "grpo/rewards/mean")),
    ("accuracy", diagnostics.ACCURACY),
    ("format reward", diagnostics.FORMAT),
    ("KL", diagnostics.KL),
    ("entropy", diagnostics.ENTROPY),
    ("response length", diagnostics.RESPONSE_LENGTH),
)

BEST_MARKER = {"symbol": "star", "size": 16, "color": "#d62728", "line": {"color": "#000000", "width": 1}}
BEST_LINE_COLOR, BEST_LINE_WIDTH = "#000000", 2.2  # the best trial's curve: black, 2.2x as wide

STATE_STYLE: dict[str, dict[str, Any]] = {  # how a trial's curve looks: pruned and failed ones must stand out
    "COMPLETE": {"dash": "solid", "color": None, "width": 1.6},
    "RUNNING": {"dash": "dashdot", "color": None, "width": 1.4},
    "PRUNED": {"dash": "dash", "color": "#9a9a9a", "width": 1.2},
    "FAIL": {"dash": "dot", "color": "#d62728", "width": 1.2},
}


@dataclass
class Panel:
    """One plot of the report: ``figure``, or ``note`` saying why there is none; ``caption`` under it."""

    id: str
    title: str
    figure: go.Figure | dict[str, Any] | None = None  # a plotly figure or plotly figure JSON
    note: str | None = None
    caption: str | None = None


def panels(study: optuna.Study, frames: Frames) -> list[Panel]:
    """Every plot of the report, in report order (Pareto only for multi-objective studies)."""
    snap = snapshot(study)
    goals = study_objectives(snap)
    complete = snap.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    params = sorted({p for t in complete for p in t.params})
    multi = len(goals) > 1
    best = best_trial(snap)
    out: list[Panel] = []

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
    importances: dict[str, float] = {}
    for i, goal in enumerate(goals):
        suffix = f" ({goal.metric})" if multi else ""
        target, name = _target(i, goal, multi)
        panel, result = _importances(snap, complete, params, target, name, f"importances{i}", suffix)
        out.append(panel)
        if i == 0:
            importances = result

    sample = snap.subset(sample_trials(snap, MAX_PLOT_TRIALS))
    note = _sample_note(len(sample.get_trials()), len(complete))
    target, name = _target(0, goals[0], multi)
    first = f" ({goals[0].metric})" if multi else ""  # several objectives: these plots show the first
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
    out.append(
        _guard(
            "slice",
            f"Slice plots{first}",
            _need(complete, 1, params),
            lambda: _star_slices(ov.plot_slice(sample, target=target, target_name=name), best),
            caption=_joined("The star is the best trial.", note),
        )
    )

    top2 = [p for p in sorted(importances, key=lambda p: importances[p], reverse=True)][:2]
    if len(top2) < 2:
        top2 = params[:2]
    contour_sample = snap.subset(sample_trials(snap, MAX_CONTOUR_TRIALS))
    contour_why = _need(complete, 2, params) or (None if len(params) >= 2 else "needs at least 2 parameters")
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
    if multi:
        out.append(_pareto(snap, complete, goals, best))
    out.append(
        _guard(
            "curves",
            "Learning curves",
            None if len(frames.metrics) or _any_intermediate(snap) else "no trial has reported a metric yet",
            lambda: learning_curves(snap, frames),
        )
    )
    for i, goal in enumerate(goals):
        suffix = f" ({goal.metric})" if multi else ""
        out.append(
            _guard(
                f"compute{i}",
                f"Objective against compute{suffix}",
                None if len(frames.trials) else "no trials yet",
                functools.partial(objective_vs_compute, snap, frames, i),
                caption="Left: each trial's value against the device-seconds it used (pruned trials at "
                "their last reported value; the star is the best trial). Right: the best value so far "
                "against the study's cumulative compute.",
            )
        )
    return out


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
    margin = {"t": 30, "l": 60, "r": 20, "b": 50}
    if isinstance(figure, dict):
        figure["layout"].pop("title", None)
        figure["layout"]["margin"] = margin
    else:
        figure.update_layout(title=None, margin=margin)
    return Panel(id, title, figure=figure, caption=caption)


def _sample_note(shown: int, total: int) -> str | None:
    if shown >= total:
        return None
    return (
        f"Drawn from {shown} of {total} completed trials: the best half of that budget and an even spread of the rest."
    )


def sample_trials(study: optuna.Study, cap: int) -> list[FrozenTrial]:
    """At most ``cap`` of the study's completed trials: the best ``cap // 2`` and an even spread of the rest.

    Deterministic, in trial-number order. Best means by the first objective (``grpo.report.best.ranked``).
    """
    order = ranked(study)
    if len(order) <= cap:
        return sorted(order, key=lambda t: t.number)
    best, rest = order[: cap // 2], order[cap // 2 :]
    rest = sorted(rest, key=lambda t: t.number)
    picks = np.linspace(0, len(rest) - 1, cap - len(best)).round().astype(int)
    chosen = best + [rest[i] for i in sorted(set(picks.tolist()))]
    return sorted(chosen, key=lambda t: t.number)


class _Remembering(BaseImportanceEvaluator):
    """Wraps an Optuna importance evaluator and keeps its result (to pick the contour's parameters)."""

    def __init__(self, inner: BaseImportanceEvaluator):
        self.inner = inner
        self.result: dict[str, float] = {}

    def evaluate(
        self,
        study: optuna.Study,
        params: list[str] | None = None,
        *,
        target: Callable[[FrozenTrial], float] | None = None,
    ) -> dict[str, float]:
        self.result = dict(self.inner.evaluate(study, params=params, target=target))
        return self.result


def _importances(
    snap: StudySnapshot,
    complete: Sequence[FrozenTrial],
    params: Sequence[str],
    target: Callable[[FrozenTrial], float] | None,
    name: str,
    id: str,
    suffix: str,
) -> tuple[Panel, dict[str, float]]:
    title = f"Parameter importances{suffix}"
    why = _need(complete, 2, params)
    if why:
        return Panel(id, title, note=why), {}
    if len(complete) <= FANOVA_MAX_TRIALS:
        evaluator, which = _Remembering(FanovaImportanceEvaluator(seed=0)), "fANOVA (Optuna's default)"
    else:
        evaluator, which = (
            _Remembering(PedAnovaImportanceEvaluator()),
            "PED-ANOVA (fANOVA is too slow for this many trials)",
        )
    panel = _guard(
        id,
        title,
        None,
        lambda: ov.plot_param_importances(snap, evaluator=evaluator, target=target, target_name=name),
        caption=f"Importance by {which}, over {len(complete)} completed trials.",
    )
    return panel, evaluator.result


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
        caption=f"{len(front)} Pareto-optimal trial(s); the star is the one best on the first objective. "
        + (_sample_note(len(chosen), len(complete)) or ""),
    )


def _any_intermediate(snap: StudySnapshot) -> bool:
    return any(t.intermediate_values for t in snap.get_trials(deepcopy=False))


# ---------------------------------------------------------------------------------- learning curves
def curve_trials(snap: StudySnapshot, cap: int = MAX_CURVE_TRIALS) -> list[FrozenTrial]:
    """Trials whose curves are drawn: all of them up to ``cap``; beyond, the best completed (60 %), the
    running ones, then an even spread of pruned and failed trials."""
    trials = [t for t in snap.get_trials(deepcopy=False) if t.state != TrialState.WAITING]
    if len(trials) <= cap:
        return trials
    best = ranked(snap)[: int(cap * 0.6)]
    running = [t for t in trials if t.state == TrialState.RUNNING][: cap // 10]
    others = [t for t in trials if t.state in (TrialState.PRUNED, TrialState.FAIL)]
    room = cap - len(best) - len(running)
    if others and room > 0:
        picks = sorted(set(np.linspace(0, len(others) - 1, room).round().astype(int).tolist()))
        others = [others[i] for i in picks]
    else:
        others = []
    return sorted([*best, *running, *others], key=lambda t: t.number)


def _thin(x: np.ndarray, y: np.ndarray, cap: int = MAX_CURVE_POINTS) -> tuple[list[float], list[float | None]]:
    """At most ``cap`` evenly spaced points of a curve, always keeping the first and the last."""
    if len(x) > cap:
        keep = np.unique(np.linspace(0, len(x) - 1, cap).round().astype(int))
        x, y = x[keep], y[keep]
    return x.tolist(), [None if not np.isfinite(v) else float(v) for v in y]


def _grid(n: int, titles: list[str], height: int) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    """Layout JSON of ``n`` subplots in two columns (``make_subplots``) and each cell's (xaxis, yaxis) refs."""
    cols = 2 if n > 1 else 1
    rows = max(1, -(-n // cols))
    specs: list[list[dict[str, Any] | None]] = [
        [{} if r * cols + c < n else None for c in range(cols)] for r in range(rows)
    ]
    fig = make_subplots(
        rows=rows,
        cols=cols,
        specs=specs,
        subplot_titles=titles,
        horizontal_spacing=0.08,
        vertical_spacing=min(0.1, 0.3 / rows),
    )
    layout = fig.layout.to_plotly_json()
    layout.pop("template", None)  # plotly.js's defaults: the same look, 10 kB less per figure
    layout.update(height=max(height, 290 * rows), hovermode="closest")
    refs = []
    for k in range(n):
        cell = fig.get_subplot(k // cols + 1, k % cols + 1)
        refs.append((cell.xaxis.plotly_name.replace("axis", ""), cell.yaxis.plotly_name.replace("axis", "")))
    return layout, refs


def _axis_title(layout: dict[str, Any], ref: str, text: str) -> None:
    key = ref[0] + "axis" + ref[1:]
    layout.setdefault(key, {})["title"] = {"text": text}


def learning_curves(study: optuna.Study, frames: Frames) -> dict[str, Any]:
    """One subplot per curve (the objective(s), reward, accuracy, format reward, KL, entropy, response
    length; those no trial reported are left out), one line per trial (mean over seeds).

    The objective row of a single-objective study shows the value reported to Optuna per iteration
    (what the pruner judged); pruned trials are grey and dashed, failed ones red and dotted, and a
    red x marks where a diagnostic fired; the best trial is black and thicker. Returns plotly figure JSON.
    """
    snap = snapshot(study)
    goals = study_objectives(snap)
    multi = len(goals) > 1
    shown = curve_trials(snap)
    numbers = {t.number for t in shown}
    m = frames.metrics
    m = m[m["trial"].isin(numbers)]
    present = set(m["metric"].unique())
    rows: list[tuple[str, str | None]] = []  # (title, metric; None = Optuna's intermediate values)
    for goal in goals:
        if not multi:
            rows.append((f"objective: {goal.metric} (reported to Optuna)", None))
        elif goal.metric in present:
            rows.append((f"objective: {goal.metric}", goal.metric))
    for title, names in CURVE_METRICS:
        name = next((n for n in names if n in present), None)
        if name:
            rows.append((f"{title}: {name}", name))
    wanted = [r[1] for r in rows if r[1]] + [goals[0].metric]
    curves = m[m["metric"].isin(wanted)].groupby(["metric", "trial", "iteration"], sort=True)["value"].mean()
    by_metric = {
        name: {t: (g.index.get_level_values(2).to_numpy(float), g.to_numpy(float)) for t, g in part.groupby(level=1)}
        for name, part in curves.groupby(level=0)
    }

    layout, refs = _grid(len(rows), [r[0] for r in rows], 360)
    top = best_trial(snap)
    best = top.number if top is not None else None
    palette = ["#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22"]
    traces: list[dict] = []
    flag_legend = True
    for k, (_, metric) in enumerate(rows):
        xref, yref = refs[k]
        series = by_metric.get(metric if metric else goals[0].metric, {})
        for j, trial in enumerate(shown):
            iv = trial.intermediate_values if metric is None else None
            if iv:
                steps = sorted(iv)
                x, y = np.array(steps, dtype=float), np.array([iv[s] for s in steps], dtype=float)
            elif trial.number in series:
                x, y = series[trial.number]
            else:
                continue
            xs, ys = _thin(x, y)
            style = STATE_STYLE.get(trial.state.name, STATE_STYLE["COMPLETE"])
            traces.append(
                {
                    "type": "scatter",
                    "mode": "lines",
                    "x": xs,
                    "y": ys,
                    "xaxis": xref,
                    "yaxis": yref,
                    "name": f"#{trial.number} {trial.state.name}" + (" (best)" if trial.number == best else ""),
                    "legendgroup": f"t{trial.number}",
                    "showlegend": k == 0,
                    "line": {
                        "dash": style["dash"],
                        "color": BEST_LINE_COLOR
                        if trial.number == best
                        else (style["color"] or palette[j % len(palette)]),
                        "width": style["width"] * (BEST_LINE_WIDTH if trial.number == best else 1),
                    },
                    "hovertemplate": f"trial {trial.number} ({trial.state.name})"
                    "<br>iteration %{x}<br>%{y:.4g}<extra></extra>",
                }
            )
        marks = [
            (n, f)
            for n, flags in frames.flags.items()
            if n in numbers
            for f in flags
            if metric is not None and f.metric == metric and np.isfinite(f.value)
        ]
        if marks:
            traces.append(
                {
                    "type": "scatter",
                    "mode": "markers",
                    "xaxis": xref,
                    "yaxis": yref,
                    "x": [f.iteration for _, f in marks],
                    "y": [f.value for _, f in marks],
                    "marker": {"symbol": "x", "size": 11, "color": "#d62728"},
                    "name": "diagnostic flag",
                    "legendgroup": "flags",
                    "showlegend": flag_legend,
                    "text": [f"trial {n}: {f.name}" for n, f in marks],
                    "hovertemplate": "%{text}<extra></extra>",
                }
            )
            flag_legend = False
        _axis_title(layout, xref, "iteration")
    layout["legend"] = {"font": {"size": 10}}
    return {"data": traces, "layout": layout}


# ------------------------------------------------------------------------------------------ compute
def objective_vs_compute(study: optuna.Study, frames: Frames, index: int = 0) -> dict[str, Any]:
    """Left: each trial's objective ``index`` against its compute; right: best so far against cumulative compute.

    Pruned trials sit at their last reported (intermediate) value as grey crosses; trials with a
    diagnostic flag get a red ring that names the flags on hover. Returns plotly figure JSON.
    """
    snap = snapshot(study)
    goal = study_objectives(snap)[index]
    better = sign(snap.directions[index])  # better * value: smaller is better
    top = best_trial(snap)
    compute = dict(zip(frames.trials["number"].tolist(), frames.trials["compute_s"].tolist(), strict=True))
    layout, refs = _grid(2, ["per trial", "best so far vs cumulative compute"], 420)
    groups: dict[str, list[tuple[float, float, int, list[diagnostics.Flag]]]] = {"COMPLETE": [], "PRUNED": []}
    for trial in snap.get_trials(deepcopy=False):
        c = compute.get(trial.number)
        if c is None or not np.isfinite(c):
            continue
        if trial.state == TrialState.COMPLETE:
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
                "name": state.lower(),
                "xaxis": refs[0][0],
                "yaxis": refs[0][1],
                "x": [p[0] for p in points],
                "y": [p[1] for p in points],
                "marker": {
                    "symbol": "x" if pruned else "circle",
                    "size": 7,
                    "color": "#9a9a9a" if pruned else "#1f77b4",
                },
                "text": [f"trial {p[2]}" for p in points],
                "hovertemplate": "%{text}<br>compute %{x:.4g} s<br>value %{y:.4g}<extra></extra>",
            }
        )
    flagged = [p for points in groups.values() for p in points if p[3]]
    if flagged:  # a red ring around each flagged trial, naming its flags on hover
        traces.append(
            {
                "type": "scatter",
                "mode": "markers",
                "name": "diagnostic flag",
                "xaxis": refs[0][0],
                "yaxis": refs[0][1],
                "x": [p[0] for p in flagged],
                "y": [p[1] for p in flagged],
                "marker": {"symbol": "circle-open", "size": 14, "color": "#d62728", "line": {"width": 2}},
                "text": [f"trial {p[2]}: " + ", ".join(f.name for f in p[3]) for p in flagged],
                "hovertemplate": "%{text}<extra></extra>",
            }
        )
    finished = [tr for tr in snap.get_trials(deepcopy=False) if tr.state.is_finished()]
    finished.sort(key=lambda tr: (tr.datetime_complete or tr.datetime_start or dt.datetime.max, tr.number))
    total, best = 0.0, None  # best: the best value so far
    xs: list[float] = []
    ys: list[float] = []
    for tr in finished:
        c = compute.get(tr.number)
        total += float(c) if c is not None and np.isfinite(c) else 0.0
        if tr.state == TrialState.COMPLETE:
            v = tr.values[index]
            best = v if best is None or better * v < better * best else best
        if best is not None:
            xs.append(total)
            ys.append(best)
    if xs:
        traces.append(
            {
                "type": "scatter",
                "mode": "lines",
                "line": {"shape": "hv"},
                "name": "best so far",
                "xaxis": refs[1][0],
                "yaxis": refs[1][1],
                "x": xs,
                "y": ys,
                "hovertemplate": "cumulative %{x:.4g} s<br>best %{y:.4g}<extra></extra>",
            }
        )
    _axis_title(layout, refs[0][0], "device-seconds (NPU-s, else CPU-s)")
    _axis_title(layout, refs[1][0], "cumulative device-seconds")
    if top is not None and math.isfinite(compute.get(top.number) or math.nan):
        traces.append(_best_star(compute[top.number], top.values[index], top.number, refs[0]))
    _axis_title(layout, refs[0][1], goal.metric)
    return {"data": traces, "layout": layout}


# ---------------------------------------------------------------------------- the best trial, marked
def _best_star(x: Any, y: Any, number: int, ref: tuple[str, str] = ("x", "y")) -> dict[str, Any]:
    return {
        "type": "scatter",
        "mode": "markers",
        "x": [x],
        "y": [y],
        "xaxis": ref[0],
        "yaxis": ref[1],
        "marker": BEST_MARKER,
        "name": f"best trial #{number}",
        "showlegend": False,
        "hovertemplate": f"best trial #{number}<br>%{{x}}<br>%{{y:.4g}}<extra></extra>",
    }


def _star_history(fig: go.Figure, best: FrozenTrial | None, index: int) -> go.Figure:
    if best is not None:
        fig.add_trace(_best_star(best.number, best.values[index], best.number))
    return fig


def _star_slices(fig: go.Figure, best: FrozenTrial | None) -> go.Figure:
    """A star on each slice subplot where the best trial was drawn (Optuna colours points by trial
    number, so an early best trial is a near-white dot)."""
    if best is None:
        return fig
    for trace in list(fig.data):
        numbers = list(getattr(trace.marker, "color", None) or []) if trace.name == "Feasible Trial" else []
        if best.number in numbers:
            at = numbers.index(best.number)
            ref = (trace.xaxis or "x", trace.yaxis or "y")
            fig.add_trace(_best_star(trace.x[at], trace.y[at], best.number, ref))
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

    fig.add_trace(_best_star(shown(x_name, fig.layout.xaxis), shown(y_name, fig.layout.yaxis), best.number))
    return fig


def _best_line_on_top(
    fig: go.Figure, study: optuna.Study, best: FrozenTrial | None, target: Callable[[FrozenTrial], float] | None
) -> go.Figure:
    """Draw the best trial's line red, thick and last (on top). Optuna draws one line per completed
    trial with a finite target, in trial order; when the lines do not match those trials, nothing changes."""
    if best is None:
        return fig
    lines = [i for i, trace in enumerate(fig.data) if trace.mode == "lines" and trace.customdata is not None]
    drawn = [
        t
        for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
        if t.values and all(math.isfinite(v) for v in t.values) and math.isfinite(target(t) if target else t.values[0])
    ]
    numbers = [t.number for t in drawn]
    if len(lines) != len(drawn) or best.number not in numbers:
        return fig
    at = lines[numbers.index(best.number)]
    traces = list(fig.data)
    line = traces.pop(at)
    line.update(line={"color": BEST_MARKER["color"], "width": 3.5}, opacity=1.0, name=f"best trial #{best.number}")
    fig.data = (*traces, line)
    return fig


def _star_pareto(fig: go.Figure, best: FrozenTrial | None) -> go.Figure:
    if best is None or not best.values:
        return fig
    if len(best.values) == 2:
        fig.add_trace(_best_star(best.values[0], best.values[1], best.number))
    elif len(best.values) == 3:
        star = _best_star(best.values[0], best.values[1], best.number)
        star.update(type="scatter3d", z=[best.values[2]], marker={**BEST_MARKER, "size": 8})
        for key in ("xaxis", "yaxis"):
            star.pop(key)
        star["hovertemplate"] = f"best trial #{best.number}<extra></extra>"
        fig.add_trace(star)
    return fig
