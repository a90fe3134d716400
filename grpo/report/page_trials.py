"""The trials table (every trial, sortable) and the per-trial detail sections of the report page.

The table is rendered by pandas' Styler (every cell escaped) and sorted in the browser by a few lines of
the page's JS; cells whose text does not sort (durations) carry their number in ``data-sort``. Beyond
``MAX_DETAIL_ALL`` trials only the best, the failed and the running trials get a detail section: each
trial's config diff against the base config (the study's ``base_config`` attr; an older study's first
trial config, and the page says so), its per-seed values and flags, and for failures the last log lines.

A retried trial reads as one logical trial: its attempts (``grpo.report.chains``) sit together, the last
one first and the superseded FAIL records under it, and the "retry chain" column says which run of which
trial each is, where a retry resumed and what superseded an attempt. A pbt study's "population" column
gives each segment's member, generation and the trial it branched from. The "disk" column is what each trial
folder takes (``grpo.report.disk``; empty: no folder, or not measured).
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

import pandas as pd
from optuna.trial import FrozenTrial, TrialState

from grpo._fs import tail_lines
from grpo.errors import shorten
from grpo.report._fmt import cell as _cell
from grpo.report._fmt import duration_text as _duration
from grpo.report._fmt import escape
from grpo.report._fmt import fmt as _fmt
from grpo.report._fmt import num as _num
from grpo.report._snapshot import StudySnapshot
from grpo.report.best import pareto_front, ranked
from grpo.report.chains import Chains, chain_text, logical_trials, resume_text, retry_chains
from grpo.report.collect import Frames, spread_columns, study_objectives, trial_dir, value_columns
from grpo.report.disk import size_text
from grpo.report.tracking import tracking_facts
from grpo.report.trial_config import changed_note, recorded_config
from grpo.trial_attrs import LAST_LOG_LINES

MAX_DETAIL_ALL = 100  # up to this many trials, every trial gets a detail section
MAX_DETAIL_BEST = 50
MAX_DETAIL_FAILED = 50
MAX_DETAIL_RUNNING = 20
LOG_TAIL_LINES = 20


def table(snap: StudySnapshot, frames: Frames, detail: set[int]) -> str:
    """The sortable trials table: pandas' Styler renders the cells (each escaped), a few lines of JS sort it.

    Cells whose text does not sort (durations) carry their number in a ``data-sort`` attribute.
    """
    trials = frames.trials
    if trials.empty:
        return '<section id="trials"><h2>Trials</h2><p class="note">No trials yet.</p></section>'
    chains = retry_chains(snap.get_trials(deepcopy=False))
    if chains.runs:  # each chain together, at its first attempt's place: the last run first, then the earlier
        trials = trials.iloc[_chain_order(trials["number"].tolist(), chains)].reset_index(drop=True)
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
    # Columns only some studies have: intervals over seeds, the confirmation stage, reported throughput.
    if trials["value_interval"].notna().any():
        columns.insert(3 + len(names), ("interval", trials["value_interval"].map(_first_interval), _num_text))
    if trials["confirmation_of"].notna().any():
        columns.insert(2, ("confirms", trials["confirmation_of"], lambda n: f"#{int(n)}" if n == n else ""))
    if trials["throughput"].notna().any():
        columns.insert(len(columns) - 1, ("tokens/s", trials["throughput"], lambda v: _num(v, 4)))
    if "disk_bytes" in trials and trials["disk_bytes"].notna().any():
        disk = list(zip(trials["disk_bytes"], trials["disk_partial"], strict=True))
        columns.insert(len(columns) - 1, ("disk", pd.Series(disk, dtype=object), _sortable_size))
    if "pbt_generation" in trials and trials["pbt_generation"].notna().any():
        columns.insert(2, ("population", pd.Series(_population_texts(trials), dtype=object), str))
    if chains.runs:
        by_number = {t.number: t for t in snap.get_trials(deepcopy=False)}
        texts = [chain_text(n, chains, by_number) for n in trials["number"].tolist()]
        columns.insert(1, ("retry chain", pd.Series(texts, dtype=object), str))
    # Each cell is escaped and formatted here, once, not by ``Styler.format``: a formatter per cell makes
    # ``Styler.to_html`` deep-copy 170,000 of them for a 10,000-trial table (a second of CPU).
    shown = pd.DataFrame(
        {f"c{i}": [_html_cell(v, fmt) for v in col.to_numpy()] for i, (_, col, fmt) in enumerate(columns)}
    )
    shown[f"c{len(columns)}"] = [_reason_cell(v) for v in reason.to_numpy()]
    styler = shown.style.hide(axis="index").relabel_index(
        [escape(label) for label, _, _ in columns] + ["reason"], axis=1
    )
    table = styler.to_html(exclude_styles=True)
    # Styler indents its markup; without the whitespace a 10,000-trial table is a third smaller.
    table = _BETWEEN_TAGS.sub("><", table).replace("<td >", "<td>").replace("<th >", "<th>")
    table = table.replace("<table>", '<table class="sortable trials">', 1)
    count = f"{len(trials)} trials"
    if chains.runs:
        logical = len(logical_trials(snap.get_trials(deepcopy=False), chains))
        count = (
            f"{logical} logical trials in {len(trials)} Optuna trials: a retry continues the attempt it retries "
            "(Optuna keeps the attempt's FAIL record), and each retried trial's runs are listed together, its last "
            "run first"
        )
    return (
        f'<section id="trials"><h2>Trials</h2><p>{escape(count)}; click a column header to sort.</p>'
        f'<div class="scroll">{table}</div></section>'
    )


_BETWEEN_TAGS = re.compile(r">\s+<")


def _population_texts(trials: pd.DataFrame) -> list[str]:
    """A pbt segment's place: ``m1 g1 <- #0 (exploit)`` (member, generation, the trial it branched from)."""
    out = []
    for member, generation, parent, exploited in zip(
        trials["pbt_member"], trials["pbt_generation"], trials["branch_of"], trials["exploited"], strict=True
    ):
        if pd.isna(generation):
            out.append("")
            continue
        text = (f"m{int(member)} " if not pd.isna(member) else "") + f"g{int(generation)}"
        if not pd.isna(parent):
            text += f" <- #{int(parent)}" + (" (exploit)" if not pd.isna(exploited) and bool(exploited) else "")
        out.append(text)
    return out


