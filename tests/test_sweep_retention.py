"""Checkpoint retention after a trial ends (spec ``keep_final_checkpoints``, grpo/sweep/run/retention.py).

Real studies on the cheap backends of tests/sweep_test_backends.py (they write Megatron's tracker file in
``runs/seed<k>/ckpt``), the real driver, Ray scheduler and Optuna journal; the rule's decisions on their own
on in-memory studies."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
from pathlib import Path

import optuna
import pytest
from optuna.distributions import FloatDistribution
from optuna.trial import TrialState, create_trial
from sweep_helpers import load, module_ray, write_spec

from grpo.errors import UserError
from grpo.report.best import best_trial
from grpo.report.collect import collect
from grpo.report.disk import size_text
from grpo.report.page_cost import disk_facts
from grpo.sweep.run.driver import run_study
from grpo.sweep.run.retention import Retention, kept_by_rule, needed_for_resume, removable, remove_checkpoints
from grpo.sweep.spec.load import load_spec

TRACKER = "latest_checkpointed_iteration.txt"


@pytest.fixture(scope="module", autouse=True)
def local_ray():
    with module_ray():
        yield


def _spec(tmp_path, monkeypatch, **fields):
    monkeypatch.chdir(tmp_path)
    return load_spec(str(write_spec(tmp_path, **fields)))


def _ckpts(trial) -> list[Path]:
    """The checkpoint folders the trial's seed runs still have."""
    return sorted(Path(trial.user_attrs["trial_dir"]).glob("runs/seed*/ckpt"))


def _ran(study):
    return [t for t in study.trials if t.user_attrs.get("trial_dir")]


# -- a whole study (`all` and `none`: the resume and retry tests below) -------------------------------------
def test_after_a_study_with_best_only_the_best_trial_has_checkpoints(tmp_path, monkeypatch):
    study = run_study(_spec(tmp_path, monkeypatch, trials=4, keep_final_checkpoints="best")).study
    ran = _ran(study)
    assert len(ran) == 4 and all(t.state == TrialState.COMPLETE for t in ran)
    best = best_trial(study)
    assert {t.number for t in ran if _ckpts(t)} == {best.number}
    (ckpt,) = _ckpts(best)
    assert (ckpt / TRACKER).read_text() == "12"  # its final checkpoint, whole
    for t in ran:  # only the checkpoint folders go: each run keeps its metrics
        assert (Path(t.user_attrs["trial_dir"]) / "runs" / "seed0" / "metrics.jsonl").is_file()
        assert (Path(t.user_attrs["trial_dir"]) / "metrics.jsonl").is_file()


def test_best_is_the_default_and_a_bad_value_is_one_line(tmp_path, monkeypatch):
    assert _spec(tmp_path, monkeypatch).keep_final_checkpoints == "best"
    with pytest.raises(UserError) as err:
        load_spec(str(write_spec(tmp_path, name="bad", keep_final_checkpoints="latest")))
    assert "keep_final_checkpoints" in str(err.value) and "best" in str(err.value)


# -- a failed trial and its retry ----------------------------------------------------------------------------
@pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")
def test_a_failed_trials_checkpoints_stay_until_its_retry_has_resumed_from_them(tmp_path, monkeypatch):
    # SeedFaultBackend: seed 1 of trial 0 fails at iteration 6, after its checkpoint at 4; seed 0 has finished
    # (checkpoint 20) and seed 2 passed 4. Under `none`, only a resume's need keeps a checkpoint.
    seen: list[dict[int, list[str]]] = []

    def after_each_trial(study: optuna.Study) -> None:
        seen.append({t.number: [p.parent.name for p in _ckpts(t)] for t in _ran(study) if t.state.is_finished()})

    spec = _spec(
        tmp_path,
        monkeypatch,
        trials=1,
        concurrency=1,
        seeds=3,
        retries=1,
        keep_final_checkpoints="none",
        overrides=["megatron_training.train_iters=20", "megatron_training.save_interval=4"],
        backend="sweep_test_backends:SeedFaultBackend",
    )
    study = run_study(spec, on_trial_finished=after_each_trial).study
    failed, retry = sorted(study.trials, key=lambda t: t.number)
    assert failed.state == TrialState.FAIL and failed.user_attrs["retried"]
    assert retry.state == TrialState.COMPLETE and retry.user_attrs["resume_from"] == failed.user_attrs["trial_dir"]
    # Right after the failure was recorded (its retry waiting), every seed's checkpoint was still there...
    assert seen[0] == {failed.number: ["seed0", "seed1", "seed2"]}
    # ... and the retry resumed each seed from it.
    resumed = retry.user_attrs["resumed_at_iteration"]
    assert len(resumed) == 3 and all(at > 0 for at in resumed.values()), resumed
    # Once the retry ended, nobody needs them: `none` removed both attempts'.
    assert seen[1] == {failed.number: [], retry.number: []}
    assert not _ckpts(failed) and not _ckpts(retry)


