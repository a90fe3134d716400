"""backend: trl, crash safety with real processes: the driver's process group is SIGKILLed while real TRL
GRPOTrainer trials run, the same command is rerun, and the study ends complete (its report written) with the killed
trials continued from their TRL ``checkpoint-N`` folders (TRL's ``resume_from_checkpoint``), nothing left RUNNING."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest
from optuna.trial import TrialState
from sweep_helpers import load, run_cli, start_cli, states, wait_for, write_spec

from grpo._fs import checkpoint_iteration

pytest.importorskip("trl", reason="trl not installed (pip install -e .[trl])")

# 4 prompts x 4 samples, one optimizer step per iteration, no held-out evaluation (the objective is the
# training reward): the cheapest real TRL trial; a checkpoint every 2 of 8 iterations.
TINY = [
    "megatron_training.train_iters=8", "megatron_training.save_interval=2", "megatron_training.global_batch_size=4",
    "rl_config.mini_batch_size=4", "rl_config.n_samples_per_prompt=4", "actor_config.micro_batch_size=16",
    "rl_config.epochs=1", "generate_config.sampling_config.max_tokens=16", "engine.eval_every=null",
    "engine.device=cpu",
]  # fmt: skip


@pytest.mark.slow
def test_a_sigkilled_driver_resumes_real_trl_trials_from_their_checkpoint(tmp_path):
    spec = write_spec(
        tmp_path, trials=2, concurrency=2, retries=1, backend="trl", overrides=TINY,
        search={"actor_config.lr": "choice(1e-5, 1e-4)"}, sampler={"name": "grid", "seed": 0},
        objective={"metric": "grpo/score/mean", "direction": "maximize", "reduce": "last"},
    )  # fmt: skip
    proc = start_cli(["run", str(spec), "--quiet", "--no-report"], cwd=tmp_path)
    ckpt = tmp_path / "studies" / "s" / "trials" / "0" / "runs" / "seed0" / "ckpt"
    wait_for(lambda: (checkpoint_iteration(ckpt) or 0) >= 2 or proc.poll() is not None, 300, "checkpoint-2")
    assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
    os.killpg(proc.pid, signal.SIGKILL)  # the driver, Ray and the TRL workers: nothing ends cleanly
    proc.wait(timeout=30)
    killed = {t.number for t in load(tmp_path).trials if t.state == TrialState.RUNNING}
    # Trial 0 was mid-run (6 iterations left); trial 1 too, unless its worker started that much earlier.
    assert 0 in killed and states(load(tmp_path)) in ({"RUNNING": 2}, {"RUNNING": 1, "COMPLETE": 1})

    done = run_cli(["run", str(spec), "--quiet"], cwd=tmp_path, timeout=400)  # the rerun also writes the report
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "reports" / "s" / "index.html").is_file()
    study = load(tmp_path)
    assert not [t for t in study.trials if t.state == TrialState.RUNNING]
    complete = [t for t in study.trials if t.state == TrialState.COMPLETE]
    assert len(complete) == 2 and {t.params["actor_config.lr"] for t in complete} == {1e-5, 1e-4}
    dead = {t.number: t for t in study.trials if t.state == TrialState.FAIL}
    assert set(dead) == killed and all("driver died" in t.user_attrs["failure_reason"] for t in dead.values())
    assert {t.user_attrs.get("retry_of") for t in complete} - {None} == killed  # each killed trial ran again
    (retry,) = [t for t in complete if t.user_attrs.get("retry_of") == 0]
    assert retry.params == dead[0].params and retry.user_attrs["attempt"] == 1
    at = next(iter(retry.user_attrs["resumed_at_iteration"].values()))
    assert at >= 2  # continued from trial 0's checkpoint, not from iteration 1
    run_dir = Path(retry.user_attrs["trial_dir"]) / "runs" / "seed0"
    log = (run_dir / "train.log").read_text()
    assert f"resume from {ckpt / f'checkpoint-{at}'}" in log  # TRL's resume_from_checkpoint got that folder
    # TRL trained only the iterations after the checkpoint; the driver adopted the dead trial's rows up to it.
    rows = [json.loads(line)["iteration"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert rows == list(range(at + 1, 9))
    assert sorted(retry.intermediate_values) == list(range(1, 9))
