"""What ``grpo-sweep validate`` prints: a backend package missing here is its one line (not "no point of the
search space is feasible" in front of it); the rollouts per iteration span what the search varies."""

from __future__ import annotations

import subprocess
import sys

from sweep_helpers import REPO, cli_env, write_spec

from grpo.config import derive, load_config


def test_a_missing_backend_package_is_the_only_line(tmp_path):
    hidden = tmp_path / "hide" / "verl"  # verl as on a machine without it: importing it fails
    hidden.mkdir(parents=True)
    (hidden / "__init__.py").write_text('raise ImportError("No module named verl")\n')
    env = cli_env()
    env["PYTHONPATH"] = f"{hidden.parent}:{env['PYTHONPATH']}"
    done = subprocess.run([sys.executable, "-m", "grpo.cli", "validate", "sweeps/verl_study.yaml"], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.splitlines() == [
        "error: sweeps/verl_study.yaml: backend verl: verl cannot be imported here (ImportError: No module named "
        "verl); pip install --no-deps verl==0.9.1 && pip install 'grpo-sweep[verl]' (docs/backend_verl.md)"
    ]


def test_validate_shows_the_rollouts_range_the_search_spans(tmp_path):
    spec = write_spec(tmp_path, search={"rl_config.n_samples_per_prompt": "choice(4, 8)"}, sampler={"name": "grid"})
    done = subprocess.run([sys.executable, "-m", "grpo.cli", "validate", str(spec)], cwd=tmp_path, env=cli_env(),
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    overrides = ["megatron_training.train_iters=12", "megatron_training.save_interval=4"]
    rollouts = [derive(load_config("grpo_trainer_tiny_cpu", [*overrides, f"rl_config.n_samples_per_prompt={n}"]))
                .rollouts_per_iteration for n in (4, 8)]  # fmt: skip
    out = " ".join(done.stdout.split())  # rich wraps long lines
    assert f"per trial: 12 iterations x {rollouts[0]}-{rollouts[1]} rollouts x 1 seed(s)" in out, out


def test_validate_shows_one_rollouts_figure_when_the_search_keeps_it(tmp_path):
    spec = write_spec(tmp_path)
    done = subprocess.run([sys.executable, "-m", "grpo.cli", "validate", str(spec)], cwd=tmp_path, env=cli_env(),
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    overrides = ["megatron_training.train_iters=12", "megatron_training.save_interval=4"]
    base = derive(load_config("grpo_trainer_tiny_cpu", overrides)).rollouts_per_iteration
    assert f"per trial: 12 iterations x {base} rollouts x 1 seed(s)" in " ".join(done.stdout.split())
