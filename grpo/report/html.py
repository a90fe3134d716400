"""The study report: ``reports/<study>/index.html``, one self-contained file that opens offline.

``write_report(study, out_dir)`` reads the study (storage + trial dirs, see ``collect``) and writes
``out_dir/index.html`` and, once a trial has completed, ``out_dir/best_config.yaml`` (the best trial's
resolved config; for a multi-objective study the Pareto-optimal trial best on the first objective).

The page holds one copy of plotly.js inlined (no CDN, no server: it opens from the file system) and,
in order: the header (study, spec, base config, sampler and pruner, trials by state, compute, time
span), the best trial, the GRPO diagnostics, the plots (``grpo.report.plots``), a sortable trial table
and per-trial detail sections (config diff against the base config, last log lines of failures).
Beyond ``MAX_DETAIL_ALL`` trials only the best, the failed and the running trials get a detail
section.

The config diffs are against the study's ``base_config`` attr (the composed base config the sweep
records when it creates the study); a study made before that attr existed is diffed against its first
trial's config, and the page says so. The report reads only storage and trial dirs: it composes nothing.

Every string that came from a user or a log (study name, parameter values, reasons, log lines, config
values) goes through ``html.escape`` (the trials table through pandas' ``Styler.format(escape="html")``);
figures are written by ``plotly.io.to_html``, whose JSON has ``<``, ``>`` and ``/`` escaped, so nothing
in it can close its ``<script>`` element.
"""

from __future__ import annotations

import collections
import contextlib
import datetime as dt
import gc
import json
import math
import re
from collections.abc import Iterator
from html import escape  # quote=True: safe in text and in attribute values
from pathlib import Path
from typing import Any

import optuna
import pandas as pd
import plotly.io as pio
import yaml
from optuna.trial import FrozenTrial, TrialState
from plotly.offline import get_plotlyjs

from grpo._fs import atomic_write_text, tail_lines
from grpo.errors import shorten
from grpo.report import diagnostics
from grpo.report._snapshot import StudySnapshot, snapshot
from grpo.report.best import best_trial, pareto_front, ranked
from grpo.report.collect import Frames, collect, spread_columns, study_objectives, trial_dir, value_columns
from grpo.report.plots import Panel, panels

MAX_DETAIL_ALL = 100  # up to this many trials, every trial gets a detail section
MAX_DETAIL_BEST = 50
MAX_DETAIL_FAILED = 50
MAX_DETAIL_RUNNING = 20
MAX_FLAGGED_ROWS = 200  # rows of the diagnostics list (every flag is also in the trial table)
LOG_TAIL_LINES = 20
STATE_ORDER = ("COMPLETE", "PRUNED", "FAIL", "RUNNING", "WAITING")
PLOT_CONFIG = {"responsive": True, "displaylogo": False}


def write_report(study: optuna.Study, out_dir: Path, spec_path: str | None = None) -> Path:
    """Write ``out_dir/index.html`` (and ``best_config.yaml``) for ``study``; return the index path.

    Works on a running or interrupted study too. Files are replaced atomically, so a browser never
    loads half a report. ``spec_path`` overrides the study's ``spec_path`` attr in the header.
    """
    out_dir = Path(out_dir)
    with _gc_frozen():
        snap = snapshot(study)
        frames = collect(snap)
        best = best_trial(snap)
        page = render(snap, frames, spec_path=spec_path, best=best)
    if best is not None and isinstance(best.user_attrs.get("config"), dict):
        atomic_write_text(out_dir / "best_config.yaml", yaml.safe_dump(best.user_attrs["config"], sort_keys=False))
    return atomic_write_text(out_dir / "index.html", page)


@contextlib.contextmanager
def _gc_frozen() -> Iterator[None]:
    """Keep the garbage collector off the objects that exist already (the study's trials) while the
    report is built: a 10,000-trial study holds millions of objects, and every full collection that
    the report's allocations trigger would walk them all (``gc.freeze``; unfrozen afterwards)."""
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


