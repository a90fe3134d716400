"""The live terminal view of a running study: a table of running trials and an overall progress bar."""

from __future__ import annotations

import time

from rich.console import Console, Group
from rich.live import Live
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

REFRESH_S = 0.5


class LiveProgress:
    """Shows running trials (iteration, objective so far), finished count and best-so-far.

    On a terminal it is a rich Live display; otherwise (CI, a pipe) it prints one line per event.
    """

    def __init__(self, spec, console: Console):
        self.spec, self.console = spec, console
        self.interactive = console.is_terminal
        self._bar = Progress(
            TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn()
        )
        self._task = self._bar.add_task(spec.study, total=spec.trials)
        self._live = Live(console=console, refresh_per_second=4, transient=False) if self.interactive else None
        self._last = 0.0

    def __enter__(self):
        if self._live is not None:
            self._live.__enter__()
        return self

    def __exit__(self, *exc):
        if self._live is not None:
            self._live.__exit__(*exc)

    def log(self, message: str) -> None:
        self.console.print(message, highlight=False, markup=False)

    def update(self, driver) -> None:
        now = time.monotonic()
        if self._live is None or now - self._last < REFRESH_S:
            return
        self._last = now
        counted, _ = driver._counted_and_running()
        self._bar.update(self._task, completed=counted)
        objective = self.spec.objectives[0]
        table = Table(title="running trials", expand=False)
        for col in ("#", "params", "seed", "iteration", f"{objective.metric} ({objective.reduce})"):
            table.add_column(col)
        for number, live in sorted(driver.live.items()):
            seed = max(live.last_iteration, key=lambda s: live.last_iteration[s], default=None)
            value = driver._objective_so_far(live, seed, 0) if seed is not None else None
            params = ", ".join(
                f"{k.split('.')[-1]}={v:.3g}" if isinstance(v, float) else f"{k.split('.')[-1]}={v}"
                for k, v in live.params.items()
            )
            table.add_row(
                str(number),
                params,
                "" if seed is None else str(seed),
                str(live.last_iteration.get(seed, 0)) if seed is not None else "0",
                "" if value is None else f"{value:.4g}",
            )
        best = _best_text(driver)
        self._live.update(Group(table, self._bar, best))


def _best_text(driver) -> str:
    if len(driver.spec.objectives) > 1:
        return ""
    try:
        best = driver.study.best_trial
    except ValueError:
        return "best so far: none yet"
    return f"best so far: trial {best.number} = {best.value:.4g}"
