"""A population-based (pbt) study's lineage tree and its winner's schedule: the report's "Population" section.

Each trial of a pbt study is one segment of a member's training (``grpo.trial_attrs``: ``pbt_member``,
``pbt_generation``; generation g trains iterations [g*K, (g+1)*K) of the study's ``pbt`` attr's ``interval``
K); a segment of generation g > 0 continues the checkpoint of ``branch_of`` at ``branched_at``, either its own
member's (it continued its lineage) or, ``exploited``, a top member's copied over a bottom member, then
explored. ``population(study, best)`` reads that into ``Population``: the segments (a retried segment once, as
its last attempt), the edges, and the winner's lineage (the best trial's ancestry; for a confirmation trial,
the ancestry of the segment it reran). ``lineage_figure`` draws it (x: iteration, y: member slot, one bar per
segment, an arrow per exploit step, the winner's lineage black and wide); ``summary`` is the sentence above it;
``schedule_of`` and ``schedule_figure``/``schedule_table`` show the values the winner's lineage ran with from
iteration 0 (its ``schedule`` attr: {config key: {first iteration: value}}). A study that is not pbt
(``grpo.report.best.is_pbt``) has no ``Population``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from grpo.report._figure import BEST_LINE_COLOR, MARGIN, PALETTE, PRUNED_COLOR, axis, axis_title, best_star, grid
from grpo.report._fmt import escape, fmt, num, plural, trial_link
from grpo.report.best import is_pbt
from grpo.report.chains import logical_trials
from grpo.trial_attrs import (
    BRANCH_OF,
    BRANCHED_AT,
    CONFIRMATION_OF,
    EXPLOITED,
    PBT_GENERATION,
    PBT_MEMBER,
    PBT_SETTINGS,
    SCHEDULE,
)

CONTINUED_COLOR = PALETTE[0]
EXPLOIT_COLOR = PALETTE[1]
WINNER_WIDTH, SEGMENT_WIDTH = 6, 3
MAX_PARAMS_IN_HOVER = 8


def _int(value: object) -> int | None:
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


@dataclass(frozen=True)
class Segment:
    """One trial of the population: member ``member`` trained iterations [``start``, ``end``] in ``generation``."""

    number: int
    member: int
    generation: int
    start: int
    end: int
    parent: int | None  # ``branch_of``; None in generation 0
    exploited: bool
    state: str
    value: float | None
    params: dict[str, Any]


@dataclass(frozen=True)
class Population:
    settings: dict[str, Any]
    segments: dict[int, Segment]  # trial number -> segment
    winner: int | None  # the segment whose lineage won (the best trial, or the one a confirmation trial reran)
    best: int | None  # the best trial itself (a confirmation trial when the stage decided)
    path: list[int] = field(default_factory=list)  # the winner's lineage, generation 0 first

    @property
    def members(self) -> int:
        found = {s.member for s in self.segments.values()}
        return max(_int(self.settings.get("population")) or 0, (max(found) + 1) if found else 0)

    @property
    def branches(self) -> list[Segment]:
        return [s for s in self.segments.values() if s.parent is not None]

    @property
    def exploits(self) -> list[Segment]:
        return [s for s in self.branches if s.exploited]


def population(
    study: optuna.Study, best: FrozenTrial | None, last_iteration: Mapping[int, float] | None = None
) -> Population | None:
    """The study's population (see the module docstring); None when the study is not pbt.

    ``last_iteration``: trial number -> the last iteration its curve reached (``Frames.trials``), where an
    unfinished segment's bar ends; a COMPLETE segment's bar ends where its generation does."""
    trials = study.get_trials(deepcopy=False)
    if not is_pbt(study, trials):
        return None
    settings = study.user_attrs.get(PBT_SETTINGS)
    settings = dict(settings) if isinstance(settings, dict) else {}
    interval = _int(settings.get("interval"))
    train_iters = _int(settings.get("train_iters"))
    segments: dict[int, Segment] = {}
    for t in logical_trials(trials):
        member, generation = _int(t.user_attrs.get(PBT_MEMBER)), _int(t.user_attrs.get(PBT_GENERATION))
        if member is None or generation is None or t.state == TrialState.WAITING:
            continue
        parent = _int(t.user_attrs.get(BRANCH_OF))
        start = _int(t.user_attrs.get(BRANCHED_AT))
        if start is None:
            start = generation * interval if interval else 0
        planned = (generation + 1) * interval if interval else None
        if planned is not None and train_iters:
            planned = min(planned, train_iters)
        reached = (last_iteration or {}).get(t.number)
        reached_i = int(reached) if reached is not None and math.isfinite(reached) else None
        if t.state == TrialState.COMPLETE and planned is not None:
            end = planned
        elif reached_i is not None:
            end = max(start, min(reached_i, planned) if planned is not None else reached_i)
        else:
            end = planned if planned is not None and t.state == TrialState.COMPLETE else start
        segments[t.number] = Segment(
            number=t.number,
            member=member,
            generation=generation,
            start=start,
            end=end,
            parent=parent,
            exploited=bool(t.user_attrs.get(EXPLOITED)) and parent is not None,
            state=t.state.name,
            value=float(t.values[0]) if t.values else None,
            params=dict(t.params),
        )
    winner = None
    if best is not None:
        source = _int(best.user_attrs.get(CONFIRMATION_OF))
        winner = best.number if best.number in segments else (source if source in segments else None)
    return Population(
        settings, segments, winner, best.number if best is not None else None, lineage_of(segments, winner)
    )


def lineage_of(segments: Mapping[int, Segment], number: int | None) -> list[int]:
    """``number``'s ancestry through ``branch_of``, generation 0 first ([] for None)."""
    path: list[int] = []
    while number is not None and number in segments and number not in path:
        path.append(number)
        number = segments[number].parent
    return path[::-1]


