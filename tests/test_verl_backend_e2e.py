"""backend verl's launch, log and stop path on a CPU, against tests/standin_verl (a stand-in for verl 0.9.1's
``python -m verl.trainer.main_ppo``: verl's real composed config, its file logger's bytes, its step loop and its
``global_step_N`` layout; tests/standin_verl/standin_main_ppo.py says what is mirrored).

Real here: the Ray cluster with its dashboard, one Ray job per trial submitted through the Jobs API from inside a
Ray task that holds one CPU and no GPU (as the driver's trial worker), ``ray job stop`` on prune, the job's
worker actor ending with it, the JSONL tail across a resume's truncation, and resume_path/load_contents.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from grpo.config import load_config
from grpo.sweep.backends.verl.backend import VerlBackend

ray = pytest.importorskip("ray")
pytest.importorskip("verl")  # its config is the stand-in's

STANDIN = Path(__file__).resolve().parent / "standin_verl"
BASE = [
    "megatron_training.train_iters=4",
    "megatron_training.save_interval=2",
    "megatron_training.global_batch_size=8",
    "rl_config.mini_batch_size=8",
    "rl_config.n_samples_per_prompt=4",
    "rl_config.epochs=1",
    "actor_config.micro_batch_size=32",
    "actor_config.lr_warmup_fraction=0.0",
    "engine.eval_every=2",
]


@pytest.fixture(scope="module")
def cluster():
    """A `ray start --head` cluster with its dashboard and its own agent port (every local Ray's dashboard agent
    wants 52365: a second Ray on the machine would leave this one without an agent to accept jobs)."""
    from test_sweep_connect import _Cluster, _free_port

    if ray.is_initialized():
        ray.shutdown()
    head = _Cluster()
    head.env.pop("RAY_AUTH_TOKEN")
    head.env["RAY_AUTH_MODE"] = "disabled"
    try:
        head.start(["--head", f"--port={head.gcs_port}", f"--ray-client-server-port={head.client_port}",
                    "--num-cpus=2", f"--dashboard-port={_free_port()}",
                    f"--dashboard-agent-listen-port={_free_port()}"], "head")  # fmt: skip
        current = head.base / "head" / "ray_current_cluster"
        head.wait_for(current.is_file, "the head")
        ray.init(address=current.read_text().strip(), log_to_driver=False, configure_logging=False,
                 runtime_env={"env_vars": {"PYTHONPATH": str(Path(__file__).resolve().parent)}})  # fmt: skip
        yield
    finally:
        if ray.is_initialized():
            ray.shutdown()
        head.stop()


def _backend(**env: str) -> VerlBackend:
    return VerlBackend(module="standin_main_ppo", env={"PYTHONPATH": str(STANDIN), "STANDIN_STEP_S": "0.2", **env},
                       poll_s=0.2)  # fmt: skip


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _worker_name(run_dir: Path) -> str:
    """The stand-in job's rollout worker: named after the experiment the backend gave the job (train.log)."""
    line = next(line for line in (run_dir / "train.log").read_text().splitlines() if "experiment_name=" in line)
    return line.split("trainer.experiment_name=")[1].split()[0] + "-rollout"


def _actor_alive(name: str) -> bool:
    try:
        ray.get_actor(name, namespace="standin_verl")
    except ValueError:
        return False
    return True


