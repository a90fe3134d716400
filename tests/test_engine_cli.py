"""`grpo-train`, the Hydra app: user errors exit 2 before Hydra runs, a real run, a 2-job multirun on Ray."""

import subprocess
import sys

import pytest
import yaml

from grpo.engine import cli
from grpo.engine.cli import jobs_of
from grpo.errors import UserError
from grpo._fs import read_jsonl as read_metrics

FAST = ["megatron_training.train_iters=2", "engine.warm_start_steps=30", "megatron_training.global_batch_size=4",
        "rl_config.mini_batch_size=2", "actor_config.micro_batch_size=8"]


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    """One warm-start cache for every run of this file."""
    return tmp_path_factory.mktemp("grpo-cli-cache")


def grpo_train(*args, timeout=240):
    return subprocess.run([sys.executable, "-m", "grpo.engine.cli", *args], capture_output=True, text=True,
                          timeout=timeout)


def test_unknown_key_is_one_error_line_and_exit_2():
    proc = grpo_train("--config-name", "grpo_trainer_tiny_cpu", "rl_config.clip_rato=0.25")
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr
    assert lines[0].startswith("error: ") and lines[0].endswith(
        "rl_config.clip_rato: unknown key; did you mean rl_config.clip_ratio?")


def test_every_job_of_a_multirun_is_checked_before_anything_runs(tmp_path):
    proc = grpo_train("--multirun", "rl_config.clip_ratio=0.2,1.5", f"hydra.sweep.dir={tmp_path / 'm'}")
    assert proc.returncode == 2
    assert "rl_config.clip_ratio: must be <= 1 (got 1.5)" in proc.stderr
    assert not (tmp_path / "m").exists()


def test_jobs_of_expands_like_hydra():
    jobs = jobs_of(["a.b=1,2", "c=x", "hydra/launcher=ray", "+hydra.launcher.ray.init.num_cpus=2"], multirun=True)
    assert sorted(jobs) == [["a.b=1", "c=x"], ["a.b=2", "c=x"]]
    assert jobs_of(["a.b=1"], multirun=False) == [["a.b=1"]]


def test_a_run_trains_into_the_hydra_output_dir(tmp_path, cache):
    run_dir = tmp_path / "run"
    # actor_config.no_save_optim is not spelt in the YAML: it must still be settable as a plain override
    proc = grpo_train(*FAST, f"engine.cache_dir={cache}", f"hydra.run.dir={run_dir}",
                      f"actor_config.save={tmp_path / 'ckpt'}", "actor_config.no_save_optim=true",
                      "rl_config.clip_ratio=0.25")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert [r["iteration"] for r in read_metrics(run_dir / "metrics.jsonl")] == [0, 1, 2]  # 0: the base policy's held-out evaluation
    assert (tmp_path / "ckpt" / "iter_0000002" / "model.safetensors").is_file()
    assert not (tmp_path / "ckpt" / "iter_0000002" / "optim.pt").exists()
    assert "grpo-train: 2 iterations" in proc.stdout


def test_a_user_error_inside_the_run_exits_2(tmp_path, cache):
    proc = grpo_train(*FAST, f"engine.cache_dir={cache}", f"hydra.run.dir={tmp_path / 'run'}",
                      f"actor_config.load={tmp_path / 'missing'}")
    assert proc.returncode == 2
    assert f"error: {tmp_path / 'missing'}: actor_config.load: no such checkpoint folder" in proc.stderr


def test_the_ray_launcher_not_installed_is_one_error_line(monkeypatch):
    # hydra-ray-launcher is the `ray-launcher` extra (absent from MindSpeed-RL's environment, .ci/setup310)
    monkeypatch.setattr(cli, "_has_ray_launcher", lambda: False)
    with pytest.raises(UserError) as err:
        cli.precheck(["--multirun", "hydra/launcher=ray", "rl_config.clip_ratio=0.1,0.3"])
    assert err.value.problems == [
        "hydra/launcher=ray: hydra-ray-launcher is not installed: pip install 'grpo-sweep[ray-launcher]' (it needs "
        "cloudpickle<3, so not in MindSpeed-RL's environment, which pins cloudpickle 3.1.1)"]
    cli.precheck(["--multirun", "rl_config.clip_ratio=0.1,0.3"])  # the basic launcher needs no plugin


@pytest.mark.slow
def test_two_job_multirun_on_a_local_ray_cluster(tmp_path, cache):
    if not cli._has_ray_launcher():  # .ci/setup installs the extra; the 3.10 stage (.ci/setup310) cannot
        pytest.skip("hydra-ray-launcher (the ray-launcher extra) is not installed")
    sweep = tmp_path / "sweep"
    proc = grpo_train("--multirun", "hydra/launcher=ray", "rl_config.clip_ratio=0.1,0.3", *FAST,
                      f"engine.cache_dir={cache}", f"hydra.sweep.dir={sweep}",
                      "+hydra.launcher.ray.init.num_cpus=2", "+hydra.launcher.ray.init.include_dashboard=false",
                      # a cluster of its own: ray.init() alone joins the newest local cluster, which another
                      # pytest worker's `ray start` may have just written (then num_cpus is refused)
                      "+hydra.launcher.ray.init.address=local",
                      timeout=420)
    assert proc.returncode == 0, (proc.stdout[-2000:], proc.stderr[-3000:])
    ratios = set()
    for job in ("0", "1"):
        assert [r["iteration"] for r in read_metrics(sweep / job / "metrics.jsonl")] == [0, 1, 2]
        overrides = yaml.safe_load((sweep / job / ".hydra" / "overrides.yaml").read_text())
        ratios |= {o for o in overrides if o.startswith(("rl_config.clip_ratio", "++rl_config.clip_ratio"))}
    assert ratios == {"++rl_config.clip_ratio=0.1", "++rl_config.clip_ratio=0.3"}


@pytest.mark.parametrize("flag", ["--help", "--cfg job"])
def test_printing_into_a_closed_pipe_is_quiet(flag):
    # `| true` exits before grpo-train writes: the output meets a closed pipe every time. Hydra catches errors
    # raised while it prints (run_and_report) and prints their traceback; a closed pipe must end it quietly.
    piped = subprocess.run(f"{sys.executable} -m grpo.engine.cli {flag} | true", shell=True, capture_output=True,
                           text=True, timeout=120)  # fmt: skip
    assert piped.stderr == "", piped.stderr
