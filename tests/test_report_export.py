"""export(): both frames in csv, parquet (pyarrow) and json, written atomically; a bad format writes nothing."""

from __future__ import annotations

import subprocess
import sys

import pandas as pd
import pytest
import yaml
from report_fixtures import make_study

from grpo.errors import UserError
from grpo.report import collect, export

READERS = {"csv": pd.read_csv, "parquet": pd.read_parquet, "json": lambda p: pd.read_json(p, orient="records")}


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    return make_study(tmp_path_factory.mktemp("export"), running=True)


@pytest.mark.parametrize("fmt", ["csv", "parquet", "json"])
def test_export_writes_both_frames_readable_back(study, tmp_path, fmt):
    frames = collect(study)
    paths = export(study, fmt, tmp_path / "out")
    assert [p.name for p in paths] == [f"trials.{fmt}", f"metrics.{fmt}"]
    trials, metrics = (READERS[fmt](p) for p in paths)
    assert list(trials.columns) == list(frames.trials.columns)
    assert trials["number"].tolist() == frames.trials["number"].tolist()
    assert trials["state"].tolist() == frames.trials["state"].tolist()
    assert trials["value"].tolist()[:2] == pytest.approx(frames.trials["value"].tolist()[:2])
    assert list(metrics.columns) == ["trial", "seed", "iteration", "metric", "value"]
    assert len(metrics) == len(frames.metrics)
    assert metrics["value"].sum() == pytest.approx(frames.metrics["value"].sum())
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == sorted(p.name for p in paths)  # no temp files left


def test_parquet_keeps_a_parameter_mixing_types(tmp_path):
    """A categorical parameter whose choices mix numbers and strings still exports (as strings)."""
    import optuna

    study = optuna.create_study(study_name="mixed", storage=optuna.storages.InMemoryStorage())
    for choice in (4, "auto"):
        study.enqueue_trial({"rl_config.n_samples_per_prompt": choice})
        trial = study.ask()
        trial.suggest_categorical("rl_config.n_samples_per_prompt", [4, "auto"])
        study.tell(trial, 1.0)
    trials_path, _ = export(study, "parquet", tmp_path)
    assert pd.read_parquet(trials_path)["params_rl_config.n_samples_per_prompt"].tolist() == ["4", "auto"]