# -- a study resumed after a crash ---------------------------------------------------------------------------
def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def _left_running_by_a_dead_driver(folder: Path, checkpoint_at: int) -> int:
    """A trial RUNNING in storage whose driver process is gone, with a checkpoint in its folder (a SIGKILLed
    driver leaves this); returns its number."""
    study = load(folder)
    trial = study.ask()
    trial.suggest_float("rl_config.clip_ratio", 0.05, 0.3)
    trial_dir = (folder / "studies" / "s" / "trials" / str(trial.number)).resolve()
    (trial_dir / "runs" / "seed0" / "ckpt").mkdir(parents=True)
    (trial_dir / "runs" / "seed0" / "ckpt" / TRACKER).write_text(str(checkpoint_at))
    for key, value in {
        "driver": {"id": "gone", "host": socket.gethostname(), "pid": _dead_pid()},
        "trial_dir": str(trial_dir),
        "seeds": [1234],
        "attempt": 1,
    }.items():
        trial.set_user_attr(key, value)
    return trial.number


def test_a_resumed_study_applies_the_rule_to_what_ended_before_and_still_resumes(tmp_path, monkeypatch):
    # First run: every trial keeps its checkpoints; then a driver dies with a trial running.
    first = run_study(_spec(tmp_path, monkeypatch, trials=3, keep_final_checkpoints="all")).study
    assert len(_ran(first)) == 3 and all(_ckpts(t) for t in _ran(first))  # `all` removed nothing
    before = collect(first).trials
    facts_before = disk_facts(collect(first))
    crashed = _left_running_by_a_dead_driver(tmp_path, checkpoint_at=4)

    # Rerun with `best` (retention is no part of the fingerprint): the start-up clean-up must keep what the
    # reaped trial's retry resumes from.
    study = run_study(_spec(tmp_path, monkeypatch, trials=4, keep_final_checkpoints="best")).study
    trials = {t.number: t for t in study.trials}
    assert trials[crashed].state == TrialState.FAIL
    (retry,) = [t for t in study.trials if t.user_attrs.get("retry_of") == crashed]
    assert retry.state == TrialState.COMPLETE and retry.user_attrs["resumed_at_iteration"] == {"1234": 4}
    best = best_trial(study).number
    assert {t.number for t in _ran(study) if _ckpts(t)} == {best}

    # The report's disk figure: the checkpoints left are the best trial's alone.
    after = collect(study).trials.set_index("number")
    assert after["checkpoint_bytes"].gt(0).sum() == 1 and after.at[best, "checkpoint_bytes"] > 0
    assert after["checkpoint_bytes"].sum() < before["checkpoint_bytes"].sum()
    shown = [
        re.search(r", (.+?) of it checkpoints", facts).group(1) for facts in (facts_before, disk_facts(collect(study)))
    ]
    assert shown == [size_text(before["checkpoint_bytes"].sum()), size_text(after["checkpoint_bytes"].sum())]
    assert shown[1] != shown[0]


# -- the rule on its own ----------------------------------------------------------------------------------------
DIST = {"x": FloatDistribution(0.0, 1.0)}


def _study(*trials, directions=("maximize",)) -> optuna.Study:
    study = optuna.create_study(directions=list(directions))
    for t in trials:
        study.add_trial(t)
    return study


def _trial(number: int, state=TrialState.COMPLETE, values=None, **attrs):
    """A stored trial: ``number`` also names its folder (``/t/<number>``)."""
    values = values if values is None or isinstance(values, list) else [values]
    return create_trial(
        state=state,
        values=values if state == TrialState.COMPLETE else None,
        params={"x": number / 100},
        distributions=DIST,
        user_attrs={"trial_dir": f"/t/{number}", **attrs},
    )


def test_best_keeps_the_best_complete_trial_and_nothing_else_that_ended():
    study = _study(
        _trial(0, values=0.3),
        _trial(1, values=0.9),
        _trial(2, TrialState.PRUNED),
        _trial(3, TrialState.FAIL, gave_up=True),
        _trial(4, values=0.9),
    )  # a tie: the lower number
    assert kept_by_rule(study, study.trials, "best") == {1}
    assert [t.number for t in removable(study, "best")] == [0, 2, 3, 4]
    assert [t.number for t in removable(study, "none")] == [0, 1, 2, 3, 4]
    assert removable(study, "all") == []
    minimize = _study(_trial(0, values=0.3), _trial(1, values=0.9), directions=("minimize",))
    assert kept_by_rule(minimize, minimize.trials, "best") == {0}