# -------------------------------------------------------------------------------------------- page
def render(study: optuna.Study, frames: Frames, spec_path: str | None = None, best: FrozenTrial | None = None) -> str:
    """The whole HTML page as a string (see the module docstring)."""
    snap = snapshot(study)
    if best is None:
        best = best_trial(snap)
    base, base_label = base_config(snap)
    plot_panels = panels(snap, frames)
    numbers = detail_numbers(snap)
    detail = set(numbers)
    sections = [
        _header(snap, frames, spec_path, best),
        _best(snap, frames, best, detail),
        _diagnostics(frames, detail),
        *(_panel(p) for p in plot_panels),
        _table(snap, frames, detail),
        _details(snap, frames, base, base_label, best, numbers),
    ]
    nav = [
        ("summary", "Summary"),
        ("best", "Best trial"),
        ("diagnostics", "Diagnostics"),
        *((p.id, p.title.split(":")[0]) for p in plot_panels),
        ("trials", "Trials"),
        ("details", "Details"),
    ]
    nav_html = " ".join(f'<a href="#{escape(i)}">{escape(t)}</a>' for i, t in nav)
    return _PAGE.format(
        title=escape(f"grpo-sweep report: {snap.study_name}"),
        css=_CSS,
        nav=nav_html,
        body="\n".join(sections),
        plotly=get_plotlyjs(),
        js=_JS,
    )


def _panel(panel: Panel) -> str:
    head = f'<section id="{escape(panel.id)}" class="panel"><h2>{escape(panel.title)}</h2>'
    if panel.figure is None:
        return f'{head}<p class="note">{escape(panel.note or "nothing to draw")}</p></section>'
    # plotly's own offline recipe: a div and its Plotly.newPlot call; plotly.js itself is in the page head.
    plot = pio.to_html(
        panel.figure,
        config=PLOT_CONFIG,
        full_html=False,
        include_plotlyjs=False,
        div_id=f"plot-{panel.id}",
        default_height="450px",
        validate=False,
    )
    caption = f'<p class="caption">{escape(panel.caption)}</p>' if panel.caption else ""
    return f'{head}<div class="plot">{plot}</div>{caption}</section>'


# ------------------------------------------------------------------------------------------ header
def _component_line(value: Any) -> str:
    """A sampler/pruner attr (a name, or a dict like ``{"name": "tpe", "seed": 0}``) as one line."""
    if isinstance(value, dict):
        rest = ", ".join(f"{k}={_fmt(v)}" for k, v in value.items() if k != "name" and v not in (None, {}, []))
        return f"{value.get('name', '?')}" + (f" ({rest})" if rest else "")
    return "-" if value is None else str(value)


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return _num(value)
    if isinstance(value, (dict, list)):
        return json.dumps(value, default=str)
    return str(value)


def _num(value: Any, digits: int = 4) -> str:
    if value is None or isinstance(value, bool) or not isinstance(value, (int, float)):
        return "" if value is None else str(value)
    if isinstance(value, float) and math.isnan(value):
        return ""
    return f"{value:.{digits}g}"


def _duration(seconds: Any) -> str:
    if seconds is None or (isinstance(seconds, float) and not math.isfinite(seconds)):
        return ""
    seconds = float(seconds)
    if seconds < 10:
        return f"{seconds:.3g} s"
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h {minutes:02d}m" if hours else f"{minutes}m {secs:02d}s"


def _sum(frame: pd.DataFrame, column: str) -> float:
    return float(frame[column].fillna(0.0).sum()) if column in frame and len(frame) else 0.0


