"""The study report: ``reports/<study>/index.html``, one self-contained file that opens offline.

``write_report(study, out_dir)`` reads the study (storage + trial dirs, see ``collect``) and writes
``out_dir/index.html`` and, once a trial has completed, ``out_dir/best_config.yaml`` (the winner's
exported config: ``grpo.report.reproduce``). ``grpo-sweep SPEC`` rewrites both after finished trials
while the study runs (throttled: the driver's ``ThrottledReport``) and once at the end, and ``grpo-sweep
report SPEC`` rebuilds them on demand; every write is an atomic replace, so a page kept open in a
browser reloads to a whole report, never half of one.

The page answers, in order: which settings won and how sure (``page_summary``: winner, interval over
seeds, runner-up, paired test, compute to find it; a promoted confirmation stage's ranking check); for a
population-based study, how the winner's lineage branched and the schedule it ran with (``lineage``);
why (``plots.why_panels``: importances with their bootstrap spread or a "too few trials" note, slices,
contour, parallel coordinates, history; the Pareto front for several objectives); what happened in the
runs (learning curves with seed bands, colour-by and smoothing controls); GRPO health and what the model
says (``page_health``); cost and how to reproduce the winner (``page_cost``); then every trial in a
sortable table and detail sections (``page_trials``).
One copy of plotly.js is inlined in the head; each figure is ``plotly.io.to_html(include_plotlyjs=False)``.

Every string that came from a user, a log or the model goes through ``html.escape`` (tables through
pandas' ``Styler.format(escape="html")``); figures are written by ``plotly.io.to_html``, whose JSON has
``<``, ``>`` and ``/`` escaped, so nothing in it can close its ``<script>`` element.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator
from pathlib import Path

import optuna
import plotly.io as pio
from plotly.offline import get_plotlyjs

from grpo._fs import atomic_write_text
from grpo.report import lineage, page_cost, page_health, page_summary, page_trials
from grpo.report._assets import CSS, JS, PAGE
from grpo.report._fmt import escape
from grpo.report._snapshot import snapshot
from grpo.report.collect import Frames, collect
from grpo.report.decision import Decision, study_decision
from grpo.report.plots import Panel, cost_panels, curves_panel, why_panels
from grpo.report.reproduce import CONFIG_NAME, config_yaml

PLOT_CONFIG = {"responsive": True, "displaylogo": False}
REPORT_CONFIG_FILE = f"{CONFIG_NAME}.yaml"


def write_report(study: optuna.Study, out_dir: Path, spec_path: str | None = None) -> Path:
    """Write ``out_dir/index.html`` (and ``best_config.yaml``) for ``study``; return the index path.

    Works on a running or interrupted study too. Files are replaced atomically, so a browser never
    loads half a report. ``spec_path`` overrides the study's ``spec_path`` attr in the header.
    """
    out_dir = Path(out_dir)
    with _gc_frozen():
        snap = snapshot(study)
        frames = collect(snap)
        decision = study_decision(snap, frames)
        base, _ = page_trials.base_config(snap)
        config = config_yaml(snap, decision.best, base) if decision.best is not None else None
        page = render(snap, frames, spec_path=spec_path, decision=decision, config_path=out_dir / REPORT_CONFIG_FILE)
    if config is not None:
        atomic_write_text(out_dir / REPORT_CONFIG_FILE, config)
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
def render(
    study: optuna.Study,
    frames: Frames,
    spec_path: str | None = None,
    decision: Decision | None = None,
    config_path: Path | None = None,
) -> str:
    """The whole HTML page as a string (see the module docstring)."""
    snap = snapshot(study)
    decision = decision or study_decision(snap, frames)
    config_path = config_path or Path(REPORT_CONFIG_FILE)
    base, base_label = page_trials.base_config(snap)
    numbers = page_trials.detail_numbers(snap)
    detail = set(numbers)
    config_text = config_yaml(snap, decision.best, base) if decision.best is not None else None
    why = why_panels(snap, frames, decision)
    curves = curves_panel(snap, frames, decision)
    cost = cost_panels(snap, frames, decision)
    population = _population(snap, frames, decision)
    sections = [
        page_summary.header(snap, frames, spec_path, decision),
        page_summary.decision(snap, frames, decision, config_link=config_text is not None),
        population,
        _group("why", "Why these settings", "".join(_panel(p) for p in why)),
        _group("runs", "What happened in the runs", _curves(curves)),
        page_health.health(frames, decision, detail),
        page_health.samples(snap, frames, decision, detail),
        _group(
            "cost",
            "Cost",
            page_cost.cost_facts(frames, decision)
            + "".join(_panel(p) for p in cost)
            + page_cost.cost_table(snap, frames, decision),
        ),
        page_cost.reproduce(snap, decision, config_path, config_text),
        page_trials.table(snap, frames, detail),
        page_trials.details(snap, frames, base, base_label, decision.best, numbers),
    ]
    nav = [
        ("summary", "Summary"),
        ("decision", "Winner"),
        *([("lineage", "Lineage")] if population else []),
        ("why", "Why"),
        ("runs", "Runs"),
        ("health", "Health"),
        ("samples", "Samples"),
        ("cost", "Cost"),
        ("reproduce", "Reproduce"),
        ("trials", "Trials"),
        ("details", "Details"),
    ]
    nav_html = " ".join(f'<a href="#{i}">{escape(t)}</a>' for i, t in nav)
    return PAGE.format(
        title=escape(f"grpo-sweep report: {snap.study_name}"),
        css=CSS,
        nav=nav_html,
        body="\n".join(sections),
        plotly=get_plotlyjs(),
        js=JS,
    )


def _population(snap: optuna.Study, frames: Frames, decision: Decision) -> str:
    """A pbt study's lineage tree and its winner's schedule (``grpo.report.lineage``); '' for any other study."""
    table = frames.trials
    reached = (
        dict(zip(table["number"].tolist(), table["last_iteration"].tolist(), strict=True))
        if len(table) and "last_iteration" in table
        else {}
    )
    pop = lineage.population(snap, decision.best, reached)
    if pop is None:
        return ""
    figure = lineage.lineage_figure(pop) if pop.segments else None
    tree = Panel(
        "lineage-tree",
        "Lineage tree",
        figure=figure,
        note="no segment has started yet",
        caption=(
            "x: iteration; y: the population slot. Each bar is one segment (trial); an orange arrow goes from a top "
            "member's checkpoint to the bottom member it replaced (then explored), and the orange bar is that "
            "branch; grey dashed bars were pruned, failed or are running. The winner's lineage is black and wide, "
            "the red star its end. Hover a bar for the trial, its parameters and value (a segment's value is over "
            "its lineage's curve so far)."
        ),
    )
    if figure is not None:
        tree.height = int(figure["layout"]["height"])
    schedule = lineage.schedule_of(decision.best, pop, snap.get_trials(deepcopy=False))
    train_iters = pop.settings.get("train_iters")
    train_iters = int(train_iters) if isinstance(train_iters, int) and not isinstance(train_iters, bool) else None
    if schedule:
        plots = Panel(
            "lineage-schedule",
            "The winner's schedule",
            figure=lineage.schedule_figure(schedule, train_iters),
            caption="The value of each explored parameter the winning lineage trained with, from iteration 0 (each "
            "value holds until the next change); the exported best_config.yaml replays it (its schedule: key).",
        )
        plots.height = int(plots.figure["layout"]["height"]) if isinstance(plots.figure, dict) else plots.height
        schedule_html = _panel(plots) + lineage.schedule_table(schedule, train_iters)
    else:
        note = (
            "The winner records no schedule: its lineage changed no parameter while it trained."
            if decision.best is not None
            else "No winner yet."
        )
        schedule_html = _panel(Panel("lineage-schedule", "The winner's schedule", note=note))
    body = lineage.summary(pop) + _panel(tree) + schedule_html
    return f'<section id="lineage" class="group"><h2>Population: lineage and schedule</h2>{body}</section>'


def _group(id: str, title: str, body: str) -> str:
    return f'<section id="{id}" class="group"><h2>{escape(title)}</h2>{body}</section>'


def _panel(panel: Panel) -> str:
    head = f'<section id="{escape(panel.id)}" class="panel"><h3>{escape(panel.title)}</h3>'
    if panel.figure is None:
        return f'{head}<p class="note">{escape(panel.note or "nothing to draw")}</p></section>'
    # plotly's own offline recipe: a div and its Plotly.newPlot call; plotly.js itself is in the page head.
    plot = pio.to_html(
        panel.figure,
        config=PLOT_CONFIG,
        full_html=False,
        include_plotlyjs=False,
        div_id=f"plot-{panel.id}",
        default_height=f"{panel.height}px",
        validate=False,
    )
    caption = f'<p class="caption">{escape(panel.caption)}</p>' if panel.caption else ""
    return f'{head}<div class="plot">{plot}</div>{caption}</section>'


def _curves(panel: Panel) -> str:
    """The learning curves with their controls: colour by a searched parameter, smoothing."""
    if not isinstance(panel.figure, dict):
        return _panel(panel)
    keys = panel.figure["layout"].get("meta", {}).get("keys", {})
    label = {"trial": "trial (best black, pruned grey, failed red)"}
    options = "".join(f'<option value="{escape(n)}">{escape(label.get(n, n))}</option>' for n in keys)
    controls = (
        f'<div class="curve-controls" data-plot="plot-{escape(panel.id)}">'
        f'<label>colour by <select class="colour-by">{options}</select></label>'
        '<label>smoothing <input type="range" class="smoothing" min="0" max="0.95" step="0.05" value="0"> '
        "<output>0.00</output></label>"
        '<span class="colour-key"></span></div>'
    )
    panel.caption = (
        "Each line is a trial's mean over its seeds; the shaded band spans its lowest to its highest seed. Hover a "
        "line for the trial's parameters; click a legend entry to hide a trial. Pruned trials are faint and dashed, "
        "failed ones dotted; the best trial is black and wider; a red x marks a GRPO health flag."
    )
    return controls + _panel(panel)