def test_a_multi_objective_study_keeps_its_pareto_front():
    study = _study(
        _trial(0, values=[1.0, 2.0]),
        _trial(1, values=[2.0, 1.0]),
        _trial(2, values=[0.5, 0.5]),
        _trial(3, values=[1.0, 1.5]),
        directions=("maximize", "maximize"),
    )
    assert kept_by_rule(study, study.trials, "best") == {0, 1}  # 2 and 3 are dominated by 0


def test_confirmation_trials_are_kept_until_two_decide_the_best():
    search = [_trial(0, values=0.9), _trial(1, values=0.5)]
    one = _study(*search, _trial(2, values=0.6, confirmation_of=0))
    # One confirmation stands for its source (grpo.report.best.fold_confirmed): trial 0's lucky 0.9 is trial 2's 0.6
    assert kept_by_rule(one, one.trials, "best") == {2}
    two = _study(*search, _trial(2, values=0.6, confirmation_of=0), _trial(3, values=0.7, confirmation_of=1))
    assert kept_by_rule(two, two.trials, "best") == {3}  # the confirmed best (grpo.report.best.best_trial)


def test_what_a_resume_needs_is_never_removable():
    study = _study(
        _trial(0, TrialState.FAIL, retried=True),  # its retry 3 waits: it resumes from /t/0
        _trial(1, TrialState.FAIL, retried=True),  # its retry was never enqueued (the driver died between)
        _trial(2, TrialState.FAIL, retried=True),  # its retry 4 ended: no longer needed
        create_trial(
            state=TrialState.WAITING,
            params={"x": 0.0},
            distributions=DIST,
            user_attrs={"retry_of": 0, "resume_from": "/t/0"},
        ),
        _trial(4, values=0.1, retry_of=2, resume_from="/t/2"),
        _trial(5, TrialState.RUNNING, resume_from="/t/6"),  # a retry chain: 5 resumes from 6, 6 resumed from 7
        _trial(6, TrialState.FAIL, retried=True, retry_of=7, resume_from="/t/7"),
        _trial(7, TrialState.FAIL, retried=True),
        _trial(8, values=0.0),
    )
    assert needed_for_resume(study.trials) == {0, 1, 3, 5, 6, 7}
    assert [t.number for t in removable(study, "none")] == [2, 4, 8]


def _seed_runs(trial_dir: Path, seeds: int = 2) -> list[Path]:
    for k in range(seeds):
        (trial_dir / "runs" / f"seed{k}" / "ckpt" / "iter_0000004").mkdir(parents=True)
        (trial_dir / "runs" / f"seed{k}" / "ckpt" / TRACKER).write_text("4")
        (trial_dir / "runs" / f"seed{k}" / "metrics.jsonl").write_text("{}\n")
    return [trial_dir / "runs" / f"seed{k}" for k in range(seeds)]


def test_only_the_sweeps_own_checkpoint_folders_are_removed(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    trials = tmp_path / "studies" / "s" / "trials"
    own = _seed_runs(trials / "0")
    elsewhere = _seed_runs(tmp_path / "elsewhere" / "1", seeds=1)  # recorded, but not this study's folder
    outside = tmp_path / "precious"
    outside.mkdir()
    (outside / "weights.bin").write_bytes(b"1")
    (trials / "2" / "runs" / "seed0").mkdir(parents=True)
    (trials / "2" / "runs" / "seed0" / "ckpt").symlink_to(outside)  # a link by that name: left alone
    (trials / "2" / "runs" / "notes").mkdir()  # not a seed run folder
    (trials / "2" / "runs" / "notes" / "ckpt").mkdir()
    study = _study(
        *(
            _trial(n, values=0.1, trial_dir=str(folder))
            for n, folder in enumerate([trials / "0", tmp_path / "elsewhere" / "1", trials / "2"])
        )
    )
    retention = Retention("none", Path("studies/s"))
    removed, warnings = retention.apply(study)
    assert removed == [0]
    assert not any((run / "ckpt").exists() for run in own) and all((run / "metrics.jsonl").exists() for run in own)
    assert (elsewhere[0] / "ckpt" / TRACKER).exists()
    assert (outside / "weights.bin").exists() and (trials / "2" / "runs" / "notes" / "ckpt").is_dir()
    assert warnings == [
        f"trial 2: {trials / '2' / 'runs' / 'seed0' / 'ckpt'}: left alone (not a checkpoint folder the sweep wrote)"
    ]
    assert retention.apply(study) == ([], [])  # once per driver


def test_a_removal_that_fails_is_a_warning(tmp_path, monkeypatch):
    runs = _seed_runs(tmp_path / "t")

    def refuse(path, *args, **kwargs):
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr("grpo.sweep.run.retention.shutil.rmtree", refuse)
    removed, warnings = remove_checkpoints(runs)
    assert removed == 0 and len(warnings) == 2
    assert warnings[0] == f"{runs[0] / 'ckpt'}: could not remove the checkpoints: Permission denied"