# ---------------------------------------------------------------------------------------------- text
def summary(pop: Population) -> str:
    """The sentence above the tree (HTML): branches, exploit steps, the lineage that won."""
    generations = _int(pop.settings.get("generations"))
    interval = _int(pop.settings.get("interval"))
    shape = f"{plural(pop.members, 'member')}"
    if generations and interval:
        shape += f" &times; {plural(generations, 'generation')} of {plural(interval, 'iteration')}"
    branches, exploits = len(pop.branches), len(pop.exploits)
    text = (
        f"{shape}: {plural(len(pop.segments), 'segment')}, {plural(branches, 'branch', 'branches')} from a "
        f"checkpoint, {plural(exploits, 'exploit step')} (a bottom member replaced by a copy of a top member, "
        f"then explored) and {branches - exploits} continued {'its' if branches - exploits == 1 else 'their'} "
        "own lineage."
    )
    if pop.winner is None or not pop.path:
        return f"<p>{text} No lineage has won yet (no segment of the last generation has completed).</p>"
    win = pop.segments[pop.winner]
    chain = " &rarr; ".join(trial_link(n) for n in pop.path)
    steps = [pop.segments[n] for n in pop.path if pop.segments[n].exploited]
    origin = pop.segments[pop.path[0]]
    how = (
        "; it copied "
        + ", ".join(
            f"member {pop.segments[s.parent].member if s.parent in pop.segments else '?'}'s checkpoint at "
            f"iteration {s.start}"
            for s in steps
        )
        if steps
        else "; it never copied another member"
    )
    confirmed = (
        f" (confirmation trial {trial_link(pop.best)} reran it from scratch)"
        if pop.best is not None and pop.best != pop.winner
        else ""
    )
    return (
        f"<p>{text} The winning lineage: member {win.member}, trial {trial_link(win.number)}{confirmed}, started as "
        f"member {origin.member}'s trial {trial_link(origin.number)}{how}: {chain}.</p>"
    )


def _hover(seg: Segment, segments: Mapping[int, Segment]) -> str:
    lines = [
        f"trial #{seg.number} (member {seg.member}, generation {seg.generation}, {seg.state.lower()})",
        f"iterations {seg.start} to {seg.end}",
        f"value {num(seg.value)}" if seg.value is not None else "no value",
    ]
    if seg.parent is not None:
        from_member = segments[seg.parent].member if seg.parent in segments else "?"
        how = f"exploited: copy of member {from_member}'s" if seg.exploited else "continued its own"
        lines.append(f"{how} trial #{seg.parent} at iteration {seg.start}")
    items = list(seg.params.items())
    lines += [f"{k} = {fmt(v)}" for k, v in items[:MAX_PARAMS_IN_HOVER]]
    if len(items) > MAX_PARAMS_IN_HOVER:
        lines.append(f"... {len(items) - MAX_PARAMS_IN_HOVER} more")
    return "<br>".join(escape(line) for line in lines)


