"""Cost and reproduce: two sections of the report page.

``cost`` sums the study's device-seconds by kind and the disk its trial folders take (checkpoints apart,
``grpo.report.disk``), and tabulates the best trials' value, device-seconds, wall time, throughput
(``e2e_tps`` where the backend reports it) and disk with pandas' Styler; the figures
are ``grpo.report.cost``'s. ``reproduce`` gives the exact command that reruns the winner on its exported
config (``grpo.report.reproduce``), that config, and the environment the study ran in (package
versions, the project's commit) from the study's ``environment`` attr.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pandas as pd

from grpo.report._fmt import count, duration_text, escape, hours, num, plural
from grpo.report._snapshot import StudySnapshot
from grpo.report.best import ranked
from grpo.report.collect import Frames, study_objectives, value_columns
from grpo.report.decision import Decision
from grpo.report.disk import size_text
from grpo.report.reproduce import commands, recorded_environment

COST_ROWS = 10


def _sum(frame: pd.DataFrame, column: str) -> float:
    return float(frame[column].fillna(0.0).sum()) if column in frame and len(frame) else 0.0


def cost_facts(frames: Frames, decision: Decision) -> str:
    trials = frames.trials
    kind = decision.compute.kind
    held = _sum(trials, "npu_s")
    parts = []
    if held > 0:
        parts.append(f"{kind}-seconds {count(held)} ({hours(held)})")
    parts.append(f"CPU-seconds {count(_sum(trials, 'cpu_s'))} ({hours(_sum(trials, 'cpu_s'))})")
    parts.append(f"trial wall time {duration_text(_sum(trials, 'wall_s')) or '0 s'}")
    tps = trials["throughput"].dropna() if "throughput" in trials else pd.Series(dtype="float64")
    throughput = (
        f"Throughput (e2e_tps as the backend reports it: tokens per second per device for MindSpeed-RL, per run "
        f"for the embedded engine): median {count(float(tps.median()))} tokens/s over {len(tps)} trials, "
        f"{count(float(tps.min()))} to {count(float(tps.max()))}."
        if len(tps)
        else "No trial reported its throughput (e2e_tps)."
    )
    return f"<p>Device time in all: {escape('; '.join(parts))}.</p><p>{escape(throughput)}</p>" + disk_facts(frames)


def disk_facts(frames: Frames) -> str:
    """What the trial folders take on disk, in all and in checkpoints (``grpo.report.disk``), as HTML."""
    trials = frames.trials
    if "disk_bytes" not in trials or trials.empty:
        return ""
    known = trials[trials["disk_bytes"].notna()]
    unknown = len(trials) - len(known)
    if known.empty:
        return '<p class="note">Disk used: unknown (no trial folder found).</p>'
    total, ckpt = float(known["disk_bytes"].sum()), float(known["checkpoint_bytes"].fillna(0).sum())
    partial = bool(known["disk_partial"].any())  # a folder that could not be read in full: a lower bound
    text = f"Disk used by {plural(len(known), 'trial folder')}: {'at least ' if partial else ''}{size_text(total)}"
    text += f", {size_text(ckpt)} of it checkpoints" if ckpt > 0 else ", no checkpoints"
    superseded = known[known["superseded_by"].notna()] if "superseded_by" in known else known.iloc[0:0]
    held = float(superseded["checkpoint_bytes"].fillna(0).sum())
    if held > 0:
        text += (
            f" ({size_text(held)} in {plural(len(superseded), 'attempt')} a retry superseded: a retry resumes "
            "from them, then saves its own)"
        )
    text += "."
    stopped = frames.disk.stopped if frames.disk is not None else None
    if stopped:
        text += f" {plural(frames.disk.skipped if frames.disk else 0, 'trial folder')} not measured ({stopped})."
    if unknown:
        text += f" {plural(unknown, 'trial')} without a folder or not measured: unknown, not counted."
    return f'<p class="disk">{escape(text)}</p>'


def cost_table(snap: StudySnapshot, frames: Frames, decision: Decision) -> str:
    """The best ``COST_ROWS`` complete trials (the winner first) with what each cost."""
    order = [t.number for t in ranked(snap)][:COST_ROWS]
    if decision.best is not None:
        order = [decision.best.number, *[n for n in order if n != decision.best.number][: COST_ROWS - 1]]
    if not order:
        return ""
    rows = frames.trials.set_index("number").loc[order]
    metric = study_objectives(snap)[0].metric
    value_column = value_columns(snap)[0]
    shown = pd.DataFrame(
        {
            "trial": [f"#{n}" + (" (winner)" if decision.best and n == decision.best.number else "") for n in order],
            metric: rows[value_column].to_numpy(),
            "seeds": rows["seeds"].to_numpy(),
            "device-seconds": rows["compute_s"].to_numpy(),
            "wall time": rows["wall_s"].map(_text_duration).to_numpy(),
            "tokens/s": rows["throughput"].to_numpy(),
            "disk": [
                ("at least " if bool(p) else "") + size_text(b)
                for b, p in zip(rows["disk_bytes"], rows["disk_partial"], strict=True)
            ]
            if "disk_bytes" in rows
            else [""] * len(order),
        }
    )
    styler = (
        shown.style.format(
            {metric: num, "seeds": _int_text, "device-seconds": count, "tokens/s": num}, escape="html", na_rep=""
        )
        .hide(axis="index")
        .format_index(escape="html", axis=1)
    )
    table = styler.to_html(exclude_styles=True).replace("<table>", '<table class="params cost-table">', 1)
    return f"<h3>What the best trials cost</h3>{table}"


def _text_duration(value: Any) -> str:
    return duration_text(value) if isinstance(value, (int, float)) and math.isfinite(value) else ""


def _int_text(value: Any) -> str:
    return str(int(value)) if isinstance(value, (int, float)) and math.isfinite(value) else ""


def reproduce(snap: StudySnapshot, decision: Decision, config_path: Path, config_text: str | None) -> str:
    head = '<section id="reproduce"><h2>Reproduce</h2>'
    best = decision.best
    if best is None:
        return head + '<p class="note">No completed trial yet.</p>' + _environment(snap) + "</section>"
    parts = [head]
    if config_text is None:
        parts.append(f'<p class="note">Trial #{best.number} recorded no config: there is nothing to rerun from.</p>')
    else:
        how = commands(snap, best, config_path)
        parts.append(f"<p>{escape(how.note)}</p>")
        parts.append(f'<pre class="command"><code>{escape(chr(10).join(how.lines))}</code></pre>')
        parts.append(
            f'<details><summary>The exported config: <a href="{escape(config_path.name)}">{escape(config_path.name)}'
            f'</a> (per-trial paths removed)</summary><pre class="config">{escape(config_text)}</pre></details>'
        )
    parts.append(_environment(snap))
    parts.append("</section>")
    return "".join(parts)


def _environment(snap: StudySnapshot) -> str:
    env = recorded_environment(snap)
    if env is None:
        return (
            '<p class="note">The study records no environment (package versions, commit): studies made by an '
            "older grpo-sweep do not.</p>"
        )
    facts = [(k, env.get(k)) for k in ("python", "platform", "commit") if env.get(k) is not None]
    rest = {k: v for k, v in env.items() if k not in ("python", "platform", "commit", "packages")}
    facts += sorted(rest.items())
    body = "".join(f"<dt>{escape(str(k))}</dt><dd><code>{escape(str(v))}</code></dd>" for k, v in facts)
    packages = env.get("packages") if isinstance(env.get("packages"), dict) else {}
    rows = "".join(
        f"<tr><td>{escape(str(name))}</td><td><code>{escape(str(version))}</code></td></tr>"
        for name, version in sorted((packages or {}).items())
    )
    table = f'<table class="params"><tr><th>package</th><th>version</th></tr>{rows}</table>' if rows else ""
    return f'<h3>Environment</h3><dl class="facts">{body}</dl>{table}'
