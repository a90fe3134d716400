"""The GRPO diagnostics: each rule fires on the curve it describes and stays quiet just below its threshold."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from report_fixtures import make_study

from grpo.report import collect
from grpo.report import diagnostics as d

NAMES = {"entropy": "actor/entropy", "kl": "actor/kl_loss", "acc": "grpo/acc/mean", "reward": "grpo/score/mean",
         "held_out": "eval/acc_greedy", "prompts": "eval/prompts", "format": "strict_format_rewards/mean",
         "length": "response_length/mean", "truncated": "response_length/truncated",
         "zero_var": "grpo/zero_variance_groups", "clip": "actor/pg_clipfrac"}


def fired(cap=None, **series):
    n = len(next(iter(series.values())))
    return d.check_curves(np.arange(1, n + 1), {k: np.asarray(v, float) for k, v in series.items()}, NAMES, cap)


def flags(cap=None, **series):
    return [f.name for f in fired(cap, **series)]


def test_entropy_collapse_threshold():
    assert flags(entropy=[1.0, 1.0, 0.9, 0.1, 0.09, 0.08]) == ["entropy_collapse"]
    assert flags(entropy=[1.0, 1.0, 0.9, 0.3, 0.2, 0.15]) == []  # 15-20 % of the start: not collapsed
    assert flags(entropy=[1.0, 0.01]) == []  # too few iterations for a trend


def test_kl_blowup_absolute_growth_and_non_finite():
    assert flags(kl=[0.01, 0.2, 1.5]) == ["kl_blowup"]
    assert flags(kl=[0.01, 0.02, 0.05, 0.1, 0.25, 0.3]) == ["kl_blowup"]  # 10x growth above the floor
    assert flags(kl=[0.01, 0.02, 0.03, 0.05, 0.08, 0.1]) == []  # grows 10x but stays small
    assert flags(kl=[0.01, float("inf")]) == ["kl_blowup"]
    assert flags(kl=[0.05, 0.06, 0.05]) == []


def test_format_rising_while_accuracy_flat():
    assert flags(format=[0.1, 0.2, 0.5, 0.8], acc=[0.3, 0.3, 0.31, 0.3]) == ["format_without_accuracy"]
    assert flags(format=[0.1, 0.2, 0.5, 0.8], acc=[0.3, 0.35, 0.4, 0.5]) == []  # accuracy learns too
    assert flags(format=[0.5, 0.55, 0.6, 0.65], acc=[0.3, 0.3, 0.3, 0.3]) == []  # rise below 0.2


def test_length_pinned_needs_max_tokens():
    assert flags(cap=100, length=[50, 80, 95, 99]) == ["length_pinned"]
    assert flags(cap=100, length=[50, 60, 80, 85]) == []
    assert flags(cap=None, length=[99, 99, 99]) == []


def test_length_pinned_by_the_truncation_rate_replaces_the_estimate_from_the_mean_length():
    [flag] = fired(truncated=[0.1, 0.3, 0.5, 0.6, 0.7, 0.8])  # last window (2 points): 0.75
    assert flag.name == "length_pinned" and flag.metric == "response_length/truncated" and flag.iteration == 5
    assert "75% of responses hit max_tokens" in flag.detail
    assert flags(truncated=[0.1, 0.3, 0.5, 0.6, 0.45, 0.5]) == []  # 47.5 %: below half
    [both] = fired(cap=100, length=[95] * 6, truncated=[0.9] * 6)  # one flag, the direct measurement
    assert both.metric == "response_length/truncated"


def test_length_blowup_is_growth_not_size():
    [flag] = fired(length=[10, 12, 20, 30, 40, 50])  # 11 -> 45: 4.1x
    assert flag.name == "length_blowup" and flag.iteration == 5  # the first point at 3x the start (33): 40
    assert flags(length=[10, 12, 15, 20, 25, 30]) == []  # 2.5x
    assert flags(length=[10, 40]) == []  # too few points for a trend


def test_zero_variance_groups_share():
    [flag] = fired(zero_var=[0.1, 0.2, 0.6, 0.7, 0.8, 0.9])
    assert flag.name == "zero_variance_groups" and flag.iteration == 3  # the first point at or above 50 %
    assert "85% of prompt groups" in flag.detail
    assert flags(zero_var=[0.1, 0.2, 0.6, 0.7, 0.45, 0.5]) == []  # the last window averages 47.5 %


def test_clip_fraction_saturating():
    [flag] = fired(clip=[0.01, 0.05, 0.25, 0.3, 0.3, 0.3])
    assert flag.name == "clip_saturation" and flag.iteration == 3
    assert flags(clip=[0.01, 0.05, 0.25, 0.3, 0.15, 0.2]) == []  # the last window averages 0.175


def test_reward_rising_while_held_out_accuracy_falls():
    rising = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6]
    [flag] = fired(held_out=[0.3, 0.5, 0.6, 0.55, 0.45, 0.4], reward=rising)
    assert flag.name == "reward_up_heldout_down" and flag.metric == "eval/acc_greedy"
    assert flag.iteration == 5 and flag.value == pytest.approx(0.45)  # the first evaluation 0.05 below the peak
    assert "fell from 0.6 (iteration 3)" in flag.detail
    # Held-out accuracy that only levels off, or a training reward that is flat, is not this story.
    assert flags(held_out=[0.3, 0.5, 0.6, 0.59, 0.58, 0.58], reward=rising) == []
    assert flags(held_out=[0.3, 0.5, 0.6, 0.55, 0.45, 0.4], reward=[0.3] * 6) == []
    # A drop within the noise of 16 held-out prompts (2 standard errors: 0.24) is not a drop.
    assert flags(held_out=[0.3, 0.5, 0.6, 0.55, 0.45, 0.4], reward=rising, prompts=[16] * 6) == []
    assert flags(held_out=[0.3, 0.5, 0.6, 0.55, 0.45, 0.4], reward=rising, prompts=[1024] * 6) == [
        "reward_up_heldout_down"
    ]


def test_held_out_rule_reads_sparse_evaluations():
    """Evaluations come every few iterations (and at iteration 0): the rule reads their own points."""
    its = np.arange(0, 13)
    held = np.full(13, np.nan)
    held[[0, 4, 8, 12]] = [0.3, 0.6, 0.45, 0.4]
    reward = np.r_[np.nan, np.linspace(0.1, 0.7, 12)]
    [flag] = d.check_curves(its, {"held_out": held, "reward": reward}, NAMES, None)
    assert flag.iteration == 8


def test_fixture_study_flags_the_trials_built_to_fail_each_rule(tmp_path):
    frames = collect(make_study(tmp_path, health=True))
    got = {n: sorted(f.name for f in fl) for n, fl in frames.flags.items()}
    assert got == {1: ["entropy_collapse"], 2: ["kl_blowup"], 4: ["format_without_accuracy", "length_pinned"],
                   6: ["reward_up_heldout_down"], 7: ["clip_saturation"], 8: ["zero_variance_groups"],
                   9: ["length_blowup"]}
    assert {f.name for fl in frames.flags.values() for f in fl} == {r.name for r in d.RULES}
    length = next(f for f in frames.flags[4] if f.name == "length_pinned")
    assert "80% of responses" in length.detail and length.metric == "response_length/truncated"
    assert all(isinstance(f.iteration, int) and f.iteration >= 1 for fl in frames.flags.values() for f in fl)


def test_every_rule_explains_itself_in_one_line():
    for rule in d.RULES:
        for text in (rule.explanation, rule.meaning):
            assert text and "\n" not in text and len(text) < 200, rule.name


def _random_trial(rng: np.random.Generator) -> tuple[np.ndarray, dict[str, np.ndarray], int | None]:
    """Curves of 1-12 iterations near every rule's threshold, with missing (NaN) and non-finite points."""
    n = int(rng.integers(1, 13))
    its = np.sort(rng.choice(np.arange(1, 40), size=n, replace=False))
    start = rng.uniform(0.05, 1.5)
    peak = rng.integers(0, max(1, n))
    series = {
        "entropy": start * np.geomspace(1.0, rng.uniform(0.03, 0.3), n),
        "kl": rng.uniform(0.005, 0.05) * np.geomspace(1.0, rng.uniform(1.0, 60.0), n) * rng.choice([1, -1]),
        "format": np.linspace(rng.uniform(0, 0.5), rng.uniform(0, 0.9), n),
        "acc": np.linspace(0.3, 0.3 + rng.uniform(-0.05, 0.08), n),
        "length": rng.uniform(10, 26, n) * np.geomspace(1.0, rng.uniform(1.0, 4.0), n),
        "truncated": rng.uniform(0, 0.7, n),
        "zero_var": rng.uniform(0, 0.7, n),
        "clip": rng.uniform(0, 0.3, n),
        "reward": np.linspace(0.2, 0.2 + rng.uniform(-0.1, 0.2), n),
        "held_out": 0.5 - rng.uniform(0, 0.06) * np.abs(np.arange(n) - peak),
        "prompts": np.full(n, rng.choice([64.0, 1024.0])),
    }
    for values in series.values():
        values[rng.random(n) < 0.1] = np.nan
    if rng.random() < 0.05:
        series["kl"][rng.integers(n)] = rng.choice([np.inf, -np.inf])
    roles = [r for r in series if rng.random() < 0.85]
    return its, {r: series[r] for r in roles}, (24 if rng.random() < 0.7 else None)