# ------------------------------------------------------------------------------------- retry chains
def _chain_order(numbers: list[int], chains: Chains) -> list[int]:
    """Row positions: by logical trial (its first attempt's number), its last run first, then the earlier
    ones, newest first; trials outside a chain stay where they are."""
    position = {n: i for i, n in enumerate(numbers)}

    def key(n: int) -> tuple[int, int, int]:
        root = chains.root.get(n)
        if root is None:
            return (position[n], 0, 0)
        return (position.get(root, position[n]), 1 if n != chains.runs[root][-1] else 0, -n)

    return sorted(range(len(numbers)), key=lambda i: key(numbers[i]))


def _sortable_size(cell: tuple[Any, Any]) -> str:
    """A trial folder's size, ``&ge;`` when part of it could not be read; its bytes for the sort code."""
    value, partial = cell
    if not isinstance(value, (int, float)) or value != value:
        return ""
    return f'<span data-sort="{int(value)}">{"&ge; " if bool(partial) else ""}{size_text(value)}</span>'


def _first_interval(text: Any) -> str | None:
    """The first objective's ``[low, high]`` from the ``value_interval`` JSON, as text."""
    interval = _interval(text, 0)
    return None if interval is None else f"[{_num(interval[0])}, {_num(interval[1])}]"


def _interval(text: Any, objective: int) -> tuple[float, float] | None:
    if not isinstance(text, str):
        return None
    try:
        entry = json.loads(text)[objective]
        return float(entry[0]), float(entry[1])
    except (ValueError, TypeError, IndexError, KeyError):
        return None


def _num_text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def value_texts(snap: StudySnapshot, trial: FrozenTrial, row: pd.Series | None) -> list[str]:
    """Each objective of ``trial`` as text: its value (the mean over seeds) with the ``value_interval``
    the sweep recorded, else the std over seeds, and the number of seeds."""
    raw = row.get("seeds") if row is not None else None
    seeds = int(raw) if raw is not None and pd.notna(raw) else 0  # numpy integers are no Python ints
    many = seeds > 1
    out = []
    for i, goal in enumerate(study_objectives(snap)):
        value = trial.values[i] if trial.values else None
        text = f"{goal.metric} = {_num(value)}"
        interval = _interval(row.get("value_interval") if row is not None else None, i)
        spread = row.get(spread_columns(snap)[i]) if row is not None else None
        if interval is not None:
            text += f" [{_num(interval[0])}, {_num(interval[1])}] over {seeds if many else '?'} seeds"
        elif many and isinstance(spread, float) and math.isfinite(spread):
            text += f" ± {_num(spread, 3)} (std over {seeds} seeds)"
        out.append(text)
    return out


def _html_cell(value: Any, formatter: Any) -> str:
    """A table cell's HTML: '' for a missing value, else ``formatter`` of the value (a string escaped first)."""
    if value is None or (isinstance(value, float) and math.isnan(value)) or value is pd.NA:
        return ""
    return str(formatter(escape(value) if isinstance(value, str) else value))


def _is_text(value: Any) -> bool:
    return isinstance(value, str)


def _sortable_duration(seconds: Any) -> str:
    return f'<span data-sort="{_num(seconds, 12)}">{_duration(seconds)}</span>'


