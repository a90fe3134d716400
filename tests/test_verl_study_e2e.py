"""backend verl through the real driver: `grpo-sweep run` joins a `ray start --head` cluster (its dashboard on,
token authentication, as docs/backend_verl.md says to start one), and each trial is its own Ray job submitted from
the trial's worker (one CPU, no GPU), running tests/standin_verl's stand-in for verl's main_ppo. The study stores
each step the job's file logger wrote as the trial's iterations, under the project's names."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from optuna.trial import TrialState
from sweep_helpers import load, write_spec
from test_sweep_connect import _Cluster, _driver_env, _free_port

pytest.importorskip("verl")
STANDIN = Path(__file__).resolve().parent / "standin_verl"


@pytest.fixture(scope="module")
def dashboard_cluster():
    cluster = _Cluster()
    try:
        cluster.start(["--head", f"--port={cluster.gcs_port}", f"--ray-client-server-port={cluster.client_port}",
                       "--num-cpus=2", f"--dashboard-port={_free_port()}",
                       f"--dashboard-agent-listen-port={_free_port()}"], "head")  # fmt: skip
        current = cluster.base / "head" / "ray_current_cluster"
        cluster.wait_for(current.is_file, "the head")
        cluster.address = current.read_text().strip()
        cluster.wait_for(lambda: cluster.alive_nodes() == 1, "the head node")
        yield cluster
    finally:
        cluster.stop()


@pytest.mark.slow
def test_a_verl_study_runs_each_trial_as_its_own_ray_job(dashboard_cluster, tmp_path):
    spec = write_spec(
        tmp_path, name="v", trials=2, concurrency=2, backend="verl_standin_backend:StandinVerlBackend",
        overrides=["megatron_training.train_iters=3", "megatron_training.save_interval=3",
                   "megatron_training.global_batch_size=8", "rl_config.mini_batch_size=8",
                   "rl_config.n_samples_per_prompt=4", "actor_config.micro_batch_size=32", "rl_config.epochs=1",
                   "actor_config.lr_warmup_fraction=0.0"],
        search={"actor_config.lr": "choice(1e-6, 1e-5)",  # and a verl-native key, searched by its verl path
                "verl.actor_rollout_ref.rollout.enforce_eager": "choice(true)"},
        sampler={"name": "grid", "seed": 0},
        objective={"metric": "grpo/score/mean", "direction": "maximize", "reduce": "last"},
    )  # fmt: skip
    env = _driver_env(dashboard_cluster)
    env["PYTHONPATH"] = f"{STANDIN}:{env['PYTHONPATH']}"
    done = subprocess.run(
        [sys.executable, "-m", "grpo.cli", "run", str(spec), "--address", dashboard_cluster.address, "--quiet",
         "--no-report"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    study = load(tmp_path, "v")
    complete = [t for t in study.trials if t.state == TrialState.COMPLETE]
    assert len(complete) == 2 and {t.params["actor_config.lr"] for t in complete} == {1e-6, 1e-5}
    assert all(sorted(t.intermediate_values) == [1, 2, 3] for t in complete)
    lr_1e6 = next(t for t in complete if t.params["actor_config.lr"] == 1e-6)
    assert lr_1e6.value > next(t for t in complete if t.params["actor_config.lr"] == 1e-5).value  # the stand-in's curve
    logs = sorted(tmp_path.glob("studies/v/trials/*/runs/seed0/train.log"))
    assert len(logs) == 2 and all("# grpo-sweep: ray job grpo-" in p.read_text() for p in logs)
    # the native key travelled in the trial's config to its job's command line
    assert all(t.params["verl.actor_rollout_ref.rollout.enforce_eager"] is True for t in complete)
    assert all("actor_rollout_ref.rollout.enforce_eager=true" in p.read_text() for p in logs)

    # ... and it shows like any other searched key: in `status` (table and --json) and in `best --export`'s file
    def cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "grpo.cli", *args], cwd=tmp_path, env=env, capture_output=True,
                              text=True, timeout=120)  # fmt: skip

    table = cli("status", str(spec))
    assert table.returncode == 0, table.stderr
    assert table.stdout.count("enforce_eager=True") == 2 and table.stdout.count("lr=1e-0") == 2, table.stdout
    rows = json.loads(cli("status", str(spec), "--json").stdout)["trials"]
    assert [r["params"]["verl.actor_rollout_ref.rollout.enforce_eager"] for r in rows] == [True, True]
    best = cli("best", str(spec), "--export", "best.yaml")
    assert best.returncode == 0, best.stderr
    assert json.loads(best.stdout)["params"] == {"actor_config.lr": 1e-6,
                                                 "verl.actor_rollout_ref.rollout.enforce_eager": True}  # fmt: skip
    text = (tmp_path / "best.yaml").read_text()
    assert '"verl.actor_rollout_ref.rollout.enforce_eager": true' in text  # the header's params line
    exported = yaml.safe_load(text)
    assert exported["verl"]["actor_rollout_ref"]["rollout"]["enforce_eager"] is True
    assert exported["actor_config"]["lr"] == 1e-6
