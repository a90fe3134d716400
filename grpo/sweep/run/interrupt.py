"""Ctrl-C and SIGTERM in the driver: the first stops sampling and lets running trials stop cleanly, the
second stops them now."""

from __future__ import annotations

import signal
import threading
from types import FrameType
from typing import Any


class Interrupt:
    """First Ctrl-C (or SIGTERM, what schedulers and ``kill`` send): stop sampling, let running trials
    stop cleanly. Second: stop now. Neither costs a trial an attempt: the trials resume on the next run."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self) -> None:
        self.count = 0
        self._old: dict[int, Any] = {}

    def __enter__(self) -> Interrupt:
        if threading.current_thread() is threading.main_thread():
            self._old = {sig: signal.signal(sig, self._handle) for sig in self.SIGNALS}
        return self

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.count += 1
        if self.count == 1:
            name = signal.Signals(signum).name
            print(
                f"\n{name}: no new trials; running trials stop at their next iteration (again to stop now)",
                flush=True,
            )

    def __exit__(self, *exc: object) -> None:
        for sig, old in self._old.items():
            signal.signal(sig, old)