def test_prune_stops_the_job_and_its_workers_then_retry_and_branch_resume(cluster, tmp_path):
    run1 = tmp_path / "trials" / "0" / "runs" / "seed0"
    ckpt = run1 / "ckpt"
    cfg = load_config("grpo_trainer_tiny_cpu", [*BASE, "actor_config.lr=1e-6", f"actor_config.save={ckpt}"])
    backend = _backend()

    @ray.remote(num_cpus=1)  # the trial's worker: one CPU, no GPU; the job is submitted from here
    def trial(backend, cfg, run_dir):
        seen, alive = [], []

        def report(iteration, metrics):
            seen.append((iteration, metrics["grpo/score/mean"], metrics["critic/score/mean"]))
            alive.append(_actor_alive(_worker_name(run_dir)))  # the job's worker, while the job runs
            return iteration >= 2  # pruned after its second iteration

        return backend.run(cfg, run_dir, report, resume=False), seen, alive

    summary, seen, alive = ray.get(trial.remote(backend, cfg, run1), timeout=120)
    assert summary["stopped_early"] and summary["job_status"] == "STOPPED"
    assert [i for i, *_ in seen] == [1, 2] and all(ours == theirs for _, ours, theirs in seen)
    assert alive == [True, True]
    name = _worker_name(run1)
    deadline = time.monotonic() + 30
    while _actor_alive(name) and time.monotonic() < deadline:  # the job's rollout worker ends with its job
        time.sleep(0.5)
    assert not _actor_alive(name)
    assert (ckpt / "latest_checkpointed_iteration.txt").read_text() == "2"
    assert (ckpt / "global_step_2" / "actor" / "model_world_size_1_rank_0.pt").is_file()
    first_log = _rows(run1 / "verl.jsonl")
    assert [r["step"] for r in first_log][:2] == [1, 2]

    # A retry of the same trial: resume_path from its own global_step_2, optimizer and scheduler kept.
    retry = load_config("grpo_trainer_tiny_cpu", [*BASE, "actor_config.lr=1e-6", f"actor_config.save={ckpt}",
                                                  f"actor_config.load={ckpt}", "actor_config.finetune=false",
                                                  "actor_config.no_load_optim=false", "actor_config.no_load_rng=false"])  # fmt: skip
    steps: list[int] = []
    out = _backend(STANDIN_NO_RAY="1").run(retry, run1, lambda i, m: bool(steps.append(i)), resume=True)
    assert out["resumed_from"] == 2 and steps == [3, 4] and out["job_status"] == "SUCCEEDED"
    assert [r["step"] for r in _rows(run1 / "verl.jsonl")] == [3, 4]  # verl's logger truncated its file ...
    assert [r["iteration"] for r in _rows(run1 / "metrics.jsonl")] == [1, 2, 3, 4]  # ... the trial's stream did not
    log = (run1 / "train.log").read_text()
    assert "trainer.resume_mode=resume_path" in log and f"trainer.resume_from_path={ckpt}/global_step_2" in log
    assert "load_contents=[model,optimizer,extra]" in log

    # A pbt branch of another trial that explored the lr: weights only, so its own lr is the one it trains with.
    run2 = tmp_path / "trials" / "1" / "runs" / "seed0"
    branch = load_config("grpo_trainer_tiny_cpu", [*BASE, "megatron_training.train_iters=6", "actor_config.lr=3e-6", f"actor_config.save={run2 / 'ckpt'}",
                                                   f"actor_config.load={ckpt}", "actor_config.finetune=false",
                                                   "actor_config.no_load_optim=false", "actor_config.no_load_rng=false"])  # fmt: skip
    lrs: list[float] = []
    out = _backend(STANDIN_NO_RAY="1").run(branch, run2, lambda i, m: bool(lrs.append(m["actor/lr"])), resume=True)
    assert out["resumed_from"] == 4 and out["iterations"] == 6
    assert lrs == [3e-6, 3e-6]  # with the parent's optimizer loaded, its param groups would have brought back 1e-6
    assert "load_contents=[model]" in (run2 / "train.log").read_text()


@pytest.mark.slow  # the failure path; the launch/stop/resume claim is the test above
def test_a_failing_job_is_a_trial_failure_with_its_log(cluster, tmp_path):
    from grpo.sweep.backends._base import TrialFailed

    cfg = load_config("grpo_trainer_tiny_cpu", [*BASE, f"actor_config.save={tmp_path / 'ckpt'}"])
    with pytest.raises(TrialFailed) as err:
        _backend(STANDIN_NO_RAY="1", STANDIN_FAIL_AT="2").run(cfg, tmp_path / "run", lambda i, m: False, resume=False)
    assert "FAILED" in err.value.reason
    assert any("STANDIN_FAIL_AT" in line for line in err.value.last_log_lines)


def test_a_job_that_ends_before_train_iters_is_a_failure(cluster, tmp_path):
    """verl ends its loop after trainer.total_epochs too (the stand-in mirrors verl's epoch bound): a run that
    stops there, short of train_iters, succeeded as a job but is no complete trial."""
    from grpo.sweep.backends._base import TrialFailed

    cfg = load_config("grpo_trainer_tiny_cpu", [*BASE, "engine.task_size=16", f"actor_config.save={tmp_path / 'ck'}"])
    done = _backend(STANDIN_NO_RAY="1").run(cfg, tmp_path / "ok", lambda i, m: False, resume=False)
    assert done["iterations"] == 4  # 16 rows, 8 per step: 2 steps per epoch, so the backend asks for 2 epochs
    short = _backend(STANDIN_NO_RAY="1")
    short.extra_overrides = ["trainer.total_epochs=1"]  # verl's own stop, before train_iters
    with pytest.raises(TrialFailed) as err:
        short.run(cfg, tmp_path / "short", lambda i, m: False, resume=False)
    assert "succeeded at step 2 before step 4" in err.value.reason and "total_epochs=1" in err.value.reason
