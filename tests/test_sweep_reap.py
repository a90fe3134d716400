"""The reaper on a real Optuna journal study, at the two moments a SIGKILLed driver can leave a trial between
Optuna's ask and the driver's admission (found by test_sweep_resume's random kills: a point ran twice, and a
retry ran another point than its trial's):

- an enqueued retry asked but killed before its parameters were suggested: Optuna keeps them only in the
  ``fixed_params`` system attr (``Study.enqueue_trial``), ``trial.params`` is still {}; its retry must keep them;
- a sampled point killed before the driver admitted it (no trial folder): nothing ran, so it is failed without a
  retry and uses no budget (a retry would run it beside a later proposal of the same point).
"""

from __future__ import annotations

import optuna
from optuna.storages import JournalStorage
from optuna.storages.journal import JournalFileBackend
from optuna.trial import TrialState

from grpo.sweep.study import lease
from grpo.sweep.study.retry import counts_toward_budget, holds_budget, queued_retry_of
from grpo.sweep.study.store import StudyStore
from grpo.trial_attrs import ATTEMPT, DRIVER, RESUME_FROM, RETRY_OF, TRIAL_DIR

DEAD = {"id": "dead", "host": lease.new_driver_identity()["host"], "pid": 2**22 + 12345}  # no such process


def _study(tmp_path) -> optuna.Study:
    storage = JournalStorage(JournalFileBackend(str(tmp_path / "journal.log")))
    return optuna.create_study(study_name="s", storage=storage, direction="maximize")


def test_a_retry_killed_before_its_suggest_is_retried_with_its_own_point_and_checkpoint(tmp_path):
    study = _study(tmp_path)
    study.enqueue_trial({"rl_config.clip_ratio": 0.15}, user_attrs={RETRY_OF: 0, ATTEMPT: 1,
                                                                    RESUME_FROM: "/ckpt/of/trial0"})  # fmt: skip
    asked = study.ask()  # popped from the queue; the driver dies before suggesting
    asked.set_user_attr(DRIVER, DEAD)
    assert study.trials[asked.number].params == {}

    me = lease.new_driver_identity()
    assert lease.reap(StudyStore(study), me, retries=1) == [asked.number]
    dead, retry = study.trials[asked.number], study.trials[-1]
    assert dead.state == TrialState.FAIL and retry.state == TrialState.WAITING
    assert retry.system_attrs["fixed_params"] == {"rl_config.clip_ratio": 0.15}  # not {}: a fresh point
    assert retry.user_attrs[RETRY_OF] == asked.number and retry.user_attrs[RESUME_FROM] == "/ckpt/of/trial0"
    assert queued_retry_of(retry, {"rl_config.clip_ratio": 0.15}) and not queued_retry_of(retry, {})


def test_a_sampled_point_killed_before_admission_fails_without_retry_or_budget(tmp_path):
    study = _study(tmp_path)
    asked = study.ask()
    asked.set_user_attr(DRIVER, DEAD)
    asked.suggest_float("rl_config.clip_ratio", 0.05, 0.3)  # sampled, but never admitted (no trial_dir)
    admitted = study.ask()
    admitted.set_user_attr(DRIVER, DEAD)
    admitted.suggest_float("rl_config.clip_ratio", 0.05, 0.3)
    admitted.set_user_attr(TRIAL_DIR, str(tmp_path / "trials" / "1"))

    reaped = lease.reap(StudyStore(study), lease.new_driver_identity(), retries=1)
    assert sorted(reaped) == [0, 1]
    never, ran = study.trials[0], study.trials[1]
    assert never.state == TrialState.FAIL and "nothing ran" in never.user_attrs["failure_reason"]
    assert not counts_toward_budget(never) and not holds_budget(never)
    waiting = [t for t in study.trials if t.state == TrialState.WAITING]
    assert [t.user_attrs[RETRY_OF] for t in waiting] == [ran.number]  # only the admitted trial is retried
    assert waiting[0].system_attrs["fixed_params"] == ran.params
