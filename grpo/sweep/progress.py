"""The live terminal view of a running study: a table of running trials and an overall progress bar.

It shows ``ProgressSnapshot`` values the driver hands it (``grpo.sweep.driver``) and never reads the
driver itself.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from rich.console import Console, Group
from rich.live import Live
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from grpo.sweep.space import format_params
from grpo.sweep.spec import SweepSpec

if TYPE_CHECKING:
    from grpo.sweep.driver import ProgressSnapshot

REFRESH_S = 0.5


class LiveProgress:
    """Shows running trials (iteration, objective so far), finished count and best-so-far.

    On a terminal it is a rich Live display; otherwise (CI, a pipe) it prints one line per event.
    """

    def __init__(self, spec: SweepSpec, console: Console):
        self.spec, self.console = spec, console
        self.interactive = console.is_terminal
        self._bar = Progress(
            TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn()
        )
        self._task = self._bar.add_task(spec.study, total=spec.trials)
        self._live = Live(console=console, refresh_per_second=4, transient=False) if self.interactive else None
        self._last = 0.0

    def __enter__(self) -> LiveProgress:
        if self._live is not None:
            self._live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._live is not None:
            self._live.__exit__(None, None, None)

    def log(self, message: str) -> None:
        self.console.print(message, highlight=False, markup=False)

    def due(self) -> bool:
        """True when a new frame is worth drawing (a terminal, and not drawn in the last REFRESH_S)."""
        return self._live is not None and time.monotonic() - self._last >= REFRESH_S

    def update(self, snapshot: ProgressSnapshot) -> None:
        if self._live is None:
            return
        self._last = time.monotonic()
        self._bar.update(self._task, completed=snapshot.counted)
        objective = self.spec.objectives[0]
        table = Table(title="running trials", expand=False)
        # The iteration is the step every seed of the trial has reached; the value is the seeds' mean there.
        for col in ("#", "params", "seeds", "iteration", f"{objective.metric} ({objective.reduce})"):
            table.add_column(col)
        for trial in snapshot.running:
            value = "" if trial.objective_so_far is None else f"{trial.objective_so_far:.4g}"
            number = str(trial.number)
            if trial.confirmation_of is not None:
                number += f" (confirms {trial.confirmation_of})"
            table.add_row(number, format_params(trial.params), str(trial.seeds), str(trial.iteration), value)
        if self.spec.multi_objective:
            best = ""
        elif snapshot.best is None:
            best = "best so far: none yet"
        else:
            best = f"best so far: trial {snapshot.best[0]} = {snapshot.best[1]:.4g}"
        self._live.update(Group(table, self._bar, best))