# -------------------------------------------------------------------------------------------- figures
def lineage_figure(pop: Population) -> dict[str, Any]:
    """The tree as plotly figure JSON (see the module docstring)."""
    groups: dict[str, list[Segment]] = {"continued": [], "exploited": [], "unfinished": []}
    for seg in sorted(pop.segments.values(), key=lambda s: s.number):
        key = "unfinished" if seg.state != "COMPLETE" else ("exploited" if seg.exploited else "continued")
        groups[key].append(seg)
    style = {
        "continued": ("segment (generation 0, or continued its own lineage)", CONTINUED_COLOR, "solid"),
        "exploited": ("exploited branch (copy of a top member, explored)", EXPLOIT_COLOR, "solid"),
        "unfinished": ("pruned, failed or running segment", PRUNED_COLOR, "dash"),
    }
    traces: list[dict[str, Any]] = []
    for key, segs in groups.items():
        if segs:
            name, colour, dash = style[key]
            traces.append(_bars(segs, pop.segments, name, colour, SEGMENT_WIDTH, dash))
    edges = [s for s in pop.exploits if s.parent in pop.segments]
    on_path = set(pop.path)
    if edges:
        traces.append(_edges(edges, pop.segments, "exploit step (parent's end to the branch's start)", EXPLOIT_COLOR))
    path_segs = [pop.segments[n] for n in pop.path]
    if path_segs:
        traces.append(_bars(path_segs, pop.segments, "winner's lineage", BEST_LINE_COLOR, WINNER_WIDTH, "solid"))
        path_edges = [s for s in path_segs if s.parent in on_path and pop.segments[s.parent].member != s.member]
        if path_edges:
            traces.append(_edges(path_edges, pop.segments, "winner's lineage", BEST_LINE_COLOR, legend=False))
        last = path_segs[-1]
        traces.append(best_star(last.end, last.member, pop.best if pop.best is not None else last.number, legend=True))
    members = pop.members
    layout: dict[str, Any] = {
        "height": max(320, 48 * members + 140),
        "margin": dict(MARGIN),
        "hovermode": "closest",
        "legend": {"orientation": "h", "y": -0.2},
        "annotations": [_arrow(s, pop.segments, s.number in on_path) for s in edges],
    }
    axis_title(layout, "x", "iteration")
    axis_title(layout, "y", "member")
    axis(
        layout,
        "y",
        tickvals=list(range(members)),
        ticktext=[f"member {m}" for m in range(members)],
        range=[-0.6, members - 0.4],
        zeroline=False,
    )
    return {"data": traces, "layout": layout}


def _bars(
    segs: Sequence[Segment], all_segs: Mapping[int, Segment], name: str, colour: str, width: float, dash: str
) -> dict[str, Any]:
    """Segments as one line trace (None between them); hover at each end and the middle."""
    x: list[float | None] = []
    y: list[float | None] = []
    text: list[str] = []
    for seg in segs:
        hover = _hover(seg, all_segs)
        x += [seg.start, (seg.start + seg.end) / 2, seg.end, None]
        y += [seg.member, seg.member, seg.member, None]
        text += [hover, hover, hover, ""]
    return {
        "type": "scatter",
        "mode": "lines+markers",
        "x": x,
        "y": y,
        "name": name,
        "line": {"color": colour, "width": width, "dash": dash},
        "marker": {"size": 4, "color": colour},
        "hovertext": text,
        "hovertemplate": "%{hovertext}<extra></extra>",
    }


def _edges(
    segs: Sequence[Segment], all_segs: Mapping[int, Segment], name: str, colour: str, legend: bool = True
) -> dict[str, Any]:
    x: list[float | None] = []
    y: list[float | None] = []
    text: list[str] = []
    for seg in segs:
        parent = all_segs[seg.parent]  # type: ignore[index]  # callers keep segments whose parent is drawn
        hover = escape(f"trial #{seg.number} branched from #{parent.number} at iteration {seg.start}")
        x += [parent.end, seg.start, None]
        y += [parent.member, seg.member, None]
        text += [hover, hover, ""]
    return {
        "type": "scatter",
        "mode": "lines",
        "x": x,
        "y": y,
        "name": name,
        "showlegend": legend,
        "line": {"color": colour, "width": 2 if colour != BEST_LINE_COLOR else WINNER_WIDTH - 2},
        "hovertext": text,
        "hovertemplate": "%{hovertext}<extra></extra>",
    }


