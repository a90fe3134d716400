"""What a study keeps in Optuna's storage (issue 16): its values named after the objectives, each trial's
config in its folder with a compact pointer in the storage, and a trial's attrs written as one journal append."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import optuna
import pytest
import yaml
from optuna.trial import TrialState
from sweep_helpers import load, module_ray, states, write_spec

from grpo.report import collect
from grpo.report.collect import value_columns
from grpo.report.trial_config import config_pointer, digest, recorded_config
from grpo.sweep.run.driver import run_study
from grpo.sweep.spec.load import load_spec
from grpo.sweep.study.store import StudyStore
from grpo.trial_attrs import CONFIG_POINTER


@pytest.fixture(scope="module", autouse=True)
def local_ray():
    with module_ray():
        yield


def _run(tmp_path, monkeypatch, **fields):
    monkeypatch.chdir(tmp_path)
    return run_study(load_spec(str(write_spec(tmp_path, **fields)))).study


def _optuna_trials(tmp_path) -> str:
    """`optuna trials` (Optuna's own CLI) on the study's journal, as a user would type it."""
    journal = tmp_path / "studies" / "s" / "journal.log"
    optuna_cli = Path(sys.executable).parent / "optuna"  # the console script Optuna installs
    return subprocess.run(
        [str(optuna_cli), "trials", "--storage", str(journal), "--study-name", "s"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A 3-trial study run by the driver (journal storage), reloaded as Optuna's tools see it."""
    tmp_path = tmp_path_factory.mktemp("footprint")
    with pytest.MonkeyPatch.context() as mp:
        _run(tmp_path, mp, trials=3, objective={"metric": "grpo/score/mean", "reduce": "auc"})
    return tmp_path, load(tmp_path)


def test_the_values_carry_the_objectives_names_for_optunas_tools(finished, monkeypatch):
    tmp_path, study = finished
    assert study.metric_names == ["grpo/score/mean (auc)"]
    rows = [line for line in _optuna_trials(tmp_path).splitlines() if line.startswith("|")][1:]  # after the header
    assert len(rows) == 3 and all("{'grpo/score/mean (auc)': " in row for row in rows)  # the value cells
    # Pandas names the value column after it; the report's table reads it through value_columns.
    monkeypatch.chdir(tmp_path)
    frame = collect(study).trials
    assert value_columns(study) == ["value_grpo/score/mean (auc)"]
    assert frame["value_grpo/score/mean (auc)"].tolist() == pytest.approx([t.value for t in study.trials])


def test_several_objectives_are_named_in_their_order(tmp_path, monkeypatch):
    study = _run(
        tmp_path,
        monkeypatch,
        trials=1,
        objective=[
            {"metric": "grpo/score/mean", "reduce": "mean_last_k", "k": 3},
            {"metric": "e2e_tps", "direction": "minimize"},
        ],
    )
    assert study.metric_names == ["grpo/score/mean (mean_last_k, k=3)", "e2e_tps (last)"]
    frame = collect(load(tmp_path)).trials
    assert list(frame.columns[1:3]) == value_columns(study) == [f"values_{n}" for n in study.metric_names]
    assert frame[value_columns(study)].iloc[0].tolist() == pytest.approx(study.trials[0].values)


def test_a_study_made_before_names_loads_and_gets_them_when_resumed(tmp_path, monkeypatch):
    # A study as an older grpo-sweep left it: no metric names (and none of the sweep's study attrs).
    (tmp_path / "studies" / "s").mkdir(parents=True)
    journal = optuna.storages.journal.JournalFileBackend(str(tmp_path / "studies" / "s" / "journal.log"))
    old = optuna.create_study(study_name="s", storage=optuna.storages.JournalStorage(journal), direction="maximize")
    old.add_trial(
        optuna.create_trial(
            value=0.5,
            params={"rl_config.clip_ratio": 0.2},
            distributions={"rl_config.clip_ratio": optuna.distributions.FloatDistribution(0.05, 0.3)},
        )
    )
    assert old.metric_names is None and value_columns(old) == ["value"]
    assert collect(old).trials["value"].tolist() == [0.5]
    resumed = _run(tmp_path, monkeypatch, trials=2)
    assert states(resumed) == {"COMPLETE": 2}
    assert load(tmp_path).metric_names == ["grpo/score/mean (last)"]


def test_the_config_lives_in_the_trial_folder_and_the_storage_points_at_it(finished):
    tmp_path, study = finished
    study_dir = tmp_path / "studies" / "s"
    for t in study.trials:
        assert "config" not in t.user_attrs  # ~4 kB per trial that every `optuna trials` row used to carry
        path = study_dir / "trials" / str(t.number) / "config.yaml"
        assert t.user_attrs[CONFIG_POINTER] == {
            "path": f"trials/{t.number}/config.yaml",
            "sha256": digest(path.read_bytes()),
        }
        found = recorded_config(t, study)
        assert found is not None and not found.changed
        assert found.config == yaml.safe_load(path.read_text())
        assert found.config["rl_config"]["clip_ratio"] == pytest.approx(t.params["rl_config.clip_ratio"])
    # The widest `optuna trials` row was 4,725 characters with the config in it (3-trial study of this shape).
    assert max(map(len, _optuna_trials(tmp_path).splitlines())) < 1200


def test_a_config_file_edited_after_the_trial_is_noticed(tmp_path, monkeypatch, capsys):
    from grpo.cli import sweep_main

    study = _run(tmp_path, monkeypatch, trials=1)
    (trial,) = study.trials
    path = tmp_path / "studies" / "s" / "trials" / "0" / "config.yaml"
    path.write_text(path.read_text().replace("\n  clip_ratio:", "\n  clip_ratio: 0.99 #", 1))
    found = recorded_config(trial, load(tmp_path))
    assert found is not None and found.changed and found.config["rl_config"]["clip_ratio"] == 0.99
    assert sweep_main(["best", "s.yaml", "--export", "best.yaml"]) == 0
    err = capsys.readouterr().err
    assert f"warning: {path.resolve()} changed since trial 0 ran" in err
    assert "# warning: " in (tmp_path / "best.yaml").read_text()
    path.unlink()
    assert recorded_config(trial, load(tmp_path)) is None
    assert sweep_main(["best", "s.yaml", "--export", "best.yaml"]) == 2
    assert "trial 0: its config file studies/s/trials/0/config.yaml is missing or unreadable" in capsys.readouterr().err


def test_a_trial_written_by_an_older_sweep_is_read_from_its_config_attr(tmp_path):
    study = optuna.create_study(storage=optuna.storages.InMemoryStorage())
    trial = study.ask()
    trial.set_user_attr("config", {"rl_config": {"clip_ratio": 0.2}})
    study.tell(trial, 1.0)
    found = recorded_config(study.trials[0], study)
    assert found is not None and found.config == {"rl_config": {"clip_ratio": 0.2}} and not found.changed
    assert found.source == "trial 0's config attr"


def test_a_pointer_is_relative_to_the_study_folder(tmp_path):
    path = tmp_path / "studies" / "s" / "trials" / "7" / "config.yaml"
    path.parent.mkdir(parents=True)
    path.write_text("a: 1\n")
    assert config_pointer(path, tmp_path / "studies" / "s") == {
        "path": "trials/7/config.yaml",
        "sha256": digest(b"a: 1\n"),
    }


def test_a_trials_attrs_go_to_the_journal_in_one_append(tmp_path, monkeypatch):
    # JournalFileBackend.append_logs takes the lock and fsyncs once per call: one call for all the attrs.
    from optuna.storages.journal import JournalFileBackend

    journal = JournalFileBackend(str(tmp_path / "journal.log"))
    study = optuna.create_study(storage=optuna.storages.JournalStorage(journal))
    trial = study.ask()
    calls = []
    real = JournalFileBackend.append_logs
    monkeypatch.setattr(
        JournalFileBackend, "append_logs", lambda self, logs: (calls.append(len(logs)), real(self, logs))
    )
    attrs = {"a": 1, "b": [1, 2], "c": {"x": "y"}}
    StudyStore(study).set_attrs(trial, attrs)
    assert calls == [3]
    assert trial.user_attrs == attrs  # the handle sees them, as after Trial.set_user_attr
    reread = optuna.load_study(
        study_name=study.study_name,
        storage=optuna.storages.JournalStorage(JournalFileBackend(str(tmp_path / "journal.log"))),
    )
    assert reread.trials[0].user_attrs == attrs  # Optuna's own replay reads the batch
    study.tell(trial, 1.0)
    with pytest.raises(RuntimeError, match="finished"):  # like Trial.set_user_attr on a finished trial
        StudyStore(study).set_attrs(study.trials[0], {"d": 1, "e": 2, "f": 3})
    # Every record of the refused batch is consumed: later reads do not raise for the rest of it.
    assert study.trials[0].user_attrs == attrs and study.trials[0].state == TrialState.COMPLETE
    assert reread.trials[0].user_attrs == attrs


def test_the_report_reads_each_trials_config_from_its_folder(finished, tmp_path, monkeypatch):
    from grpo.report.html import write_report

    study_path, study = finished
    monkeypatch.chdir(study_path)
    page = write_report(study, tmp_path / "report").read_text()
    assert "No config recorded for this trial" not in page
    assert page.count("<th>this trial</th>") == 3  # each trial's diff against the base config
    best = yaml.safe_load((tmp_path / "report" / "best_config.yaml").read_text())
    assert best["rl_config"]["clip_ratio"] == pytest.approx(study.best_trial.params["rl_config.clip_ratio"])
