"""tests/standin_verl mirrors verl 0.9.1 where the backend depends on it, checked against verl's own code (not
against our reading of it): the file logger's bytes (verl's FileLogger writes the same file), the checkpoint
tracker and folder (verl's find_latest_ckpt_path finds the stand-in's checkpoint, and our latest_checkpoint
agrees), and the config (the stand-in composes verl's real ppo_trainer, so an override verl refuses fails)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from grpo.config import load_config
from grpo.sweep.backends.verl import _render
from grpo.sweep.backends.verl.log import VerlLogTail, latest_checkpoint, project_metrics

pytest.importorskip("verl")
STANDIN = Path(__file__).resolve().parent / "standin_verl"
sys.path.insert(0, str(STANDIN))
import standin_main_ppo  # noqa: E402

ROWS = [({"critic/score/mean": 0.25, "actor/kl_loss": 1e-3, "val-core/openai/gsm8k/acc/mean@1": 0.5}, 1),
        ({"critic/score/mean": 0.5, "timing_s/step": 2.0, "training/global_step": 2}, 2)]  # fmt: skip


def _write(cls, path: Path) -> bytes:
    os.environ["VERL_FILE_LOGGER_PATH"] = str(path)
    try:
        logger = cls("p", "e")
        for data, step in ROWS:
            logger.log(data=data, step=step)
        logger.finish()
    finally:
        del os.environ["VERL_FILE_LOGGER_PATH"]
    return path.read_bytes()


def test_standin_file_logger_writes_verls_bytes_and_the_tail_reads_them(tmp_path):
    from verl.utils.tracking import FileLogger

    theirs = _write(FileLogger, tmp_path / "verl.jsonl")
    assert _write(standin_main_ppo.FileLogger, tmp_path / "standin.jsonl") == theirs
    tail = VerlLogTail(tmp_path / "verl.jsonl")
    (s1, m1), (s2, m2) = tail.poll()
    assert (s1, s2) == (1, 2)
    ours = project_metrics(m1)
    assert ours["grpo/score/mean"] == 0.25 and ours["eval/acc"] == 0.5 and ours["actor/kl_loss"] == 1e-3
    assert project_metrics(m2)["timing/all"] == 2.0
    # a resume from global_step_1: verl reopens the file with "wb" and logs from step 2 on
    (tmp_path / "verl.jsonl").write_bytes(theirs.splitlines(keepends=True)[1])
    assert [s for s, _ in tail.poll()] == [2] and sorted(tail.rows) == [1, 2]


def test_standin_checkpoint_is_what_verls_resume_finds(tmp_path):
    from verl.utils.checkpoint.checkpoint_manager import find_latest_ckpt_path

    cfg = standin_main_ppo.compose(
        _render.trial_overrides(load_config("grpo_trainer_tiny_cpu"))
        + [f"trainer.default_local_dir={tmp_path}", "trainer.max_actor_ckpt_to_keep=1"]
    )
    standin_main_ppo.save_checkpoint(cfg, 2, 1e-6, 0.1)
    standin_main_ppo.save_checkpoint(cfg, 4, 1e-6, 0.2)
    assert find_latest_ckpt_path(str(tmp_path)) == str(tmp_path / "global_step_4")
    assert latest_checkpoint(tmp_path) == tmp_path / "global_step_4"
    assert sorted(p.name for p in tmp_path.glob("global_step_*")) == ["global_step_4"]  # max_actor_ckpt_to_keep
    assert (tmp_path / "global_step_4" / "data.pt").is_file()


def test_standin_refuses_what_verls_config_refuses(tmp_path):
    done = subprocess.run(
        [sys.executable, str(STANDIN / "standin_main_ppo.py"), "actor_rollout_ref.actor.clip_ratoi=0.1"],
        capture_output=True, text=True, timeout=120, env={**os.environ, "STANDIN_NO_RAY": "1"},
    )  # fmt: skip
    assert done.returncode != 0 and "Could not override 'actor_rollout_ref.actor.clip_ratoi'" in done.stderr