def test_a_study_and_each_trial_alone_get_the_same_flags():
    """The rules run on all trials at once (``diagnose``): a trial gets exactly the flags its own curves
    give (``check_curves``), whatever its neighbours look like. 400 random trials near the thresholds."""
    rng = np.random.default_rng(0)
    trials = [_random_trial(rng) for _ in range(400)]
    frames, caps = [], {}
    for number, (its, series, cap) in enumerate(trials):
        caps[number] = cap
        index = pd.MultiIndex.from_arrays([np.full(len(its), number), its], names=["trial", "iteration"])
        frames.append(pd.DataFrame({NAMES[r]: v for r, v in series.items()}, index=index))
    wide = pd.concat(frames).sort_index()
    together = d.evaluate(wide, NAMES, caps)
    alone = {n: d.check_curves(its, series, NAMES, cap) for n, (its, series, cap) in enumerate(trials)}
    assert together == {n: fl for n, fl in alone.items() if fl}
    fired = {f.name for fl in together.values() for f in fl}
    assert fired == {r.name for r in d.RULES}  # the cases reach every rule
    assert 20 < len(together) < 380  # ...and not every trial breaks one


def test_max_tokens_comes_from_the_base_config_and_the_trials_overrides_without_opening_its_file(tmp_path):
    import optuna

    from grpo.report.diagnostics import max_tokens

    study = optuna.create_study()
    study.set_user_attr("base_config", {"generate_config": {"sampling_config": {"max_tokens": 32}}})

    def trial(overrides):
        t = study.ask()
        t.set_user_attr("overrides", overrides)
        t.set_user_attr("config_file", {"path": "trials/0/config.yaml", "sha256": "0" * 16})  # no such file
        t.set_user_attr("trial_dir", str(tmp_path / "trials" / str(t.number)))
        study.tell(t, 1.0)
        return study.trials[-1]

    assert max_tokens(trial(["rl_config.clip_ratio=0.2"]), study) == 32
    assert max_tokens(trial(["generate_config.sampling_config.max_tokens=64"]), study) == 64
    # A config-group choice may set anything: the trial's own file is read (here missing: unknown).
    assert max_tokens(trial(["model=qwen25_7b"]), study) is None