def _header(snap: StudySnapshot, frames: Frames, spec_path: str | None, best: FrozenTrial | None) -> str:
    attrs = snap.user_attrs
    spec: dict[str, Any] = attrs["spec"] if isinstance(attrs.get("spec"), dict) else {}
    counts = collections.Counter(t.state.name for t in snap.get_trials(deepcopy=False))
    states = [s for s in STATE_ORDER if counts.get(s)] + sorted(set(counts) - set(STATE_ORDER))
    count_html = (
        ", ".join(f'<span class="state {escape(s)}">{counts[s]} {escape(s.lower())}</span>' for s in states)
        or "no trials yet"
    )
    trials = frames.trials
    objective_html = "; ".join(
        escape(f"{g.direction} {g.metric}" + (f" (reduce: {g.reduce})" if g.reduce else ""))
        for g in study_objectives(snap)
    )
    overrides = spec.get("overrides") or []
    base = attrs.get("base") or spec.get("base")
    base_html = escape(str(base)) if base else "-"
    if overrides:
        base_html += " with " + " ".join(f"<code>{escape(str(o))}</code>" for o in overrides)
    total_compute = _sum(trials, "compute_s")
    best_compute = "-"
    if best is not None and len(trials):
        best_compute = _duration(float(trials.loc[trials["number"] <= best.number, "compute_s"].fillna(0).sum()))
        best_compute += f" (trials 0-{best.number}, up to the best trial)"
    starts = [t.datetime_start for t in snap.get_trials(deepcopy=False) if t.datetime_start]
    ends = [t.datetime_complete for t in snap.get_trials(deepcopy=False) if t.datetime_complete]
    running = counts.get("RUNNING", 0) > 0
    if starts:
        first, last = min(starts), (max(ends) if ends else None)
        span = f"{first:%Y-%m-%d %H:%M:%S} to " + (
            "now (trials running)" if running or last is None else f"{last:%Y-%m-%d %H:%M:%S}"
        )
        end_for_span = dt.datetime.now(first.tzinfo) if running or last is None else last
        span += f" ({_duration((end_for_span - first).total_seconds())})"
    else:
        span = "-"
    rows = [
        ("Study", escape(snap.study_name)),
        ("Spec", escape(str(spec_path or attrs.get("spec_path") or "-"))),
        ("Base config", base_html),
        ("Objective", objective_html),
        ("Sampler", escape(_component_line(spec.get("sampler") or attrs.get("sampler")))),
        ("Pruner", escape(_component_line(spec.get("pruner") or attrs.get("pruner")))),
        ("Backend", escape(str(attrs.get("backend") or spec.get("backend") or "-"))),
        ("Trials", f"{len(trials)} ({count_html})"),
        (
            "Compute",
            escape(
                f"{_duration(total_compute)} device-time in all "
                f"(CPU {_duration(_sum(trials, 'cpu_s')) or '0 s'}, NPU {_duration(_sum(trials, 'npu_s')) or '0 s'}, "
                f"trial wall time {_duration(_sum(trials, 'wall_s')) or '0 s'})"
            ),
        ),
        ("Compute to best", escape(best_compute)),
        ("Time span", escape(span)),
        ("Report written", escape(f"{dt.datetime.now():%Y-%m-%d %H:%M:%S}")),
    ]
    facts = "".join(f"<dt>{k}</dt><dd>{v}</dd>" for k, v in rows)
    return f'<header id="summary"><h1>Study {escape(snap.study_name)}</h1><dl class="facts">{facts}</dl></header>'


# ---------------------------------------------------------------------------------------- best trial
def _value_with_spread(snap: StudySnapshot, frames: Frames, trial: FrozenTrial) -> list[str]:
    """Each objective of ``trial`` as ``value +- spread (n seeds)`` text."""
    row = frames.trials.loc[frames.trials["number"] == trial.number]
    seeds = row["seeds"].iloc[0] if len(row) else None
    out = []
    for i, goal in enumerate(study_objectives(snap)):
        value = trial.values[i] if trial.values else None
        spread = row[spread_columns(snap)[i]].iloc[0] if len(row) else None
        text = f"{goal.metric} = {_num(value)}"
        if seeds and seeds > 1 and spread is not None and math.isfinite(spread):
            text += f" ± {_num(spread, 3)} (std over {int(seeds)} seeds)"
        out.append(text)
    return out


def _params_table(trial: FrozenTrial) -> str:
    if not trial.params:
        return "<p>(no parameters)</p>"
    rows = "".join(
        f"<tr><td><code>{escape(k)}</code></td><td>{escape(_fmt(v))}</td></tr>" for k, v in trial.params.items()
    )
    return f'<table class="params"><tr><th>parameter</th><th>value</th></tr>{rows}</table>'


