"""Learning curves: what happened in the runs, one subplot per metric, one line per trial with a seed band.

``learning_curves(study, frames, best)`` returns plotly figure JSON: a subplot for the objective as
reported to Optuna (single objective: what the pruner judged), then each of ``PANELS`` that some trial
reported (held-out accuracy greedy and sampled, training reward and accuracy, format reward, KL, entropy,
clip fraction, grad norm, response length, truncation rate, zero-variance groups). Each trial is the
mean over its seeds; a trial that ran several seeds also gets a band from the lowest to the highest
seed at each iteration (two traces: the lower edge and the upper edge filled down to it).

Pruned trials are faint and dashed, failed ones dotted, the best trial black, wider and drawn last; a red
x marks where a GRPO health rule fired. Hovering a line shows the trial's parameters.

The page's controls re-colour and smooth the curves in the browser (``html.CURVE_CONTROLS``): every
trace carries ``meta`` = ``{"t": trial, "k": "line" | "band", "s": 1 (smoothable)}``, and
``layout.meta`` holds, per colouring (``trial`` and each searched parameter), a colour per trial and the
key to show (``colour_maps``).

Budget: at most ``MAX_CURVE_TRIALS`` trials (the best first, see ``curve_trials``), each curve thinned
to ``MAX_CURVE_POINTS`` points.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import optuna
import pandas as pd
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.trial import FrozenTrial, TrialState
from plotly.colors import sample_colorscale

from grpo.report import diagnostics
from grpo.report._figure import (
    BEST_LINE_COLOR,
    BEST_LINE_WIDTH,
    FAIL_COLOR,
    MISSING_COLOR,
    PALETTE,
    PRUNED_COLOR,
    axis_title,
    finite_list,
    grid,
)
from grpo.report._snapshot import StudySnapshot, snapshot
from grpo.report.best import ranked
from grpo.report.chains import resumed_at, retry_chains
from grpo.report.collect import Frames, study_objectives
from grpo.report.slices import params_text

MAX_CURVE_TRIALS = 100
MAX_CURVE_POINTS = 150

# (title, candidate metric names): the first name a trial reported is drawn.
PANELS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("held-out accuracy, greedy", ("eval/acc_greedy",)),
    ("held-out accuracy, sampled", ("eval/acc",)),
    ("training reward", diagnostics.REWARD),
    ("training accuracy", ("grpo/acc/mean",)),
    ("format reward", diagnostics.FORMAT),
    ("KL to the reference", diagnostics.KL),
    ("entropy", diagnostics.ENTROPY),
    ("clip fraction", diagnostics.CLIP_FRACTION),
    ("grad norm", ("actor/grad_norm", "grpo/grad_norm")),
    ("response length", diagnostics.RESPONSE_LENGTH),
    ("truncated responses", diagnostics.TRUNCATED),
    ("zero-variance groups", diagnostics.ZERO_VARIANCE),
)

STATE_STYLE: dict[str, dict[str, Any]] = {  # pruned and failed trials stay visible but quiet
    "COMPLETE": {"dash": "solid", "width": 1.6, "opacity": 1.0},
    "RUNNING": {"dash": "dashdot", "width": 1.4, "opacity": 0.9},
    "PRUNED": {"dash": "dash", "width": 1.1, "opacity": 0.35},
    "FAIL": {"dash": "dot", "width": 1.1, "opacity": 0.5},
}
BAND_ALPHA = 0.18
SCALE_SPAN = 0.85  # of Viridis: its last 15 % is a yellow too pale for a line on white


def curve_trials(
    study: optuna.Study, best: FrozenTrial | None = None, cap: int = MAX_CURVE_TRIALS
) -> list[FrozenTrial]:
    """Trials whose curves are drawn: all of them up to ``cap``; beyond, ``best``, the best completed
    (60 %), the running ones, then an even spread of pruned and failed trials."""
    snap = snapshot(study)
    trials = [t for t in snap.get_trials(deepcopy=False) if t.state != TrialState.WAITING]
    chains, by_number = retry_chains(trials), {t.number: t for t in trials}
    # A retry that resumed holds its attempt's curve up to the checkpoint: draw the chain once, as the retry.
    superseded = {n for n, after in chains.successor.items() if after in by_number and resumed_at(by_number[after])}
    trials = [t for t in trials if t.number not in superseded]
    if len(trials) <= cap:
        return trials
    top = ranked(snap)[: int(cap * 0.6)]
    if best is not None and all(t.number != best.number for t in top):
        top = [best, *top[:-1]]
    running = [t for t in trials if t.state == TrialState.RUNNING][: cap // 10]
    others = [t for t in trials if t.state in (TrialState.PRUNED, TrialState.FAIL)]
    room = cap - len(top) - len(running)
    if others and room > 0:
        picks = sorted(set(np.linspace(0, len(others) - 1, room).round().astype(int).tolist()))
        others = [others[i] for i in picks]
    else:
        others = []
    return sorted({t.number: t for t in [*top, *running, *others]}.values(), key=lambda t: t.number)


def _thin(n: int, cap: int = MAX_CURVE_POINTS) -> np.ndarray:
    """Indices of at most ``cap`` evenly spaced points of ``n``, always keeping the first and the last."""
    if n <= cap:
        return np.arange(n)
    return np.unique(np.linspace(0, n - 1, cap).round().astype(int))


def _hex(color: str) -> str:
    if color.startswith("#"):
        return color
    r, g, b = (int(float(v)) for v in color[color.index("(") + 1 : color.index(")")].split(",")[:3])
    return f"#{r:02x}{g:02x}{b:02x}"


def rgba(color: str, alpha: float) -> str:
    h = _hex(color).lstrip("#")
    return f"rgba({int(h[0:2], 16)},{int(h[2:4], 16)},{int(h[4:6], 16)},{alpha})"


# ------------------------------------------------------------------------------------------ colours
def trial_colours(trials: Sequence[FrozenTrial], best: int | None) -> dict[int, str]:
    """The default colouring: one palette colour per trial, pruned grey, failed red, the best black."""
    out = {}
    for j, t in enumerate(trials):
        if t.number == best:
            out[t.number] = BEST_LINE_COLOR
        elif t.state == TrialState.PRUNED:
            out[t.number] = PRUNED_COLOR
        elif t.state == TrialState.FAIL:
            out[t.number] = FAIL_COLOR
        else:
            out[t.number] = PALETTE[j % len(PALETTE)]
    return out


def param_colours(trials: Sequence[FrozenTrial], param: str) -> tuple[dict[int, str], list[tuple[str, str]]]:
    """Each trial's colour by ``param`` and the key (label, colour): a palette colour per choice of a
    categorical parameter, Viridis over the drawn range (log scale for log parameters) otherwise;
    grey where a trial has no value (a conditional parameter)."""
    having = [t for t in trials if param in t.params]
    if not having:
        return {}, []
    distribution = having[0].distributions[param]
    out = {t.number: MISSING_COLOR for t in trials}
    if isinstance(distribution, CategoricalDistribution):
        order = {repr(c): i for i, c in enumerate(distribution.choices)}
        for t in having:
            out[t.number] = PALETTE[order.get(repr(t.params[param]), 0) % len(PALETTE)]
        key = [(str(c), PALETTE[i % len(PALETTE)]) for i, c in enumerate(distribution.choices)]
    else:
        log = isinstance(distribution, (FloatDistribution, IntDistribution)) and distribution.log
        raw = np.asarray([float(t.params[param]) for t in having])
        values = np.log10(raw) if log else raw
        low, high = float(values.min()), float(values.max())
        span = high - low or 1.0
        colours = sample_colorscale("Viridis", list((values - low) / span * SCALE_SPAN))
        for t, c in zip(having, colours, strict=True):
            out[t.number] = _hex(c)
        steps = np.linspace(low, high, 5 if high > low else 1)
        key = [
            (f"{(10**s if log else s):.3g}", _hex(sample_colorscale("Viridis", [(s - low) / span * SCALE_SPAN])[0]))
            for s in steps
        ]
    if len(having) < len(trials):
        key.append(("not set", MISSING_COLOR))
    return out, key


def colour_maps(trials: Sequence[FrozenTrial], best: int | None) -> dict[str, Any]:
    """``{"colours": {colouring: {trial: colour}}, "keys": {colouring: [[label, colour]...]}}`` for the page."""
    default = trial_colours(trials, best)
    colours = {"trial": {str(n): c for n, c in default.items()}}
    keys: dict[str, list[list[str]]] = {
        "trial": [["best trial", BEST_LINE_COLOR], ["pruned", PRUNED_COLOR], ["failed", FAIL_COLOR]]
    }
    for param in sorted({p for t in trials for p in t.params}):
        by_trial, key = param_colours(trials, param)
        colours[param] = {str(n): c for n, c in by_trial.items()}
        keys[param] = [[label, c] for label, c in key]
    return {"colours": colours, "keys": keys}


# ------------------------------------------------------------------------------------------- figure
def _rows(snap: StudySnapshot, present: set[str]) -> list[tuple[str, str | None]]:
    """(title, metric) of each subplot; metric None: the objective as reported to Optuna."""
    goals = study_objectives(snap)
    objective_metrics = {g.metric for g in goals}
    rows: list[tuple[str, str | None]] = []
    if len(goals) == 1:
        rows.append(
            (f"objective: {goals[0].metric}" + (f" ({goals[0].reduce} so far)" if goals[0].reduce else ""), None)
        )
    panel_names = {n for _, names in PANELS for n in names}
    for goal in goals:
        if len(goals) > 1 and goal.metric in present and goal.metric not in panel_names:
            rows.append((f"objective: {goal.metric}", goal.metric))
    for title, names in PANELS:
        name = next((n for n in names if n in present), None)
        if name:
            mark = " (objective)" if name in objective_metrics else ""
            rows.append((f"{title}: {name}{mark}", name))
    return rows


def _series(metrics: pd.DataFrame, wanted: list[str]) -> dict[str, dict[int, tuple[np.ndarray, ...]]]:
    """metric -> trial -> (iterations, mean, min, max, seeds) over the trial's seeds, per iteration."""
    part = metrics[metrics["metric"].isin(wanted)]
    if part.empty:
        return {}
    agg = part.groupby(["metric", "trial", "iteration"], sort=True)["value"].agg(["mean", "min", "max", "count"])
    out: dict[str, dict[int, tuple[np.ndarray, ...]]] = {}
    metric_level = agg.index.get_level_values(0).to_numpy()
    trial_level = agg.index.get_level_values(1).to_numpy()
    iteration_level = agg.index.get_level_values(2).to_numpy(dtype=float)
    columns = [agg[c].to_numpy(dtype=float) for c in ("mean", "min", "max", "count")]
    # Boundaries of each (metric, trial) run in the sorted index: one slice per curve, no per-group pandas.
    keys = list(zip(metric_level, trial_level, strict=True))
    starts = [0] + [i for i in range(1, len(keys)) if keys[i] != keys[i - 1]] + [len(keys)]
    for a, b in itertools.pairwise(starts):
        metric, trial = keys[a]
        out.setdefault(str(metric), {})[int(trial)] = (iteration_level[a:b], *(c[a:b] for c in columns))
    return out


