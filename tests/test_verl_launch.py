"""verl trial job: entrypoint and runtime env of the Ray job one trial is."""

import shlex
from pathlib import Path

from grpo.sweep.backends.verl._launch import entrypoint, runtime_env


def test_entrypoint_runs_main_ppo_with_file_logger():
    cmd = shlex.split(entrypoint("/env/bin/python", ["data.train_batch_size=32", "trainer.resume_from_path=/a b"]))
    assert cmd[:3] == ["/env/bin/python", "-m", "verl.trainer.main_ppo"]
    assert "trainer.resume_from_path=/a b" in cmd  # quoted, survives the shell
    assert cmd[-1] == "trainer.logger=[console,file]"


def test_runtime_env_points_the_file_logger_at_the_trial_log():
    env = runtime_env(Path("/runs/t3/verl.jsonl"), {"HF_HOME": "/hf"})
    assert env["env_vars"] == {"HF_HOME": "/hf", "VERL_FILE_LOGGER_PATH": "/runs/t3/verl.jsonl"}