def _best(snap: StudySnapshot, frames: Frames, best: FrozenTrial | None, detail: set[int]) -> str:
    head = '<section id="best"><h2>Best trial</h2>'
    if best is None:
        return head + '<p class="note">No completed trial yet.</p></section>'
    values = "<br>".join(escape(v) for v in _value_with_spread(snap, frames, best))
    config = (
        '<p>Config: <a href="best_config.yaml">best_config.yaml</a> (its full resolved grpo_trainer config)</p>'
        if isinstance(best.user_attrs.get("config"), dict)
        else '<p class="note">This trial recorded no config.</p>'
    )
    extra = ""
    if len(snap.directions) > 1:
        front = pareto_front(snap)
        links = ", ".join(_trial_link(t.number, detail) for t in front)
        extra = f"<p>{len(front)} Pareto-optimal trial(s): {links}. Shown: the one best on the first objective.</p>"
    return (
        f'{head}{extra}<p class="big"><a href="#trial-{best.number}">Trial #{best.number}</a>: {values}</p>'
        f"{_params_table(best)}{config}</section>"
    )


# --------------------------------------------------------------------------------------- diagnostics
def _trial_link(number: int, detail: set[int]) -> str:
    """``#n``, linked to the trial's detail section when it has one."""
    return f'<a href="#trial-{number}">#{number}</a>' if number in detail else f"#{number}"


def _diagnostics(frames: Frames, detail: set[int]) -> str:
    counts = collections.Counter(f.name for flags in frames.flags.values() for f in flags)
    items = "".join(
        f"<li><b>{escape(r.name)}</b> ({counts[r.name]} trial{'s' if counts[r.name] != 1 else ''}): "
        f"{escape(r.explanation)}</li>"
        for r in diagnostics.RULES
    )
    if frames.flags:
        rows = "".join(
            f"<tr><td>{_trial_link(n, detail)}</td>"
            f"<td>{'<br>'.join(escape(f'{f.name}: {f.detail}') for f in flags)}</td></tr>"
            for n, flags in sorted(frames.flags.items())[:MAX_FLAGGED_ROWS]
        )
        more = f", the first {MAX_FLAGGED_ROWS} listed" if len(frames.flags) > MAX_FLAGGED_ROWS else ""
        flagged = (
            f"<details{' open' if len(frames.flags) <= 10 else ''}><summary>{len(frames.flags)} flagged "
            f"trial{'s' if len(frames.flags) != 1 else ''}{more}</summary>"
            f'<table class="params"><tr><th>trial</th><th>flags</th></tr>{rows}</table></details>'
        )
    else:
        flagged = '<p class="note">No trial is flagged.</p>'
    return (
        f'<section id="diagnostics"><h2>GRPO diagnostics</h2><p>Rules (see grpo/report/diagnostics.py), '
        f"checked on each trial's curves averaged over seeds:</p><ul>{items}</ul>{flagged}</section>"
    )


# --------------------------------------------------------------------------------------------- table
def _table(snap: StudySnapshot, frames: Frames, detail: set[int]) -> str:
    """The sortable trials table: pandas' Styler renders it (escaping every cell), a few lines of JS sort it.

    Cells whose text does not sort (durations) carry their number in a ``data-sort`` attribute.
    """
    trials = frames.trials
    if trials.empty:
        return '<section id="trials"><h2>Trials</h2><p class="note">No trials yet.</p></section>'
    names = [g.metric for g in study_objectives(snap)]
    params = [c for c in trials.columns if c.startswith("params_")]
    reason = trials["failure_reason"].where(trials["failure_reason"].map(_is_text), trials["pruned_reason"])
    # (label, column, formatter of the already escaped value); a column per header, in page order
    columns: list[tuple[str, pd.Series, Any]] = [
        ("#", trials["number"], lambda n: f'<a href="#trial-{n}">{n}</a>' if n in detail else str(n)),
        ("state", trials["state"], lambda s: f'<span class="state {s}">{s}</span>'),
        *((n, trials[c], _num) for n, c in zip(names, value_columns(snap), strict=True)),
        *((f"± {n}", trials[c], lambda v: _num(v, 3)) for n, c in zip(names, spread_columns(snap), strict=True)),
        *((p[len("params_") :], trials[p], _cell) for p in params),
        ("duration", trials["duration_s"], _sortable_duration),
        ("compute", trials["compute_s"], _sortable_duration),
        ("iterations", trials["last_iteration"], _num),
        ("flags", trials["flags"], lambda f: f'<span class="flags">{f}</span>' if f else ""),
    ]
    shown = pd.DataFrame({f"c{i}": col.to_numpy() for i, (_, col, _) in enumerate(columns)})
    shown[f"c{len(columns)}"] = reason.to_numpy()
    styler = (
        shown.style.format(
            {f"c{i}": fmt for i, (_, _, fmt) in enumerate(columns)}, escape="html", na_rep=""
        )  # strings are escaped before the formatter sees them
        .format(_reason_cell, subset=[f"c{len(columns)}"], na_rep="")  # escapes itself: it shortens first
        .hide(axis="index")
        .relabel_index([escape(label) for label, _, _ in columns] + ["reason"], axis=1)
    )
    table = styler.to_html(exclude_styles=True)
    # Styler indents its markup; without the whitespace a 10,000-trial table is a third smaller.
    table = _BETWEEN_TAGS.sub("><", table).replace("<td >", "<td>").replace("<th >", "<th>")
    table = table.replace("<table>", '<table class="sortable trials">', 1)
    return (
        f'<section id="trials"><h2>Trials</h2><p>{len(trials)} trials; click a column header to sort.</p>'
        f'<div class="scroll">{table}</div></section>'
    )


