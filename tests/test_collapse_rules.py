"""pruner.collapse's training-dynamics rules on synthetic metric streams (each named in its reason), the spec
keys of the collapse rule, the curve stopper and PatientPruner (refused in one line naming the key), and
PatientPruner built from a spec around the chosen Optuna pruner."""

from __future__ import annotations

import textwrap
from pathlib import Path

import optuna
import pytest

from grpo.errors import UserError
from grpo.sweep.run.collapse import ENTROPY, KL, SCORE, collapse_reason, dynamics_reason, uses_dynamics
from grpo.sweep.spec.load import load_spec
from grpo.sweep.spec.models import CollapseRule
from grpo.sweep.spec.samplers import make_pruner
from sweep_helpers import load, run_cli, write_spec

ITERS = 40


def stream(values: list[float], start: int = 1) -> list[tuple[int, float]]:
    return [(start + i, v) for i, v in enumerate(values)]


def reason(rule: CollapseRule, step: int = ITERS, **metrics: list[list[float]]) -> str | None:
    names = {"kl": KL, "score": SCORE, "entropy": ENTROPY}
    return dynamics_reason(rule, {names[k]: [stream(v) for v in seeds] for k, seeds in metrics.items()}, step, ITERS)


def test_no_dynamics_rule_is_on_by_default():
    rule = CollapseRule()
    assert not uses_dynamics(rule)
    assert reason(rule, kl=[[0.01] * 10 + [9.0] * 5], score=[[0.0] * 20]) is None


def test_kl_spike_against_its_trailing_median():
    rule = CollapseRule(kl_spike=5.0, window=4)
    smooth = [0.02 * 1.15**i for i in range(20)]  # grows steadily: never 5x its recent median
    assert reason(rule, kl=[smooth]) is None
    spiked = smooth[:12] + [0.9] + smooth[13:]
    got = reason(rule, kl=[spiked])
    assert got is not None and got.startswith("collapse.kl_spike at iteration 13 of 40: actor/kl_loss 0.9 is over 5x")
    assert "of the previous 4 iterations" in got
    # Tiny values multiply freely at the start: not a spike.
    assert reason(rule, kl=[[1e-5, 1e-5, 1e-5, 1e-5, 1e-3]]) is None
    # The mean over seeds: one seed's spike is halved by the other's calm.
    assert reason(CollapseRule(kl_spike=8.0, window=4), kl=[spiked]) is not None
    assert reason(CollapseRule(kl_spike=8.0, window=4), kl=[spiked, smooth]) is None


def test_kl_max_is_an_absolute_bound():
    got = reason(CollapseRule(kl_max=0.5), kl=[[0.1, 0.3, 0.6, 0.2]])
    assert got == "collapse.kl_max at iteration 3 of 40: actor/kl_loss 0.6 is over 0.5"


def test_reward_drop_from_its_best_trailing_mean():
    rule = CollapseRule(reward_drop=0.2, window=3)
    rises = [0.1, 0.3, 0.5, 0.6, 0.6, 0.65, 0.6]
    assert reason(rule, score=[rises]) is None
    falls = [*rises, 0.3, 0.2, 0.1]
    got = reason(rule, score=[falls])
    assert got is not None and got.startswith("collapse.reward_drop at iteration 9 of 40: grpo/score/mean averaged 0.3667")
    assert "over the last 3 iterations, more than 0.2 below its best 0.6167" in got
    # Not past the step every seed has reached.
    assert reason(rule, step=8, score=[falls]) is None


def test_zero_reward_for_k_iterations_in_a_row():
    rule = CollapseRule(zero_reward=3)
    assert reason(rule, score=[[0.2, 0.0, 0.0, 0.1, 0.0, 0.0]]) is None  # never 3 in a row
    got = reason(rule, score=[[0.2, 0.0, 0.0, 0.0, 0.1]])
    assert got == "collapse.zero_reward at iteration 4 of 40: grpo/score/mean at or below 0 for 3 iterations in a row"
    floored = CollapseRule(zero_reward=2, reward_floor=-1.0)  # a reward whose floor is -1
    assert reason(floored, score=[[0.0, 0.0, 0.0]]) is None
    assert reason(floored, score=[[-1.0, -1.0]]) is not None


def test_entropy_floor():
    got = reason(CollapseRule(entropy_floor=0.05), entropy=[[1.2, 0.6, 0.2, 0.04, 0.03]])
    assert got == "collapse.entropy_floor at iteration 4 of 40: actor/entropy 0.04 is below 0.05"


def test_the_earliest_rule_decides_and_a_missing_metric_never_fires():
    rule = CollapseRule(kl_max=0.5, entropy_floor=0.05)
    got = reason(rule, kl=[[0.1, 0.2, 0.3, 0.9]], entropy=[[1.0, 0.01, 0.01, 0.01]])
    assert got is not None and got.startswith("collapse.entropy_floor at iteration 2")
    assert reason(rule, score=[[0.5, 0.5]]) is None  # no KL (no reference model), no entropy


def test_below_base_can_be_turned_off():
    curves = [[(0, 0.66), (10, 0.4)]]
    assert collapse_reason(CollapseRule(), curves, 10, 20) is not None
    assert collapse_reason(CollapseRule(below_base=None), curves, 10, 20) is None


GOOD = """\
study: s1
base: grpo_trainer_tiny_cpu
search:
  rl_config.clip_ratio: interval(0.1, 0.3)
objective: grpo/score/mean
"""


def spec_with(tmp_path: Path, pruner: str, extra: str = ""):
    path = tmp_path / "spec.yaml"
    path.write_text(GOOD + extra + "pruner:\n" + textwrap.indent(textwrap.dedent(pruner), "  "))
    return path


