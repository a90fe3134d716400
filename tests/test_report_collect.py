"""collect(): the trials and metrics frames of a real (small) study, also while it runs."""

from __future__ import annotations

import json

import optuna
import pytest
from report_fixtures import EVAL_METRICS, ITERATIONS, TRAIN_METRICS, make_study

from grpo.report import Frames, collect
from grpo.report.collect import METRIC_COLUMNS, metrics_frame

# Metric values one seed writes (report_fixtures._curves): 14 training metrics per iteration 1..n, and 4
# held-out ones at iteration 0 and every EVAL_EVERY (2) iterations and the last: 6 iterations -> 4
# evaluations (0, 2, 4, 6), 3 iterations -> 3 (0, 2, 3).
PER_SEED = {ITERATIONS: ITERATIONS * len(TRAIN_METRICS) + 4 * len(EVAL_METRICS),
            3: 3 * len(TRAIN_METRICS) + 3 * len(EVAL_METRICS)}


@pytest.fixture(scope="module")
def running_study(tmp_path_factory):
    return make_study(tmp_path_factory.mktemp("collect"), running=True)


def test_trials_frame_has_one_row_per_trial_with_the_report_columns(running_study):
    frames = collect(running_study)
    assert isinstance(frames, Frames)
    trials = frames.trials.set_index("number")
    assert list(trials.index) == [0, 1, 2, 3, 4, 5, 6]
    assert list(trials["state"]) == ["COMPLETE", "COMPLETE", "PRUNED", "FAIL", "COMPLETE", "COMPLETE", "RUNNING"]
    for column in ("value", "params_rl_config.clip_ratio", "params_rl_config.init_kl_coef", "params_layout",
                   "params_rl_config.n_samples_per_prompt", "seeds", "seed_values", "seed_spread", "duration_s",
                   "wall_s", "cpu_s", "npu_s", "compute_s", "last_iteration", "failure_reason", "pruned_reason",
                   "trial_dir", "flags", "datetime_start", "datetime_complete"):
        assert column in trials.columns, column
    # Objective value, seed spread and per-seed values of the two-seed trial.
    assert trials.at[0, "value"] == pytest.approx(0.675)
    assert trials.at[0, "seeds"] == 2
    assert trials.at[0, "seed_spread"] == pytest.approx(0.025)
    assert json.loads(trials.at[0, "seed_values"]) == [[pytest.approx(0.7), pytest.approx(0.65)]]
    assert trials.at[5, "value"] == pytest.approx(0.9)
    assert trials.at[1, "params_rl_config.clip_ratio"] == pytest.approx(0.13)
    # Compute: CPU-seconds here (no NPU), the failed trial's too.
    assert trials.at[0, "compute_s"] == pytest.approx(108.0)
    assert trials.at[3, "compute_s"] == pytest.approx(2.5)
    assert "out of memory" in trials.at[3, "failure_reason"]
    assert trials.at[2, "pruned_reason"].startswith("pruned by the pruner")
    assert trials.at[0, "trial_dir"].endswith("trials/0")
    # A running trial: duration so far, no value, curves up to the last complete line.
    assert trials.at[6, "duration_s"] > 0
    assert trials.at[6, "value"] != trials.at[6, "value"]  # NaN
    assert trials.at[6, "last_iteration"] == 3
    assert trials.at[1, "flags"] == "entropy_collapse"
    assert trials.at[4, "flags"] == "length_pinned, format_without_accuracy"  # in diagnostics.RULES order
    # The seed interval the driver recorded, the throughput the engine reported; no confirmation stage here.
    assert json.loads(trials.at[0, "value_interval"]) == [[pytest.approx(0.65), pytest.approx(0.7)]]
    assert json.loads(trials.at[5, "value_interval"]) == [None]  # one seed: no interval
    assert trials.at[5, "throughput"] == pytest.approx(903.5)  # mean e2e_tps over iterations 1..6
    assert trials["confirmation_of"].isna().all()


def test_confirmation_trials_name_the_trial_they_confirm(tmp_path):
    trials = collect(make_study(tmp_path, confirm=True)).trials.set_index("number")
    confirming = trials["confirmation_of"].dropna().astype(int).to_dict()
    assert confirming == {6: 5, 7: 0}  # the two best search trials, rerun on 3 fresh seeds
    assert trials.at[6, "seeds"] == 3


def test_metrics_frame_is_long_and_skips_the_half_written_line_and_missing_dirs(running_study):
    metrics = collect(running_study).metrics
    assert list(metrics.columns) == METRIC_COLUMNS
    per_trial = metrics.groupby("trial").size().to_dict()
    # trial 0: 2 seeds x 6 iterations; 1, 4, 5: 6 iterations; 2 (pruned) and 6 (running): 3; 3 has no dir.
    full, short = PER_SEED[ITERATIONS], PER_SEED[3]
    assert per_trial == {0: 2 * full, 1: full, 2: short, 4: full, 5: full, 6: short}
    assert sorted(metrics.loc[metrics.trial == 0, "seed"].unique()) == [1234, 1235]
    acc = metrics[(metrics.trial == 5) & (metrics.metric == "acc_rewards/mean")]
    assert list(acc["iteration"]) == list(range(1, ITERATIONS + 1))
    assert acc["value"].iloc[-1] == pytest.approx(0.9)
    # Held-out evaluation: the base policy at iteration 0 (eval metrics only), then every 2 iterations.
    held_out = metrics[(metrics.trial == 5) & (metrics.metric == "eval/acc_greedy")]
    assert list(held_out["iteration"]) == [0, 2, 4, 6]
    assert set(metrics.loc[(metrics.trial == 5) & (metrics.iteration == 0), "metric"]) == set(EVAL_METRICS)


def test_per_seed_subfolders_and_duplicate_iterations(tmp_path):
    """No top-level metrics.jsonl: seed<k>/ files are read, seeds from the `seeds` attr; a resumed run's
    repeated iteration keeps the later line."""
    storage = optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(str(tmp_path / "j.log")))
    study = optuna.create_study(study_name="s", storage=storage)
    trial = study.ask()
    folder = tmp_path / "t0"
    for k in (0, 1):
        (folder / f"seed{k}").mkdir(parents=True)
        lines = [{"iteration": 1, "acc_rewards/mean": 0.1 + k}, {"iteration": 2, "acc_rewards/mean": 0.2 + k},
                 {"iteration": 2, "acc_rewards/mean": 0.3 + k, "note": "text is skipped"}]
        (folder / f"seed{k}" / "metrics.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    trial.set_user_attr("trial_dir", str(folder))
    trial.set_user_attr("seeds", [7, 8])
    study.tell(trial, 1.0)
    frame = metrics_frame(study)
    assert frame[["seed", "iteration", "value"]].values.tolist() == [[7, 1, 0.1], [7, 2, 0.3], [8, 1, 1.1], [8, 2, 1.3]]


def test_empty_study_gives_empty_frames_with_columns(tmp_path):
    study = optuna.create_study(study_name="empty", storage=optuna.storages.InMemoryStorage())
    frames = collect(study)
    assert frames.trials.empty and frames.metrics.empty
    assert list(frames.metrics.columns) == METRIC_COLUMNS
    assert {"number", "state", "value", "compute_s", "flags"} <= set(frames.trials.columns)