def learning_curves(study: optuna.Study, frames: Frames, best: FrozenTrial | None = None) -> dict[str, Any]:
    """The learning-curves figure JSON (see the module docstring)."""
    snap = snapshot(study)
    shown = curve_trials(snap, best)
    best_number = best.number if best is not None else None
    shown.sort(key=lambda t: t.number == best_number)  # the best trial last: drawn on top
    numbers = {t.number for t in shown}
    metrics = frames.metrics[frames.metrics["trial"].isin(numbers)]
    present = set(metrics["metric"].unique())
    rows = _rows(snap, present)
    series = _series(metrics, [m for _, m in rows if m])
    layout, refs = grid(len(rows), [title for title, _ in rows], 360)
    maps = colour_maps(shown, best_number)
    colours = maps["colours"]["trial"]
    hover = {t.number: _hover_head(t, best_number) for t in shown}
    traces: list[dict[str, Any]] = []
    flag_legend = True
    for k, (_, metric) in enumerate(rows):
        ref = refs[k]
        for trial in shown:
            curve = _curve(trial, metric, series)
            if curve is None:
                continue
            x, mean, low, high, seeds = curve
            keep = _thin(len(x))
            x, mean, low, high = x[keep], mean[keep], low[keep], high[keep]
            n_seeds = int(seeds.max()) if len(seeds) else 1
            style = STATE_STYLE.get(trial.state.name, STATE_STYLE["COMPLETE"])
            colour = colours[str(trial.number)]
            is_best = trial.number == best_number
            group = f"t{trial.number}"
            xs = x.tolist()
            if n_seeds > 1:
                common = {
                    "type": "scatter",
                    "mode": "lines",
                    "x": xs,
                    "xaxis": ref[0],
                    "yaxis": ref[1],
                    "legendgroup": group,
                    "showlegend": False,
                    "hoverinfo": "skip",
                    "opacity": style["opacity"],
                    "line": {"width": 0, "color": colour},
                }
                traces.append(
                    {
                        **common,
                        "y": finite_list(low),
                        "name": f"#{trial.number} lowest seed",
                        "meta": {"t": str(trial.number), "k": "edge", "s": 1},
                    }
                )
                traces.append(
                    {
                        **common,
                        "y": finite_list(high),
                        "name": f"seed band #{trial.number}",
                        "fill": "tonexty",
                        "fillcolor": rgba(colour, BAND_ALPHA),
                        "meta": {"t": str(trial.number), "k": "band", "s": 1},
                    }
                )
            seeds_text = f"mean of {n_seeds} seeds (band: lowest to highest)" if n_seeds > 1 else "1 seed"
            traces.append(
                {
                    "type": "scatter",
                    "mode": "lines+markers" if len(xs) == 1 else "lines",
                    "x": xs,
                    "y": finite_list(mean),
                    "xaxis": ref[0],
                    "yaxis": ref[1],
                    "name": f"#{trial.number} {trial.state.name.lower()}" + (" (best)" if is_best else ""),
                    "legendgroup": group,
                    "showlegend": k == 0,
                    "opacity": style["opacity"],
                    "line": {
                        "dash": style["dash"],
                        "color": colour,
                        "width": style["width"] * (BEST_LINE_WIDTH if is_best else 1),
                    },
                    "meta": {"t": str(trial.number), "k": "line", "s": 1},
                    "hovertemplate": f"{hover[trial.number]}<br>{seeds_text}<br>iteration %{{x}}: %{{y:.4g}}"
                    "<extra></extra>",
                }
            )
        marks = [
            (n, f)
            for n, flags in frames.flags.items()
            if n in numbers
            for f in flags
            if metric is not None and f.metric == metric and math.isfinite(f.value)
        ]
        if marks:
            traces.append(
                {
                    "type": "scatter",
                    "mode": "markers",
                    "xaxis": ref[0],
                    "yaxis": ref[1],
                    "x": [f.iteration for _, f in marks],
                    "y": [f.value for _, f in marks],
                    "marker": {"symbol": "x", "size": 11, "color": "#d62728"},
                    "name": "health flag",
                    "legendgroup": "flags",
                    "showlegend": flag_legend,
                    "text": [f"trial {n}: {f.name} at iteration {f.iteration}" for n, f in marks],
                    "hovertemplate": "%{text}<extra></extra>",
                }
            )
            flag_legend = False
        axis_title(layout, ref[0], "iteration")
    layout["legend"] = {"font": {"size": 10}}
    layout["meta"] = maps
    return {"data": traces, "layout": layout}


def _curve(trial: FrozenTrial, metric: str | None, series: dict) -> tuple[np.ndarray, ...] | None:
    if metric is None:  # the objective as reported to Optuna (the first seed's, what the pruner saw)
        iv = trial.intermediate_values
        if not iv:
            return None
        steps = sorted(iv)
        x = np.asarray(steps, dtype=float)
        y = np.asarray([iv[s] for s in steps], dtype=float)
        return x, y, y, y, np.ones(len(y))
    return series.get(metric, {}).get(trial.number)


def _hover_head(trial: FrozenTrial, best: int | None) -> str:
    state = trial.state.name.lower() + (", best" if trial.number == best else "")
    params = params_text(trial)
    return f"trial {trial.number} ({state})" + (f"<br>{params}" if params else "")
