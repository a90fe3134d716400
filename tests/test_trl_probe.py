"""The key probe of backend trl (issue 40 item 3): every key the TRL key table calls applied is moved off the probe's
base (grpo/sweep/backends/trl/coverage.py: PROBE_BASE, PROBES) in a real TRL GRPOTrainer run on the CPU, and that
run must differ from the base run: in its metrics, its checkpoint folders, or the model config TRL loaded. A key
no run can show is in NOT_PROBED, and its row in the key table says so; no applied key is in neither. One base run
(run twice: the probe proves nothing unless equal configs give equal runs), one run per key, all in this process.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from grpo.config import load_config
from grpo.engine.coverage import Kind
from grpo.sweep.backends.trl import coverage
from grpo.sweep.backends.trl.backend import TrlBackend

pytest.importorskip("trl", reason="trl not installed (pip install -e .[trl])")
pytest.importorskip("peft", reason="peft not installed (LoRA keys)")

WALL_CLOCK = re.compile(r"time|tps|runtime|per_second")  # metrics that differ between any two runs


def applied_keys() -> list[str]:
    table = coverage.KEYS.table()
    # top level: a section, but the config's trl section (TRL's own fields, trl.args.<field>)
    return [k for k, v in table.items() if v.kind is Kind.APPLIED and ("." in k or k == "trl")]


def test_every_applied_key_has_a_probe_or_says_why_not():
    applied = set(applied_keys())
    assert set(coverage.PROBES) & set(coverage.NOT_PROBED) == set()
    assert applied - set(coverage.PROBES) - set(coverage.NOT_PROBED) == set(), "an applied key without a probe"
    assert set(coverage.PROBES) | set(coverage.NOT_PROBED) <= applied  # no probe for a key that is not applied
    for key, why in coverage.NOT_PROBED.items():
        assert f"(no probe run shows it: {why})" in coverage.classify(key).reason


def evidence(run_dir: Path) -> dict:
    """What a run did, minus wall-clock figures: its metric rows, its checkpoint folders, the model it trained."""
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    rows = [{k: v for k, v in row.items() if not WALL_CLOCK.search(k)} for row in rows]
    ckpt = sorted(p.name for p in (run_dir / "ckpt").glob("checkpoint-*"))
    return {"rows": rows, "checkpoints": ckpt, "model": json.loads((run_dir / "hf_base" / "config.json").read_text())}


def own_run(folder: Path) -> dict[str, Path]:
    """Two HF folders differing only in their chat template, two GSM8K files differing in their rows."""
    from hf_folder import make_qwen2_folder

    template = "{% for m in messages %}Q: {{ m['content'] }}\n{% endfor %}A:"
    out = {
        "model": make_qwen2_folder(folder / "model"),
        "model2": make_qwen2_folder(folder / "model2", chat_template=template),
    }
    for name, start in (("data", 10), ("data2", 40)):
        rows = [{"question": f"What is {a} + {a + 1}?", "answer": f"#### {2 * a + 1}"} for a in range(start, start + 8)]
        out[name] = folder / f"{name}.jsonl"
        out[name].write_text("".join(json.dumps(r) + "\n" for r in rows))
    return out


@pytest.mark.slow
def test_every_probed_key_changes_a_real_trl_run(tmp_path):
    backend, runs = TrlBackend(), {}
    places = {"save": tmp_path / "base" / "ckpt", **own_run(tmp_path / "own")}

    def run(name: str, overrides: tuple[str, ...]) -> dict:
        overrides = tuple(o.format(**places) for o in overrides)
        if overrides not in runs:
            run_dir = tmp_path / name
            cfg = load_config("grpo_trainer_tiny_cpu", [
                *coverage.PROBE_BASE, f"engine.cache_dir={tmp_path}/cache", f"actor_config.save={run_dir}/ckpt",
                *overrides,
            ])  # fmt: skip
            assert backend.check(cfg) == [], (name, overrides)  # the probe runs only what a sweep would run
            backend.run(cfg, run_dir, lambda i, m: False, False)
            runs[overrides] = evidence(run_dir)
        return runs[overrides]

    base = run("base", ())
    again = TrlBackend().run  # the same config again, in another folder: the same run
    cfg = load_config("grpo_trainer_tiny_cpu", [*coverage.PROBE_BASE, f"engine.cache_dir={tmp_path}/cache",
                                                f"actor_config.save={tmp_path}/again/ckpt"])  # fmt: skip
    again(cfg, tmp_path / "again", lambda i, m: False, False)
    assert evidence(tmp_path / "again") == base
    assert len(base["rows"]) == 1 and base["checkpoints"] == ["checkpoint-2"]  # 1 iteration of 2 optimizer steps

    same = []
    for i, (key, (context, moved)) in enumerate(sorted(coverage.PROBES.items())):
        before = run(f"context{i}", context)
        if run(f"probe{i}", (*context, *moved)) == before:
            same.append(key)
    assert same == [], f"applied keys that changed nothing in a TRL run: {same}"
