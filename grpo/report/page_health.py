"""GRPO health and what the model says: two sections of the report page.

``health`` lists every rule of ``grpo.report.diagnostics.RULES`` (its test and what it means) and every
flag that fired, with the iteration where it fired; a flagged winner is said first. ``samples`` shows
held-out prompts and responses at the first and last evaluation (``grpo.report.samples``) of a few
trials: the winner, the runner-up, the trials flagged for reward hacking, then the next best. Every
prompt and response is escaped: they are model output.
"""

from __future__ import annotations

import collections
from pathlib import Path

from optuna.trial import FrozenTrial

from grpo.report import diagnostics
from grpo.report._fmt import escape, num, plural, trial_link
from grpo.report._snapshot import StudySnapshot
from grpo.report.best import ranked
from grpo.report.collect import Frames
from grpo.report.decision import Decision
from grpo.report.samples import Sample, trial_samples

MAX_FLAG_ROWS = 200  # rows of the flags table (every flag is also in the trials table)
MAX_SAMPLE_TRIALS = 6
MAX_RESPONSE_CHARS = 600
# Flags whose story is in the responses: these trials' samples are shown before the next best trial's.
TELLING_FLAGS = ("format_without_accuracy", "reward_up_heldout_down", "length_pinned", "length_blowup")


def health(frames: Frames, decision: Decision, detail: set[int]) -> str:
    counts = collections.Counter(f.name for flags in frames.flags.values() for f in flags)
    rules = "".join(
        f"<tr><td><b>{escape(r.name)}</b></td><td>{counts[r.name]}</td><td>{escape(r.explanation)}</td>"
        f"<td>{escape(r.meaning)}</td></tr>"
        for r in diagnostics.RULES
    )
    meaning = {r.name: r.meaning for r in diagnostics.RULES}
    parts = [
        '<section id="health"><h2>GRPO health</h2>',
        "<p>Rules (grpo/report/diagnostics.py), checked on each trial's curves averaged over its seeds; a red x "
        "on the learning curves marks where one fired.</p>",
        f'<table class="params rules"><tr><th>rule</th><th>trials</th><th>fires when</th><th>what it means</th></tr>'
        f"{rules}</table>",
    ]
    best = decision.best
    if best is not None and frames.flags.get(best.number):
        names = ", ".join(f.name for f in frames.flags[best.number])
        parts.append(f'<p class="note">The winner, trial #{best.number}, is flagged: {escape(names)}.</p>')
    if frames.flags:
        order = sorted(frames.flags, key=lambda n: (best is None or n != best.number, n))
        rows = [(n, f) for n in order for f in frames.flags[n]]
        shown = rows[:MAX_FLAG_ROWS]
        body = "".join(
            f"<tr><td>{trial_link(n, detail)}</td><td><b>{escape(f.name)}</b></td><td>{f.iteration}</td>"
            f"<td>{escape(f.detail)}</td><td>{escape(meaning.get(f.name, ''))}</td></tr>"
            for n, f in shown
        )
        more = f" (the first {MAX_FLAG_ROWS} shown)" if len(rows) > MAX_FLAG_ROWS else ""
        parts.append(
            f"<details{' open' if len(frames.flags) <= 20 else ''}><summary>"
            f"{plural(len(rows), 'flag')} on {plural(len(frames.flags), 'trial')}{more}</summary>"
            '<table class="params flags-table"><tr><th>trial</th><th>flag</th><th>iteration</th>'
            f"<th>what happened</th><th>what it means</th></tr>{body}</table></details>"
        )
    else:
        parts.append('<p class="note">No trial is flagged.</p>')
    parts.append("</section>")
    return "".join(parts)


# ------------------------------------------------------------------------------------------- samples
def sample_trials(snap: StudySnapshot, frames: Frames, decision: Decision) -> list[tuple[FrozenTrial, str]]:
    """(trial, why it is shown): the winner, the runner-up, flagged trials, then the next best."""
    by_number = {t.number: t for t in snap.get_trials(deepcopy=False)}
    telling = {n: [f.name for f in flags if f.name in TELLING_FLAGS] for n, flags in frames.flags.items() if flags}
    chosen: dict[int, str] = {}
    if decision.best is not None:
        chosen[decision.best.number] = "winner"
    if decision.runner_up is not None:
        chosen.setdefault(decision.runner_up.number, "runner-up")
    for number, flagged in sorted(telling.items()):
        if flagged and len(chosen) < MAX_SAMPLE_TRIALS:
            chosen.setdefault(number, "flagged")
    for trial in ranked(snap):
        if len(chosen) >= MAX_SAMPLE_TRIALS:
            break
        chosen.setdefault(trial.number, "next best")
    out = []
    for number, why in chosen.items():
        names = telling.get(number, [])
        if names:
            why = "flagged: " + ", ".join(names) if why == "flagged" else f"{why}; flagged: {', '.join(names)}"
        if number in by_number:
            out.append((by_number[number], why))
    return out


def samples(snap: StudySnapshot, frames: Frames, decision: Decision, detail: set[int]) -> str:
    dirs = dict(zip(frames.trials["number"].tolist(), frames.trials["trial_dir"].tolist(), strict=True))
    head = (
        '<section id="samples"><h2>What the model says</h2><p>Held-out prompts and responses at the first and '
        "the last evaluation, as the trial's first seed wrote them (samples.jsonl), with their rewards: "
        "format hacking shows here before it shows in a number.</p>"
    )
    blocks: list[str] = []
    for trial, why in sample_trials(snap, frames, decision):
        directory = dirs.get(trial.number)
        got = trial_samples(Path(directory) if isinstance(directory, str) else None)
        if not got:
            continue
        iterations = " and ".join(str(i) for i in got)
        rows = "".join(_sample_row(s) for rows in got.values() for s in rows)
        opened = " open" if not blocks else ""
        blocks.append(
            f'<details class="samples"{opened}><summary>Trial {trial_link(trial.number, detail)} ({escape(why)}): '
            f"iterations {escape(iterations)}</summary>"
            '<table class="params samples-table"><tr><th>iteration</th><th>decoding</th><th>prompt</th>'
            f"<th>response</th><th>label</th><th>reward</th><th>correct</th></tr>{rows}</table></details>"
        )
    if not blocks:
        blocks.append('<p class="note">No trial has written samples.jsonl yet (it is written at each evaluation).</p>')
    return head + "".join(blocks) + "</section>"


def _sample_row(sample: Sample) -> str:
    response = sample.response
    if len(response) > MAX_RESPONSE_CHARS:
        response = response[:MAX_RESPONSE_CHARS] + f"… ({len(sample.response) - MAX_RESPONSE_CHARS} more characters)"
    correct = "" if sample.correct is None else ("yes" if sample.correct else "no")
    css = "" if sample.correct is None else (' class="right"' if sample.correct else ' class="wrong"')
    return (
        f"<tr{css}><td>{sample.iteration}</td><td>{escape(sample.kind)}</td>"
        f'<td><pre class="text">{escape(sample.prompt)}</pre></td><td><pre class="text">{escape(response)}</pre></td>'
        f"<td>{escape(sample.label)}</td><td>{escape(num(sample.reward))}</td><td>{correct}</td></tr>"
    )
