"""``backend: verl_standin_backend:StandinVerlBackend``: backend verl with its job's entry module swapped for
tests/standin_verl/standin_main_ppo.py (everything else is VerlBackend: rendering, verl's own validation at
preflight, one Ray job per trial, the JSONL tail, stop on prune, resume). For tests through the real driver."""

from __future__ import annotations

import os
from pathlib import Path

from grpo.sweep.backends.verl.backend import VerlBackend

HERE = Path(__file__).resolve().parent


class StandinVerlBackend(VerlBackend):
    def __init__(self, *, source: str = "spec"):
        env = {
            "PYTHONPATH": str(HERE),
            "STANDIN_STEP_S": os.environ.get("STANDIN_STEP_S", "0.2"),
            "STANDIN_NO_RAY": "1",
        }
        super().__init__(source=source, module="standin_main_ppo", env=env, poll_s=0.2)

    @classmethod
    def from_spec(cls, spec):  # the stand-in's own launch settings, not the spec's verl: section
        return cls(source=spec.source)

    def launch_warnings(self, cfg):  # the stand-in needs no model or data
        return []