def _reason_cell(reason: Any) -> str:
    if not isinstance(reason, str):
        return ""
    one_line = " ".join(reason.split())
    return f'<span class="reason" title="{escape(one_line)}">{escape(shorten(one_line, 120))}</span>'


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
    for trial in snap.get_trials(deepcopy=False):
        found = recorded_config(trial, snap)
        if found is not None:
            return found.config, f"trial #{trial.number}'s config ({why})"
    return None, why


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
        if key.startswith("engine.trial_params."):
            continue  # the searched values again, as a tracked run logs them (shown as the trial's params)
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
    lines = trial.user_attrs.get(LAST_LOG_LINES)
    if isinstance(lines, list) and lines:
        return [str(x) for x in lines][-LOG_TAIL_LINES:]
    directory = trial_dir(trial, snap)
    if directory is None:
        return []
    for log_file in (directory / "train.log", *sorted(directory.glob("runs/seed*/train.log"))):
        if log_file.is_file():
            return tail_lines(log_file, LOG_TAIL_LINES)
    return []


def details(
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
    chains = retry_chains(snap.get_trials(deepcopy=False))
    for number in numbers:
        trial = by_number[number]
        row = rows.loc[number]
        facts = [
            ("state", escape(trial.state.name) + (" (best)" if best is not None and number == best.number else ""))
        ]
        if trial.values:
            label = "last reported value" if trial.state == TrialState.PRUNED else "value"
            facts.append((label, "<br>".join(escape(v) for v in value_texts(snap, trial, row))))
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
            ("confirms trial", "confirmation_of"),
            ("start point", "start_point"),
            ("transferred from", "transferred_from"),
            ("tokens/s", "throughput"),
            ("trial dir", "trial_dir"),
            ("pruned", "pruned_reason"),
            ("failure", "failure_reason"),
        ):
            value = row.get(key)
            if value is not None and not (isinstance(value, float) and math.isnan(value)) and value != "":
                facts.append((label, escape(_cell(value))))
        facts += _chain_facts(number, chains, by_number, set(numbers))
        if isinstance(row.get("disk_bytes"), float) and math.isfinite(row["disk_bytes"]):
            facts.append(("disk", escape(disk_text(row))))
        for flag in frames.flags.get(number, []):
            facts.append(("flag", f"<b>{escape(flag.name)}</b>: {escape(flag.detail)}"))
        if trial.params:
            facts.append(
                (
                    "params",
                    "<br>".join(f"<code>{escape(k)}</code> = {escape(_fmt(v))}" for k, v in trial.params.items()),
                )
            )
        found = recorded_config(trial, snap)
        facts += tracking_facts(found.config if found else None, number, trial_dir(trial, snap))
        body = "".join(f"<dt>{k}</dt><dd>{v}</dd>" for k, v in facts)
        if found is not None and base is not None:
            diff = config_diff(base, found.config)
            if diff:
                trs = "".join(
                    f"<tr><td><code>{escape(k)}</code></td><td>{escape(_fmt(a))}</td><td>{escape(_fmt(b))}</td></tr>"
                    for k, a, b in diff
                )
                diff_html = f'<table class="diff"><tr><th>key</th><th>base</th><th>this trial</th></tr>{trs}</table>'
            else:
                diff_html = "<p>Same config as the base.</p>"
            if found.changed:
                diff_html = f'<p class="note">{escape(changed_note(found, trial))}.</p>' + diff_html
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


def _chain_facts(
    number: int, chains: Chains, by_number: dict[int, FrozenTrial], detail: set[int]
) -> list[tuple[str, str]]:
    """A chain member's facts: the whole chain (each run linked, with its state) and where it resumed."""
    root = chains.root.get(number)
    if root is None:
        return []
    runs = chains.runs[root]
    links = " &rarr; ".join(
        (f'<a href="#trial-{n}">#{n}</a>' if n in detail and n != number else f"#{n}")
        + f" ({escape(by_number[n].state.name.lower())})"
        for n in runs
    )
    facts = [("retry chain", f"{escape(chain_text(number, chains, by_number))}: {links}")]
    if number in chains.successor and runs.index(number) > 0:  # the last run's chain text says it already
        facts.append(("resumed", escape(resume_text(by_number[number]))))
    return facts


def disk_text(row: Any) -> str:
    """``117 kB (49 kB checkpoints)``, ``at least ...`` where part of the folder could not be read."""
    total, ckpt = row.get("disk_bytes"), row.get("checkpoint_bytes")
    text = size_text(total)
    if isinstance(ckpt, float) and math.isfinite(ckpt) and ckpt > 0:
        text += f" ({size_text(ckpt)} checkpoints)"
    return ("at least " + text) if bool(row.get("disk_partial")) else text


# ---------------------------------------------------------------------------------------- templates
