"""backend trl with ``trl.launcher: accelerate``: the spec's ``trl:`` section (refused settings are one line naming
the key, exit 2 at validate), the ``accelerate launch`` command line and Ray resources, and real trials under
``accelerate launch --cpu --num_processes 1`` (accelerate 1.16's simple launcher: one subprocess running
``python -m grpo.sweep.backends.trl.worker``): the rows stream from its metrics.jsonl, a prune stops it through the
stop file at the next optimizer step (its whole process group gone), it resumes from its checkpoint-N keeping
the earlier rows, one that does not stop within ``trl.stop_grace`` is killed with its process group, one whose Ray
worker is SIGKILLed stops on its own, and one runs through the driver."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from sweep_helpers import run_cli, write_spec

from grpo._fs import checkpoint_iteration, group_alive
from grpo.config import load_config
from grpo.errors import UserError
from grpo.sweep.backends.trl.backend import TrlBackend
from grpo.sweep.backends.trl.launch import LOG, RESULT, WORKER, accelerate_command
from grpo.sweep.spec.load import load_spec
from grpo.sweep.spec.models import TrlSpec

TINY = [
    "megatron_training.global_batch_size=4", "rl_config.mini_batch_size=4", "rl_config.n_samples_per_prompt=4",
    "actor_config.micro_batch_size=16", "rl_config.epochs=1", "generate_config.sampling_config.max_tokens=16",
    "engine.eval_every=null", "engine.device=cpu", "engine.keep_checkpoints=null",
]  # fmt: skip
ACCELERATE = TrlSpec(launcher="accelerate", num_processes=1)


def cfg_of(*overrides: str):
    return load_config("grpo_trainer_tiny_cpu", [*TINY, *overrides])


def spec_with(tmp_path: Path, trl: dict, backend: str = "trl") -> Path:
    path = write_spec(tmp_path, backend=backend, search={"actor_config.lr": "choice(1e-5, 1e-4)"})
    raw = yaml.safe_load(path.read_text())
    path.write_text(yaml.safe_dump({**raw, "trl": trl}, sort_keys=False))
    return path


def problems_of(path: Path) -> list[str]:
    with pytest.raises(UserError) as err:
        load_spec(path)
    return err.value.problems


def test_trl_settings_that_cannot_work_are_one_line_naming_the_key(tmp_path):
    (tmp_path / "zero3.yaml").write_text("distributed_type: DEEPSPEED\n")
    spec = load_spec(spec_with(tmp_path, {"launcher": "accelerate", "num_processes": 4, "config_file": "zero3.yaml"}))
    assert spec.trl.config_file == "zero3.yaml"  # relative to the spec's folder: the backend gets it absolute
    assert TrlBackend.from_spec(spec).settings.config_file == str(tmp_path / "zero3.yaml")
    cases = {
        "trl.num_processes: needs trl.launcher: accelerate": {"num_processes": 2},
        "trl.config_file: nope.yaml: no such file": {"launcher": "accelerate", "config_file": "nope.yaml"},
        "trl.extra_args: --num_processes=2: set by the backend": {"launcher": "accelerate",
                                                                 "extra_args": ["--num_processes=2"]},
        "trl.launcher": {"launcher": "torchrun"},
        "trl.stop_grace": {"stop_grace": -1},
    }  # fmt: skip
    for expected, trl in cases.items():
        (problem,) = problems_of(spec_with(tmp_path, trl))
        assert expected in problem and "\n" not in problem, problem
    (problem,) = problems_of(spec_with(tmp_path, {"launcher": "accelerate"}, backend="embedded"))
    assert "trl.launcher: only backend trl reads trl: (backend is embedded)" in problem
    done = run_cli(["validate", str(spec_with(tmp_path, {"num_processes": 2}))], cwd=tmp_path)
    assert done.returncode == 2 and "trl.num_processes" in done.stderr and "Traceback" not in done.stderr


def test_accelerate_command_and_resources(tmp_path):
    settings = TrlSpec(
        launcher="accelerate", num_processes=4, config_file="/c/zero3.yaml", extra_args=["--main_process_port=0"]
    )
    cuda = cfg_of("engine.device=cuda")
    cmd = accelerate_command(settings, cuda, tmp_path / "job.json")
    assert cmd[1:6] == ["-m", "accelerate.commands.launch", "--config_file", "/c/zero3.yaml", "--num_processes"]
    assert cmd[6:] == ["4", "--main_process_port=0", "-m", WORKER, str(tmp_path / "job.json")]
    assert "--cpu" in accelerate_command(ACCELERATE, cfg_of(), tmp_path / "j") and "--cpu" not in cmd
    assert "--multi_gpu" in accelerate_command(TrlSpec(launcher="accelerate", num_processes=2), cuda, tmp_path / "j")
    assert TrlBackend(settings).resources(cuda) == {"num_cpus": 4, "num_gpus": 4}  # one GPU per process
    assert TrlBackend().resources(cuda) == {"num_cpus": 1, "num_gpus": 1}
    assert TrlBackend(ACCELERATE).resources(cfg_of()) == {"num_cpus": 1}
    (problem,) = TrlBackend(TrlSpec(launcher="accelerate", num_processes=2)).check(cfg_of())
    assert "trl.num_processes: 2: with engine.device cpu accelerate launch starts one process" in problem


def rows(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.slow
def test_an_accelerate_trial_streams_stops_when_pruned_and_resumes(tmp_path):
    pytest.importorskip("trl", reason="trl not installed (pip install -e .[trl])")
    run_dir, reported = tmp_path / "run", []
    cfg = cfg_of("megatron_training.train_iters=50", "megatron_training.save_interval=2",
                 f"actor_config.save={run_dir}/ckpt", "actor_config.lr_warmup_fraction=0")  # fmt: skip
    summary = TrlBackend(ACCELERATE).run(cfg, run_dir, lambda i, m: reported.append((i, m)) or i >= 3, False)
    assert [i for i, _ in reported] == [1, 2, 3] and summary["stopped_early"] and not summary["killed"]
    assert "grpo/score/mean" in reported[0][1] and reported[0][1]["actor/lr"] == pytest.approx(1e-4)
    log = (run_dir / LOG).read_text()
    assert "-m accelerate.commands.launch --cpu" in log and f"--num_processes 1 -m {WORKER}" in log
    assert summary["returncode"] == 0 and not group_alive(summary["pid"])  # it ended on its own, all of it
    assert json.loads((run_dir / RESULT).read_text())["summary"]["stopped_early"]  # the worker's own summary
    # The worker sees the stop file at its next optimizer step after the parent read row 3 (a poll later, so a fast
    # machine may train a row or two more, unreported): it stopped within a few iterations of 50.
    first, c = rows(run_dir), checkpoint_iteration(run_dir / "ckpt")
    assert [r["iteration"] for r in first] == list(range(1, len(first) + 1)) and 3 <= len(first) < 10
    assert c is not None and c % 2 == 0 and 2 <= c <= len(first)  # save_interval 2, none at the stopping step

    # A retry in the same run dir: resumes checkpoint-c with its own lr; the rows up to c stay as they were.
    ckpt = f"{run_dir}/ckpt"
    cfg = cfg_of(f"megatron_training.train_iters={c + 2}", f"megatron_training.save_interval={c + 2}",
                 "actor_config.lr=7e-5", f"actor_config.load={ckpt}", "actor_config.finetune=false",
                 f"actor_config.save={ckpt}")  # fmt: skip
    again: list = []
    summary = TrlBackend(ACCELERATE).run(cfg, run_dir, lambda i, m: again.append((i, m)) or False, True)
    assert [i for i, _ in again] == [c + 1, c + 2] and summary["start_iteration"] == c
    assert not summary["stopped_early"] and all(m["actor/lr"] == pytest.approx(7e-5) for _, m in again)
    assert f"resume from {run_dir / 'ckpt' / f'checkpoint-{c}'}" in (run_dir / "train.log").read_text()
    assert rows(run_dir)[:c] == first[:c] and [r["iteration"] for r in rows(run_dir)] == list(range(1, c + 3))
    assert checkpoint_iteration(run_dir / "ckpt") == c + 2 and summary["iterations"] == c + 2


@pytest.mark.slow
def test_an_accelerate_trial_that_does_not_stop_in_time_is_killed_with_its_process_group(tmp_path):
    pytest.importorskip("trl", reason="trl not installed (pip install -e .[trl])")
    cfg = cfg_of("megatron_training.train_iters=200", f"actor_config.save={tmp_path}/ckpt")
    settings = TrlSpec(launcher="accelerate", num_processes=1, stop_grace=0)  # no time to stop on its own
    summary = TrlBackend(settings).run(cfg, tmp_path, lambda i, m: i >= 1, False)
    assert summary["stopped_early"] and summary["killed"] and summary["iterations"] == 1
    assert summary["returncode"] != 0 and not group_alive(summary["pid"])
    assert not (tmp_path / RESULT).exists()  # the worker never finished
    assert "(process group killed)" in (tmp_path / LOG).read_text()


@pytest.mark.slow
def test_an_accelerate_trial_through_the_driver(tmp_path):
    pytest.importorskip("trl", reason="trl not installed (pip install -e .[trl])")
    from optuna.trial import TrialState
    from sweep_helpers import load

    over = [*TINY, "megatron_training.train_iters=3", "megatron_training.save_interval=3"]
    path = write_spec(tmp_path, backend="trl", overrides=over, trials=1, concurrency=1,
                      search={"actor_config.lr": "choice(1e-4)"}, sampler={"name": "grid", "seed": 0})  # fmt: skip
    raw = yaml.safe_load(path.read_text())
    path.write_text(yaml.safe_dump({**raw, "trl": {"launcher": "accelerate", "num_processes": 1}}, sort_keys=False))
    done = run_cli(["run", str(path), "--quiet", "--no-report"], cwd=tmp_path, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    (trial,) = load(tmp_path).trials
    assert trial.state == TrialState.COMPLETE and sorted(trial.intermediate_values) == [1, 2, 3]
    run_dir = Path(trial.user_attrs["trial_dir"]) / "runs" / "seed0"
    assert f"--num_processes 1 -m {WORKER}" in (run_dir / LOG).read_text()  # the trial ran under accelerate launch
    assert [r["iteration"] for r in rows(run_dir)] == [1, 2, 3]


@pytest.mark.slow
def test_an_accelerate_trial_stops_on_its_own_when_its_ray_worker_is_killed(tmp_path):
    """What a SIGKILLed driver leaves: the accelerate group (a session of its own) outlives the Ray worker that
    launched it; it must stop rather than train on beside the retry."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from sweep_helpers import cli_env, count_lines, wait_for

    pytest.importorskip("trl", reason="trl not installed (pip install -e .[trl])")
    script = (
        "import sys; from grpo.config import load_config; from grpo.sweep.backends.trl.backend import TrlBackend;"
        "from grpo.sweep.spec.models import TrlSpec;"
        f"cfg = load_config('grpo_trainer_tiny_cpu', {[*TINY, 'megatron_training.train_iters=500']!r});"
        f"TrlBackend(TrlSpec(launcher='accelerate')).run(cfg, {str(tmp_path)!r}, lambda i, m: False, False)"
    )
    worker, group = subprocess.Popen([sys.executable, "-c", script], env=cli_env(), cwd=tmp_path), 0
    try:
        wait_for(lambda: count_lines(tmp_path / "metrics.jsonl") >= 1 or worker.poll() is not None, 120, "a row")
        assert worker.poll() is None
        line = next(x for x in (tmp_path / LOG).read_text().splitlines() if "process group" in x)
        group = int(line.rsplit(" ", 1)[1])
        os.kill(worker.pid, signal.SIGKILL)  # the worker only, as a dead raylet takes its workers
        worker.wait(timeout=30)
        started = time.monotonic()
        wait_for(lambda: not group_alive(group), 60, "the accelerate group to stop")
        assert time.monotonic() - started < 60
        assert count_lines(tmp_path / "metrics.jsonl") < 500  # it stopped, not finished
        assert json.loads((tmp_path / RESULT).read_text())["summary"]["stopped_early"]  # ended cleanly, on its own
    finally:
        if worker.poll() is None:
            worker.kill()
        if group and group_alive(group):  # a failed test leaves no training behind
            os.killpg(group, signal.SIGKILL)