def _arrow(seg: Segment, all_segs: Mapping[int, Segment], winner: bool) -> dict[str, Any]:
    parent = all_segs[seg.parent]  # type: ignore[index]
    return {
        "x": seg.start,
        "y": seg.member,
        "ax": parent.end,
        "ay": parent.member,
        "xref": "x",
        "yref": "y",
        "axref": "x",
        "ayref": "y",
        "showarrow": True,
        "arrowhead": 2,
        "arrowsize": 1.2,
        "arrowwidth": 2,
        "arrowcolor": BEST_LINE_COLOR if winner else EXPLOIT_COLOR,
        "text": "",
    }


# ------------------------------------------------------------------------------------------- schedule
def schedule_of(
    best: FrozenTrial | None, pop: Population | None, trials: Sequence[FrozenTrial]
) -> dict[str, dict[int, Any]]:
    """The winner's schedule: {config key: {first iteration: value}} from its ``schedule`` attr (a confirmation
    trial carries its source's; else the source segment's), iterations sorted; {} when it has none."""
    if best is None:
        return {}
    raw = best.user_attrs.get(SCHEDULE)
    if not isinstance(raw, dict) and pop is not None and pop.winner is not None:
        by_number = {t.number: t for t in trials}
        source = by_number.get(pop.winner)
        raw = source.user_attrs.get(SCHEDULE) if source is not None else None
    if not isinstance(raw, dict):
        return {}
    out: dict[str, dict[int, Any]] = {}
    for key, points in raw.items():
        if not isinstance(points, dict):
            continue
        parsed = {}
        for at, value in points.items():
            try:
                parsed[int(at)] = value
            except (TypeError, ValueError):
                continue
        if parsed:
            out[str(key)] = dict(sorted(parsed.items()))
    return dict(sorted(out.items()))


def schedule_figure(schedule: Mapping[str, Mapping[int, Any]], train_iters: int | None) -> dict[str, Any]:
    """One step plot per scheduled key (value against iteration, each value held until the next change)."""
    keys = list(schedule)
    layout, refs = grid(len(keys), keys, height=300, cols=min(3, max(1, len(keys))))
    traces = []
    for key, ref in zip(keys, refs, strict=True):
        points = schedule[key]
        x = list(points)
        y = list(points.values())
        end = max(x[-1], train_iters or x[-1])
        if end > x[-1]:  # the last value holds to the end of training
            x.append(end)
            y.append(y[-1])
        traces.append(
            {
                "type": "scatter",
                "mode": "lines+markers",
                "x": x,
                "y": y,
                "xaxis": ref[0],
                "yaxis": ref[1],
                "name": key,
                "showlegend": False,
                "line": {"shape": "hv", "color": BEST_LINE_COLOR, "width": 2},
                "hovertemplate": f"{escape(key)}<br>from iteration %{{x}}: %{{y}}<extra></extra>",
            }
        )
        axis_title(layout, ref[0], "iteration")
        positive = all(isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 for v in y)
        if positive and max(y) / min(y) >= 10:  # a learning rate or KL coefficient moved by decades
            axis(layout, ref[1], type="log")
    return {"data": traces, "layout": layout}


def schedule_table(schedule: Mapping[str, Mapping[int, Any]], train_iters: int | None) -> str:
    """The schedule as an HTML table: one row per key and value, with the iterations it held for."""
    rows = []
    for key, points in schedule.items():
        starts = list(points)
        for i, (at, value) in enumerate(points.items()):
            until = starts[i + 1] - 1 if i + 1 < len(starts) else (train_iters - 1 if train_iters else None)
            span = f"{at} to {until}" if until is not None else f"{at} on"
            rows.append(
                f"<tr><td><code>{escape(key)}</code></td><td>{escape(span)}</td><td>{escape(fmt(value))}</td></tr>"
            )
    return (
        '<table class="params schedule"><tr><th>parameter</th><th>iterations</th><th>value</th></tr>'
        + "".join(rows)
        + "</table>"
    )