def test_unknown_format_is_a_user_error_and_writes_nothing(study, tmp_path):
    with pytest.raises(UserError, match="--format: unknown export format 'xlsx'"):
        export(study, "xlsx", tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_json_keeps_every_digit_of_a_value(tmp_path):
    """pandas' to_json keeps 10 decimals by default: a learning rate of 1.234567e-7 came back as 1.235e-7."""
    import optuna

    study = optuna.create_study(study_name="digits", storage=optuna.storages.InMemoryStorage())
    study.add_trial(
        optuna.create_trial(
            value=1.2345678901234e-7,
            params={"actor_config.lr": 1.2345678901234e-7},
            distributions={"actor_config.lr": optuna.distributions.FloatDistribution(1e-9, 1e-3, log=True)},
        )
    )
    trials_path, _ = export(study, "json", tmp_path / "out")
    back = pd.read_json(trials_path, orient="records", precise_float=True)
    assert back["value"].tolist() == [1.2345678901234e-7]


# ------------------------------------------------------------------ grpo-sweep best --export -> grpo-train
def _finished_study(folder):
    """A one-trial study as the sweep records it (spec ``s.yaml``, journal under ``studies/s``), whose trial
    config carries what the sweep sets per trial seed: its save folder, W&B run name and group, and the
    generated task's data path made absolute against the driver's directory."""
    import copy

    import optuna
    from report_fixtures import base_config_dict
    from sweep_helpers import write_spec

    spec = write_spec(folder, "s", backend="embedded", overrides=["megatron_training.train_iters=6"])
    (folder / "studies" / "s").mkdir(parents=True)
    journal = optuna.storages.journal.JournalFileBackend(str(folder / "studies" / "s" / "journal.log"))
    study = optuna.create_study(study_name="s", storage=optuna.storages.JournalStorage(journal), direction="maximize")
    base = base_config_dict()
    study.set_user_attr("base_config", base)
    trial = study.ask()
    clip = trial.suggest_float("rl_config.clip_ratio", 0.05, 0.3)
    config = copy.deepcopy(base)
    config["rl_config"].update(clip_ratio=clip, use_wandb=True, wandb_project="p", wandb_exp_name="trial-0-seed0")
    config["engine"]["wandb_group"] = "s"
    config["actor_config"]["save"] = str(folder / "studies/s/trials/0/runs/seed0/ckpt")
    config["megatron_training"]["data_path"] = str(folder / "data" / "arithmetic")
    trial.set_user_attr("config", config)
    study.tell(trial, 0.5)
    return spec, clip


def test_best_export_runs_with_the_one_printed_command_from_another_directory(tmp_path, monkeypatch, capsys):
    from grpo.cli import sweep_main
    from grpo.engine.cli import hydra_argv, precheck

    spec, clip = _finished_study(tmp_path)
    monkeypatch.chdir(tmp_path)
    assert sweep_main(["best", spec.name, "--export", "exports/best.yaml"]) == 0
    out = tmp_path / "exports" / "best.yaml"
    command = f"grpo-train --config-dir {out.parent} --config-name best"
    assert capsys.readouterr().err.strip() == f"wrote exports/best.yaml; run it with: {command}"
    text = out.read_text()
    assert f"# run it: {command}\n" in text
    exported = yaml.safe_load(text)
    # The trial's own run is gone (the new run's choice); the rest is the trial as it ran.
    assert "save" not in exported["actor_config"]
    assert "wandb_exp_name" not in exported["rl_config"] and "wandb_group" not in exported["engine"]
    assert exported["rl_config"]["use_wandb"] is False and "wandb_project" not in exported["rl_config"]  # the base's
    assert exported["megatron_training"]["data_path"] == "./data/arithmetic"  # the base's: lands in the run dir
    assert exported["rl_config"]["clip_ratio"] == clip

    # The printed command, from another directory, through grpo-train's own config loading.
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    argv = command.split()[1:]
    precheck(argv)  # composes and validates: raises UserError on any problem
    assert "--config-dir" in hydra_argv(argv) and not list(elsewhere.iterdir())
    # Hydra composes the same file (`--cfg job` prints the job's config; nothing trains).
    run = subprocess.run(
        [sys.executable, "-m", "grpo.engine.cli", *argv, "--cfg", "job"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=elsewhere,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    assert yaml.safe_load(run.stdout)["rl_config"]["clip_ratio"] == clip


def test_other_spellings_of_the_command_work_or_say_the_one_that_does(tmp_path, monkeypatch, capsys):
    from grpo.cli import sweep_main
    from grpo.engine.cli import main, precheck

    spec, _ = _finished_study(tmp_path)
    monkeypatch.chdir(tmp_path)

    assert sweep_main(["best", spec.name, "--export", "best.yaml"]) == 0
    precheck(["--config-path", ".", "--config-name", "best"])  # relative to the working directory, not to grpo
    precheck(["--config-dir", ".", "--config-name", "best.yaml"])  # Hydra takes the name with its suffix too
    for argv in (["--config-name", "best.yaml"], ["--config-name", "./best.yaml"], ["--config-name", "best"]):
        capsys.readouterr()
        with pytest.raises(SystemExit) as exit_:
            main(argv)
        assert exit_.value.code == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "Traceback" not in err, err
        assert err.startswith(f"error: --config-name {argv[1]}: ") and err.endswith(
            "run it as: grpo-train --config-dir . --config-name best\n"
        ), err


def test_best_export_refuses_a_name_grpo_train_cannot_read_and_writes_nothing(tmp_path, monkeypatch, capsys):
    from grpo.cli import sweep_main

    spec, _ = _finished_study(tmp_path)
    monkeypatch.chdir(tmp_path)
    assert sweep_main(["best", spec.name, "--export", "best.txt"]) == 2
    assert capsys.readouterr().err.startswith("error: --export best.txt: the file name must end in .yaml")
    assert not (tmp_path / "best.txt").exists()