def problem(path: Path) -> str:
    with pytest.raises(UserError) as info:
        load_spec(path)
    (line,) = info.value.problems
    assert "\n" not in line and line.startswith(f"{path}: ")
    return line[len(f"{path}: ") :]


@pytest.mark.parametrize(
    ("pruner", "expected"),
    [
        ("collapse: {kl_spike: 1}", "pruner.collapse.kl_spike: must be > 1 (got 1)"),
        ("collapse: {reward_floor: -1}", "pruner.collapse.reward_floor: only used with zero_reward"),
        ("collapse: {window: 4}", "pruner.collapse.window: only used with kl_spike or reward_drop"),
        ("collapse: {zero_reward: 0}", "pruner.collapse.zero_reward: must be >= 1 (got 0)"),
        ("collapse: {entropy_flor: 0.1}", "pruner.collapse.entropy_flor: unknown key; did you mean pruner.collapse.entropy_floor?"),
        ("curve: {min_points: 2}", "pruner.curve.min_points: must be >= 4 (got 2)"),
        ("curve: {bounds: [1, 0]}", "pruner.curve.bounds: must be [low, high] with low < high (got [1.0, 0.0])"),
        ("curve: {confidence: 1.5}", "pruner.curve.confidence: must be < 1 (got 1.5)"),
        ("min_delta: 0.01", "pruner.min_delta: only used with patience"),
        ("patience: -1", "pruner.patience: must be >= 0 (got -1)"),
    ],
)  # fmt: skip
def test_bad_keys_are_one_line_naming_the_key(tmp_path, pruner, expected):
    assert problem(spec_with(tmp_path, pruner)) == expected


def test_curve_needs_one_objective_and_pbt_refuses_curve_and_patience(tmp_path):
    two = GOOD.replace("objective: grpo/score/mean", "objective: [grpo/score/mean, grpo/acc/mean]")
    path = tmp_path / "two.yaml"
    path.write_text(two + "pruner: {name: none, curve: {}}\n")
    assert problem(path).startswith("pruner.curve: compares one objective with the best finished trial")
    pbt = "scheduler: {kind: pbt, population: 2, interval: 10}\n"
    assert problem(spec_with(tmp_path, "name: none\ncurve: {}\n", pbt)).startswith("pruner.curve: pbt segments")
    assert problem(spec_with(tmp_path, "name: none\npatience: 3\n", pbt)).startswith("pruner.patience: pbt")


def test_patience_wraps_the_chosen_pruner(tmp_path):
    spec = load_spec(spec_with(tmp_path, "name: median\nwarmup_steps: 2\npatience: 3\nmin_delta: 0.01\n"))
    pruner = make_pruner(spec)
    assert isinstance(pruner, optuna.pruners.PatientPruner)
    assert isinstance(pruner._wrapped_pruner, optuna.pruners.MedianPruner)
    assert pruner._wrapped_pruner._n_warmup_steps == 2
    assert (pruner._patience, pruner._min_delta) == (3, 0.01)
    alone = make_pruner(load_spec(spec_with(tmp_path, "name: none\npatience: 2\n")))
    assert isinstance(alone, optuna.pruners.PatientPruner) and alone._wrapped_pruner is None
    plain = make_pruner(load_spec(spec_with(tmp_path, "name: median\n")))
    assert isinstance(plain, optuna.pruners.MedianPruner)


def decisions(pruner: optuna.pruners.BasePruner, curve: list[float]) -> list[bool]:
    study = optuna.create_study(direction="maximize", pruner=pruner)
    done = study.ask()
    for step in range(10):
        done.report(0.8, step)
    study.tell(done, 0.8)
    trial = study.ask()
    out = []
    for step, value in enumerate(curve):
        trial.report(value, step)
        out.append(trial.should_prune())
    return out


def test_patience_lets_a_still_improving_run_through(tmp_path):
    # Median pruning alone stops a run below the finished trial's curve at once; wrapped in PatientPruner, a run
    # below it but still improving goes on, and is pruned once it has not improved for 2 reported steps.
    options = "options: {n_startup_trials: 1}\n"
    curve = [0.1, 0.2, 0.3, 0.4, 0.4, 0.35, 0.3, 0.3]
    alone = make_pruner(load_spec(spec_with(tmp_path, "name: median\n" + options)))
    assert decisions(alone, curve)[0]
    patient = make_pruner(load_spec(spec_with(tmp_path, "name: median\npatience: 2\n" + options)))
    assert decisions(patient, curve) == [False] * 7 + [True]


@pytest.mark.slow
def test_a_kl_spike_stops_a_trial_through_the_driver_and_the_report_names_the_rule(tmp_path):
    spec = write_spec(
        tmp_path, name="kl", trials=2, concurrency=1, backend="collapse_backends:KLSpikeBackend",
        search={"rl_config.clip_ratio": "choice(0.1, 0.3)"}, sampler={"name": "grid", "seed": 0},
        pruner={"name": "none", "collapse": {"below_base": None, "kl_spike": 5, "window": 4, "entropy_floor": 0.01}},
    )  # fmt: skip
    done = run_cli(["run", str(spec), "--quiet"], cwd=tmp_path, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    by_clip = {t.params["rl_config.clip_ratio"]: t for t in load(tmp_path, "kl").trials}
    spiked, kept = by_clip[0.3], by_clip[0.1]
    assert kept.state == optuna.trial.TrialState.COMPLETE
    assert spiked.state == optuna.trial.TrialState.PRUNED
    assert spiked.user_attrs["pruned_reason"].startswith(
        "collapse.kl_spike at iteration 6 of 12: actor/kl_loss 0.9 is over 5x its median 0.0"
    )
    html = (tmp_path / "reports" / "kl" / "index.html").read_text()
    assert "collapse.kl_spike at iteration 6 of 12" in html
