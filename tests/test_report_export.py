"""export(): both frames in csv, parquet (pyarrow) and json, written atomically; a bad format writes nothing."""

from __future__ import annotations

import pandas as pd
import pytest
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
    study.add_trial(optuna.create_trial(value=1.2345678901234e-7, params={"actor_config.lr": 1.2345678901234e-7},
                                        distributions={"actor_config.lr": optuna.distributions.FloatDistribution(
                                            1e-9, 1e-3, log=True)}))
    trials_path, _ = export(study, "json", tmp_path / "out")
    back = pd.read_json(trials_path, orient="records", precise_float=True)
    assert back["value"].tolist() == [1.2345678901234e-7]