_BETWEEN_TAGS = re.compile(r">\s+<")


def _is_text(value: Any) -> bool:
    return isinstance(value, str)


def _sortable_duration(seconds: Any) -> str:
    return f'<span data-sort="{_num(seconds, 12)}">{_duration(seconds)}</span>'


def _reason_cell(reason: Any) -> str:
    if not isinstance(reason, str):
        return ""
    one_line = " ".join(reason.split())
    return f'<span class="reason" title="{escape(one_line)}">{escape(shorten(one_line, 120))}</span>'


def _cell(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, float):
        return _num(value)
    return str(value)


# ------------------------------------------------------------------------------------------- details
def detail_numbers(snap: StudySnapshot) -> list[int]:
    """Trials with a detail section: all of them up to ``MAX_DETAIL_ALL``; beyond, the best completed
    (Pareto-optimal first for several objectives), the most recent failures and the running trials."""
    trials = snap.get_trials(deepcopy=False)
    if len(trials) <= MAX_DETAIL_ALL:
        return [t.number for t in trials]
    front = {t.number for t in pareto_front(snap)}
    best = sorted(ranked(snap), key=lambda t: t.number not in front)[:MAX_DETAIL_BEST]  # stable: ranked order
    failed = [t for t in trials if t.state == TrialState.FAIL][-MAX_DETAIL_FAILED:]
    running = [t for t in trials if t.state == TrialState.RUNNING][:MAX_DETAIL_RUNNING]
    return sorted({t.number for t in (*best, *failed, *running)})


def base_config(snap: StudySnapshot) -> tuple[dict[str, Any] | None, str]:
    """The config trial configs are diffed against, and a label saying what it is.

    The study's ``base_config`` attr: the base config with the spec's overrides, which the sweep
    composed and recorded when it created the study. A study made before that attr existed is diffed
    against its first trial's config (the label says so); with no trial config either, there is none.
    """
    attrs = snap.user_attrs
    spec: dict[str, Any] = attrs["spec"] if isinstance(attrs.get("spec"), dict) else {}
    base = attrs.get("base") or spec.get("base")
    recorded = attrs.get("base_config")
    if isinstance(recorded, dict):
        overrides = [str(o) for o in (spec.get("overrides") or [])]
        label = f"the base config {base}" if base else "the study's base config"
        return recorded, label + (f" with the spec's overrides ({' '.join(overrides)})" if overrides else "")
    why = "the study records no base config; studies made by an older grpo-sweep do not"
    first = next((t for t in snap.get_trials(deepcopy=False) if isinstance(t.user_attrs.get("config"), dict)), None)
    if first is None:
        return None, why
    return first.user_attrs["config"], f"trial #{first.number}'s config ({why})"


def flatten(config: dict[str, Any], prefix: str = "") -> dict[str, object]:
    """Nested dict -> ``{"rl_config.clip_ratio": 0.2, ...}`` (lists stay whole values)."""
    out: dict[str, object] = {}
    for key, value in config.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            out.update(flatten(value, dotted + "."))
        else:
            out[dotted] = value
    return out


