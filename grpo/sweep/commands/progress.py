"""The terminal view of a running study: a live table of running trials and an overall progress bar, or,
when stdout is not a terminal (nohup, CI, a pipe), a progress line every ``LINE_EVERY_S``.

It shows ``ProgressSnapshot`` values the driver hands it (``grpo.sweep.run.driver``) and never reads the
driver itself. The ETA is the snapshot's (``ProgressSnapshot.eta_s``: running trials at their own pace,
the trials still to start at the finished trials' mean wall time, shared by the concurrency slots);
"ETA unknown" until a trial has finished. The last frame, drawn on exit, is the study's final state:
the trials counted, by state, and how long the run took; no stale "running" rows.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from grpo.sweep.spec.models import SweepSpec
from grpo.sweep.spec.space import format_params

if TYPE_CHECKING:
    from grpo.sweep.run.snapshot import ProgressSnapshot, RunningTrial

REFRESH_S = 0.5
LINE_EVERY_S = 30.0  # off a terminal: a progress line at least this often (trial start/end lines come besides)


def clock_text(seconds: float) -> str:
    """``1:02:03`` / ``2:03`` (h:mm:ss, m:ss)."""
    total = max(0, round(seconds))
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def eta_text(snapshot: ProgressSnapshot) -> str:
    eta = snapshot.eta_s
    return "ETA unknown" if eta is None else f"ETA {clock_text(eta)}"


def done_text(snapshot: ProgressSnapshot) -> str:
    """``3/4 trials done (2 complete, 1 pruned)``."""
    parts = [f"{n} {'failed' if state == 'fail' else state}" for state, n in sorted(snapshot.done.items()) if n]
    total = f"/{snapshot.total}" if snapshot.total else ""
    return f"{snapshot.counted}{total} trials done" + (f" ({', '.join(parts)})" if parts else "")


def iteration_text(trial: RunningTrial) -> str:
    return f"{trial.iteration}/{trial.iterations}" if trial.iterations else str(trial.iteration)


class LiveProgress:
    """Shows running trials (iteration x/N, objective so far), trials done, best so far and the ETA.

    On a terminal it is a rich Live display; otherwise it prints the driver's event lines (trial started,
    complete, pruned ...) and, between them, one progress line at least every ``LINE_EVERY_S``.
    """

    def __init__(self, spec: SweepSpec, console: Console, *, line_every_s: float = LINE_EVERY_S):
        self.spec, self.console = spec, console
        self.interactive = console.is_terminal
        self.line_every_s = line_every_s
        self._bar = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("{task.fields[eta]}"),
            console=console,
        )
        self._task = self._bar.add_task(spec.study, total=spec.trials, eta="ETA unknown")
        self._live = Live(console=console, refresh_per_second=4, transient=False) if self.interactive else None
        self._started = time.monotonic()
        self._last = self._started  # the last frame drawn, or (off a terminal) the last line printed
        self._snapshot: ProgressSnapshot | None = None

    def __enter__(self) -> LiveProgress:
        if self._live is not None:
            self._live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._live is None:
            return
        if self._snapshot is not None:  # the last frame: the final state, not the last periodic one
            self._bar.update(self._task, completed=self._snapshot.counted)
            self._bar.stop_task(self._task)
            self._live.update(self._final_frame(self._snapshot), refresh=True)
        self._live.__exit__(None, None, None)

    def log(self, message: str) -> None:
        self.console.print(message, highlight=False, markup=False, soft_wrap=not self.interactive)
        if not self.interactive:
            self._last = time.monotonic()  # an event line is news enough: the next progress line waits

    def due(self) -> bool:
        """True when a new frame (a terminal, every REFRESH_S) or progress line (else, every line_every_s)
        is worth drawing."""
        every = REFRESH_S if self._live is not None else self.line_every_s
        return time.monotonic() - self._last >= every

    def update(self, snapshot: ProgressSnapshot) -> None:
        self._snapshot = snapshot
        self._last = time.monotonic()
        if self._live is None:
            self.console.print(self.line(snapshot), highlight=False, markup=False, soft_wrap=True)
            return
        # The driver's total (a pbt study's is its segments, known once the base config is composed).
        self._bar.update(self._task, completed=snapshot.counted, total=snapshot.total or None, eta=eta_text(snapshot))
        parts: list[RenderableType] = [self._table(snapshot)] if snapshot.running else []
        self._live.update(Group(*parts, self._bar, self._best(snapshot)))

    # -- what is drawn ----------------------------------------------------------------------------------
    def line(self, snapshot: ProgressSnapshot) -> str:
        """The one-line progress summary printed off a terminal."""
        out = f"[{clock_text(time.monotonic() - self._started)}] {self.spec.study}: {done_text(snapshot)}"
        if snapshot.running:
            shown = [
                f"#{t.number} it {iteration_text(t)}"
                + ("" if t.objective_so_far is None else f" ({t.objective_so_far:.4g})")
                for t in snapshot.running
            ]
            out += f"; running {', '.join(shown)}"
        best = self._best(snapshot)
        if best:
            out += f"; {best}"
        if snapshot.running or snapshot.to_start:  # no ETA once nothing is left (the driver's last line)
            out += f"; {eta_text(snapshot)}"
        return out

    def _table(self, snapshot: ProgressSnapshot, title: str = "running trials") -> Table:
        objective = self.spec.objectives[0]
        table = Table(title=title, expand=False)
        # The iteration is the step every seed of the trial has reached; the value is the seeds' mean there.
        for col in ("#", "params", "seeds", "iteration", f"{objective.metric} ({objective.reduce})", "time"):
            table.add_column(col)
        for trial in snapshot.running:
            value = "" if trial.objective_so_far is None else f"{trial.objective_so_far:.4g}"
            number = str(trial.number)
            if trial.confirmation_of is not None:
                number += f" (confirms {trial.confirmation_of})"
            table.add_row(
                number, format_params(trial.params), str(trial.seeds), iteration_text(trial), value,
                clock_text(trial.elapsed_s),
            )  # fmt: skip
        return table

    def _best(self, snapshot: ProgressSnapshot) -> str:
        if self.spec.multi_objective:
            return ""
        if snapshot.best is None:
            return "best so far: none yet"
        return f"best so far: trial {snapshot.best[0]} = {snapshot.best[1]:.4g}"

    def _final_frame(self, snapshot: ProgressSnapshot) -> Group:
        parts: list[RenderableType] = []
        if snapshot.running:  # the driver stopped with trials in flight (a second Ctrl-C, an error)
            parts.append(self._table(snapshot, title="trials in flight when the driver stopped"))
        self._bar.update(self._task, eta="")
        took = clock_text(time.monotonic() - self._started)
        summary = f"{done_text(snapshot)} in {took}"
        best = self._best(snapshot)
        return Group(*parts, self._bar, summary + (f"; {best.replace(' so far', '')}" if best else ""))
