"""verl resume and pbt branch overrides: an explored lr is never overridden by restored optimizer state."""

from pathlib import Path

import pytest

from grpo.sweep.backends.verl._resume import ACTOR_LOAD, fresh_overrides, resume_overrides


def test_retry_keeps_optimizer_and_scheduler():
    out = resume_overrides(Path("/c/t1"), Path("/c/t1/global_step_6"))
    assert "trainer.resume_mode=resume_path" in out
    assert "trainer.resume_from_path=/c/t1/global_step_6" in out
    assert f"{ACTOR_LOAD}=[model,optimizer,extra]" in out


def test_branch_exploring_lr_loads_model_only():
    out = resume_overrides(Path("/c/t2"), Path("/c/t1/global_step_6"), explored=["actor_config.lr"])
    assert f"{ACTOR_LOAD}=[model]" in out
    assert "trainer.default_local_dir=/c/t2" in out


def test_fresh_and_bad_folder():
    assert "trainer.resume_mode=disable" in fresh_overrides(Path("/c/t0"))
    with pytest.raises(ValueError, match="global_step_N"):
        resume_overrides(Path("/c/t2"), Path("/c/t1/step6"))