def config_diff(base: dict[str, Any], config: dict[str, Any]) -> list[tuple[str, object, object]]:
    """``(key, base value, trial value)`` for every dotted key whose value differs (missing = ``None``)."""
    a, b = flatten(base), flatten(config)
    missing = object()
    rows = []
    for key in sorted(set(a) | set(b)):
        va, vb = a.get(key, missing), b.get(key, missing)
        if va != vb:
            rows.append((key, None if va is missing else va, None if vb is missing else vb))
    return rows


def _per_seed(text: str) -> str:
    """The ``seed_values`` JSON (per objective, a value per seed) with 4 significant digits."""
    try:
        per_objective = json.loads(text)
        return "; ".join(", ".join(_num(v) for v in seeds) for seeds in per_objective)
    except (ValueError, TypeError):
        return text


def _log_tail(trial: FrozenTrial, snap: StudySnapshot) -> list[str]:
    """The failure's last log lines: the trial's ``last_log_lines`` attr, else its ``train.log``."""
    lines = trial.user_attrs.get("last_log_lines")
    if isinstance(lines, list) and lines:
        return [str(x) for x in lines][-LOG_TAIL_LINES:]
    directory = trial_dir(trial, snap)
    if directory is None:
        return []
    for log_file in (directory / "train.log", *sorted(directory.glob("runs/seed*/train.log"))):
        if log_file.is_file():
            return tail_lines(log_file, LOG_TAIL_LINES)
    return []


def _details(
    snap: StudySnapshot,
    frames: Frames,
    base: dict[str, Any] | None,
    base_label: str,
    best: FrozenTrial | None,
    numbers: list[int],
) -> str:
    by_number = {t.number: t for t in snap.get_trials(deepcopy=False)}
    rows = frames.trials.set_index("number")
    total = len(by_number)
    intro = f"<p>Config diffs are against {escape(base_label)}.</p>" + (
        ""
        if len(numbers) == total
        else f"<p>{len(numbers)} of {total} trials have a detail section: the {MAX_DETAIL_BEST} best completed, the "
        f"{MAX_DETAIL_FAILED} most recent failures and the running trials.</p>"
    )
    parts = [f'<section id="details"><h2>Trial details</h2>{intro}']
    for number in numbers:
        trial = by_number[number]
        row = rows.loc[number]
        facts = [
            ("state", escape(trial.state.name) + (" (best)" if best is not None and number == best.number else ""))
        ]
        if trial.values:
            label = "last reported value" if trial.state == TrialState.PRUNED else "value"
            facts.append((label, "<br>".join(escape(v) for v in _value_with_spread(snap, frames, trial))))
        if isinstance(row.get("seed_values"), str):
            facts.append(("per seed", escape(_per_seed(row["seed_values"]))))
        for label, key in (("duration", "duration_s"), ("compute", "compute_s")):
            facts.append((label, escape(_duration(row.get(key)))))
        for label, key in (
            ("iterations", "last_iteration"),
            ("node", "node"),
            ("devices", "devices"),
            ("attempt", "attempt"),
            ("retry of", "retry_of"),
            ("trial dir", "trial_dir"),
            ("pruned", "pruned_reason"),
            ("failure", "failure_reason"),
        ):
            value = row.get(key)
            if value is not None and not (isinstance(value, float) and math.isnan(value)) and value != "":
                facts.append((label, escape(_cell(value))))
        for flag in frames.flags.get(number, []):
            facts.append(("flag", f"<b>{escape(flag.name)}</b>: {escape(flag.detail)}"))
        if trial.params:
            facts.append(
                (
                    "params",
                    "<br>".join(f"<code>{escape(k)}</code> = {escape(_fmt(v))}" for k, v in trial.params.items()),
                )
            )
        body = "".join(f"<dt>{k}</dt><dd>{v}</dd>" for k, v in facts)
        config = trial.user_attrs.get("config")
        if isinstance(config, dict) and base is not None:
            diff = config_diff(base, config)
            if diff:
                trs = "".join(
                    f"<tr><td><code>{escape(k)}</code></td><td>{escape(_fmt(a))}</td><td>{escape(_fmt(b))}</td></tr>"
                    for k, a, b in diff
                )
                diff_html = f'<table class="diff"><tr><th>key</th><th>base</th><th>this trial</th></tr>{trs}</table>'
            else:
                diff_html = "<p>Same config as the base.</p>"
        else:
            diff_html = '<p class="note">No config recorded for this trial.</p>'
        logs = ""
        if trial.state == TrialState.FAIL:
            tail = _log_tail(trial, snap)
            logs = (
                f"<h4>Last log lines</h4><pre>{escape(chr(10).join(tail))}</pre>"
                if tail
                else '<p class="note">No log lines recorded.</p>'
            )
        parts.append(
            f'<section class="trial" id="trial-{number}"><h3>Trial #{number}</h3><dl class="facts">{body}</dl>'
            f"<h4>Config diff</h4>{diff_html}{logs}</section>"
        )
    parts.append("</section>")
    return "".join(parts)


# ---------------------------------------------------------------------------------------- templates
_CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;margin:0 2rem 3rem;color:#222;line-height:1.4}
nav{position:sticky;top:0;background:#fff;padding:.5rem 0;border-bottom:1px solid #ddd;z-index:10;font-size:.9rem}
nav a{margin-right:.8rem;color:#1f5fa8;text-decoration:none}
h1{margin:.8rem 0}h2{margin-top:2rem;border-bottom:1px solid #eee}
dl.facts{display:grid;grid-template-columns:max-content 1fr;gap:.2rem 1rem}dl.facts dt{font-weight:600;color:#555}
dl.facts dd{margin:0}
.note{color:#8a6d3b;background:#fcf8e3;padding:.4rem .6rem;border-radius:4px;display:inline-block}
.caption{color:#666;font-size:.85rem}.big{font-size:1.15rem}
table{border-collapse:collapse;font-size:.85rem}td,th{border:1px solid #ddd;padding:.2rem .45rem;text-align:left}
th{background:#f5f5f5}table.sortable th{cursor:pointer;user-select:none}
th.asc::after{content:" ▲"}th.desc::after{content:" ▼"}
.scroll{max-height:70vh;overflow:auto}
.state.COMPLETE{color:#2a7a2a}.state.PRUNED{color:#888}.state.FAIL{color:#c0392b}.state.RUNNING{color:#1f5fa8}
.flags{color:#c0392b;white-space:nowrap}
.reason{display:inline-block;vertical-align:bottom;max-width:26rem;white-space:nowrap;overflow:hidden;text-overflow:ellipsis}
section.trial{border-left:3px solid #ddd;padding-left:1rem;margin:1.5rem 0}
pre{background:#f7f7f7;padding:.6rem;overflow:auto;max-height:24rem;font-size:.8rem}
summary{cursor:pointer;margin:.4rem 0}
"""

_JS = r"""
(function () {  // click a header of a table.sortable to sort by that column; a [data-sort] value wins
  function key(cell) {
    var tagged = cell.querySelector('[data-sort]');
    var raw = tagged ? tagged.getAttribute('data-sort') : cell.textContent;
    var n = parseFloat(raw);
    return raw.trim() === '' ? null : (isNaN(n) || !/^\s*[-+]?[\d.]/.test(raw) ? raw.toLowerCase() : n);
  }
  function sortBy(table, col, th) {
    var asc = th.className !== 'asc';
    Array.prototype.forEach.call(table.tHead.rows[0].cells, function (c) { c.className = ''; });
    th.className = asc ? 'asc' : 'desc';
    var body = table.tBodies[0];
    var rows = Array.prototype.map.call(body.rows, function (r) { return [key(r.cells[col]), r]; });
    rows.sort(function (a, b) {
      if (a[0] === null) return b[0] === null ? 0 : 1;
      if (b[0] === null) return -1;
      if (typeof a[0] !== typeof b[0]) return typeof a[0] === 'number' ? -1 : 1;
      var d = a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0;
      return asc ? d : -d;
    });
    var frag = document.createDocumentFragment();
    rows.forEach(function (r) { frag.appendChild(r[1]); });
    body.appendChild(frag);
  }
  document.querySelectorAll('table.sortable').forEach(function (table) {
    Array.prototype.forEach.call(table.tHead.rows[0].cells, function (th, i) {
      th.title = 'click to sort';
      th.addEventListener('click', function () { sortBy(table, i, th); });
    });
  });
})();
"""

_PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>{css}</style>
<script>{plotly}</script>
</head><body>
<nav>{nav}</nav>
{body}
<script>{js}</script>
</body></html>
"""
