"""``schedule`` (values switched between iterations) and ``engine.exit_interval`` (a segment of a longer run).

The key property: a scheduled run trains exactly as the same run cut at the switch and resumed from its checkpoint
with the new values set (what a population-based-training segment does), so a pbt winner's history replays as one
config. Every SCHEDULABLE key is switched once to show the switch reaches training.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch
import yaml
from engine_helpers import comparable, small
from pydantic import ValidationError

from grpo._fs import CHECKPOINT_TRACKER, RESUME_KEYS
from grpo._fs import read_jsonl as read_metrics
from grpo.config import GRPOConfig, load_config
from grpo.config.schedule import SCHEDULABLE, apply, values_at
from grpo.engine import train
from grpo.engine.check import check_config
from grpo.engine.metrics import close_logger
from grpo.engine.trainer import Run
from grpo.errors import UserError

TINY = "grpo_trainer_tiny_cpu"
FIRST = {"rl_config.clip_ratio": 0.2, "actor_config.lr": 1e-3, "generate_config.sampling_config.temperature": 0.7,
         "rl_config.init_kl_coef": 0.01}  # fmt: skip
SECOND = {"rl_config.clip_ratio": 0.05, "actor_config.lr": 3e-4, "generate_config.sampling_config.temperature": 1.2,
          "rl_config.init_kl_coef": 0.5}  # fmt: skip


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("grpo-cache")


def resume_overrides(ckpt) -> list[str]:
    """What a resumed segment sets: its parent's checkpoint, and the resume keys off (grpo._fs.RESUME_KEYS)."""
    return [f"actor_config.load={ckpt}", *(f"{key}=false" for key in RESUME_KEYS)]


def test_a_schedule_trains_as_the_run_cut_at_the_switch_and_resumed_with_the_new_values(cache_dir, tmp_path):
    # linear decay: a segment's lr schedule must span train_iters (8), not the segment, to match
    common = {"megatron_training.train_iters": 8, "megatron_training.save_interval": 100,
              "actor_config.lr_decay_style": "linear"}  # fmt: skip
    # One run: clip_ratio and lr from a schedule with a start at 0; temperature and init_kl_coef plain until 4.
    cfg = load_config(TINY, small(cache_dir, **common, **FIRST))
    cfg.schedule = {
        "rl_config.clip_ratio": {0: FIRST["rl_config.clip_ratio"], 4: SECOND["rl_config.clip_ratio"]},
        "actor_config.lr": {"0": FIRST["actor_config.lr"], "4": SECOND["actor_config.lr"]},  # as a JSON attr has it
        "generate_config.sampling_config.temperature": {4: SECOND["generate_config.sampling_config.temperature"]},
        "rl_config.init_kl_coef": {4: SECOND["rl_config.init_kl_coef"]},
    }
    whole = train(cfg, tmp_path / "whole")
    assert whole["iterations"] == 8 and whole["exited_at"] is None
    expected = read_metrics(tmp_path / "whole" / "metrics.jsonl")

    # Two segments in one run folder: the first values to iteration 4 (exit_interval), then the second values
    # as plain config values, resumed from the iteration-4 checkpoint.
    ckpt = tmp_path / "ckpt"
    seg = {**common, "engine.exit_interval": 4, "actor_config.save": str(ckpt)}
    first = train(load_config(TINY, small(cache_dir, **seg, **FIRST)), tmp_path / "seg")
    assert (first["exited_at"], first["iterations"], first["stopped_early"]) == (4, 4, False)
    assert first["checkpoint"] == str(ckpt / "iter_0000004")
    second = train(load_config(TINY, small(cache_dir, **seg, **SECOND) + resume_overrides(ckpt)), tmp_path / "seg")
    assert (second["start_iteration"], second["iterations"], second["exited_at"]) == (4, 8, None)
    rows = read_metrics(tmp_path / "seg" / "metrics.jsonl")
    assert [r["iteration"] for r in rows] == list(range(1, 9))
    assert comparable(rows) == comparable(expected)
    # the switch is visible: the lr (decaying from 1e-3, then from 3e-4) and the KL coefficient
    lrs = [r["actor/lr"] for r in expected]
    assert min(lrs[:4]) > 5e-4 and max(lrs[4:]) < 3e-4 and lrs[4] > lrs[7]
    assert [r["actor/kl_coef"] for r in expected] == [0.01] * 4 + [0.5] * 4


# key -> (the value after the switch, overrides that make the key matter); before it, the value is the config's
CLIP_HIGHER = (("+rl_config.clip_higher_enable", True), ("+rl_config.clip_ratio_low", 0.001),
               ("+rl_config.clip_ratio_high", 0.5))  # fmt: skip
SWITCHES = {
    "actor_config.lr": (1e-2, ()),
    "actor_config.min_lr": (9e-4, (("actor_config.lr_decay_style", "linear"),)),
    "actor_config.clip_grad": (1e-4, ()),
    "actor_config.weight_decay": (0.5, ()),
    "rl_config.clip_ratio": (0.001, ()),
    "rl_config.clip_ratio_low": (0.5, CLIP_HIGHER),
    "rl_config.clip_ratio_high": (0.001, CLIP_HIGHER),
    "rl_config.init_kl_coef": (5.0, ()),
    "rl_config.entropy_coeff": (0.5, ()),
    "generate_config.sampling_config.temperature": (1.5, ()),
    "generate_config.sampling_config.top_p": (0.3, ()),
    "generate_config.sampling_config.top_k": (1, ()),
    "generate_config.sampling_config.min_p": (0.5, ()),
}


def test_every_schedulable_key_is_tested_here():
    assert sorted(SWITCHES) == sorted(SCHEDULABLE)


def _run(cfg: GRPOConfig, run_dir, iterations: int) -> tuple[list[dict], dict[str, torch.Tensor]]:
    run_dir.mkdir(parents=True)
    run = Run(cfg, run_dir)
    try:
        rows = [run.iteration() for _ in range(iterations)]
        return comparable(rows), {k: v.clone() for k, v in run.policy.state_dict().items()}
    finally:
        close_logger(run.log)


@pytest.fixture(scope="module")
def unswitched(cache_dir, tmp_path_factory):
    """Two iterations without a switch, per set of extra overrides (computed once each)."""
    runs: dict[tuple, tuple[list[dict], dict[str, torch.Tensor]]] = {}

    def get(extra: tuple) -> tuple[list[dict], dict[str, torch.Tensor]]:
        if extra not in runs:
            cfg = load_config(TINY, small(cache_dir, **dict(extra)))
            runs[extra] = _run(cfg, tmp_path_factory.mktemp("unswitched") / "run", 2)
        return runs[extra]

    return get


@pytest.mark.parametrize("key", sorted(SWITCHES))
def test_switching_each_schedulable_key_changes_training(cache_dir, tmp_path, unswitched, key):
    after, extra = SWITCHES[key]
    plain_rows, plain_weights = unswitched(extra)
    cfg = load_config(TINY, small(cache_dir, **dict(extra)))
    cfg.schedule = {key: {1: after}}  # the second iteration trains with the new value
    rows, weights = _run(cfg, tmp_path / "switched", 2)
    assert rows[:1] == plain_rows[:1]  # the same run until the switch
    assert any(not torch.equal(weights[k], plain_weights[k]) for k in weights), f"switching {key} changed nothing"


@pytest.mark.parametrize("schedule, message", [
    ("{rl_config.clip_ratio: {0: 1.5}}", "schedule.rl_config.clip_ratio: from iteration 0: must be <= 1 (got 1.5)"),
    ("{megatron_training.global_batch_size: {2: 8}}",
     "schedule.megatron_training.global_batch_size: not a key the engine can change between iterations "
     "(schedulable: actor_config.lr, "),
    ("{rl_config.clip_ratio: {150: 0.1}}", "schedule.rl_config.clip_ratio: iteration 150 is outside the run"),
    ("{rl_config.clip_ratio: {-1: 0.1}}", "schedule.rl_config.clip_ratio: iteration -1 is outside the run"),
    ("{rl_config.clip_ratio: {0: 0.2, x: 0.1}}", "schedule.rl_config.clip_ratio: 'x' is not an iteration number"),
    ("{rl_config.clip_ratio: 0.1}", "schedule.rl_config.clip_ratio: must be a non-empty mapping"),
    ("{generate_config.sampling_config.top_k: {3: 0}}",
     "schedule.generate_config.sampling_config.top_k: from iteration 3: must be -1 (all tokens) or >= 1 (got 0)"),
    ("{actor_config.min_lr: {3: 1.0}}", "schedule (from iteration 3): actor_config.min_lr=1.0 is larger than"),
])  # fmt: skip
def test_a_bad_schedule_is_one_line_naming_the_file_and_the_key(schedule, message):
    with pytest.raises(UserError) as err:
        load_config(TINY, [f"+schedule={schedule}"])
    assert len(err.value.problems) == 1 and "\n" not in str(err.value)
    assert str(err.value).startswith("configs/grpo_trainer_tiny_cpu.yaml: ") and message in str(err.value)


def test_the_adaptive_kl_controller_refuses_a_scheduled_init_kl_coef():
    with pytest.raises(UserError, match=r"schedule\.rl_config\.init_kl_coef: rl_config\.kl_ctrl_type is adaptive"):
        load_config(TINY, ["rl_config.kl_ctrl_type=adaptive", "+schedule={rl_config.init_kl_coef: {5: 0.1}}"])


def test_schedule_assignment_starts_values_and_round_trip():
    cfg = load_config(TINY, ["+schedule={rl_config.clip_ratio: {10: 0.3}, actor_config.lr: {0: 2e-4, 20: '1e-4'}}"])
    assert cfg.schedule == {"rl_config.clip_ratio": {10: 0.3}, "actor_config.lr": {0: 2e-4, 20: 1e-4}}
    assert values_at(cfg, 9) == {"rl_config.clip_ratio": 0.2, "actor_config.lr": 2e-4}  # before 10: the plain value
    assert values_at(cfg, 10) == {"rl_config.clip_ratio": 0.3, "actor_config.lr": 2e-4}
    at = apply(cfg, 25)
    assert (at.rl_config.clip_ratio, at.actor_config.lr, cfg.rl_config.clip_ratio) == (0.3, 1e-4, 0.2)
    assert GRPOConfig.model_validate(cfg.to_dict()).schedule == cfg.schedule
    assert yaml.safe_load(yaml.safe_dump(cfg.to_dict()))["schedule"]["actor_config.lr"] == {0: 2e-4, 20: 1e-4}
    nested = load_config(TINY, ["+schedule.rl_config.clip_ratio={10: 0.3}", "+schedule.actor_config.lr={0: 2e-4}"])
    assert nested.schedule == {"rl_config.clip_ratio": {10: 0.3}, "actor_config.lr": {0: 2e-4}}  # Hydra nests keys
    cfg.schedule = {"rl_config.entropy_coeff": {"3": 0.1}}  # string starts (JSON) become ints
    assert cfg.schedule == {"rl_config.entropy_coeff": {3: 0.1}}
    with pytest.raises(ValidationError, match=r"schedule\.rl_config\.entropy_coeff: from iteration 3: must be >= 0"):
        cfg.schedule = {"rl_config.entropy_coeff": {3: -1.0}}
    with pytest.raises(ValidationError, match="iteration 7 is given twice"):
        cfg.schedule = {"rl_config.entropy_coeff": {7: 0.1, "7": 0.2}}


def test_exit_interval_needs_a_save_folder():
    cfg = load_config(TINY, ["+engine.exit_interval=10"])
    assert check_config(cfg) == [
        "configs/grpo_trainer_tiny_cpu.yaml: engine.exit_interval: 10 stops the run with a checkpoint to resume "
        "from, but actor_config.save is not set; set actor_config.save"
    ]


def test_exit_interval_stops_evaluated_and_checkpointed_and_each_resume_runs_one_more_segment(cache_dir, tmp_path):
    ckpt = tmp_path / "ckpt"
    overrides = small(cache_dir, **{
        "megatron_training.train_iters": 6, "megatron_training.save_interval": 100, "engine.exit_interval": 2,
        "engine.eval_every": 3, "engine.eval_size": 8, "actor_config.save": str(ckpt),
    })  # fmt: skip
    summaries = [train(load_config(TINY, overrides), tmp_path / "run")]
    for _ in range(2):
        summaries.append(train(load_config(TINY, overrides + resume_overrides(ckpt)), tmp_path / "run"))
    assert [(s["start_iteration"], s["iterations"], s["exited_at"]) for s in summaries] == [
        (0, 2, 2), (2, 4, 4), (4, 6, None)]  # fmt: skip
    assert not any(s["stopped_early"] for s in summaries)
    assert [s["checkpoint"] for s in summaries] == [str(ckpt / f"iter_{i:07d}") for i in (2, 4, 6)]
    assert (ckpt / CHECKPOINT_TRACKER).read_text() == "6"
    rows = read_metrics(tmp_path / "run" / "metrics.jsonl")
    assert [r["iteration"] for r in rows] == [0, 1, 2, 3, 4, 5, 6]
    # evaluated at eval_every (3, the end) and at each exit (2, 4), though eval_every divides neither
    assert [r["iteration"] for r in rows if "eval/acc" in r] == [0, 2, 3, 4, 6]
    assert "eval/acc_final" in summaries[0]


def test_grpo_train_runs_an_exported_config_with_a_schedule(cache_dir, tmp_path):
    cfg = load_config(TINY, small(cache_dir, **{"megatron_training.train_iters": 3}))
    body = cfg.to_dict()
    # int starts as YAML writes them, string starts as an exported JSON attr has them
    body["schedule"] = {"actor_config.lr": {0: 1e-3, 2: 2e-4}, "rl_config.clip_ratio": {"1": 0.1}}
    (tmp_path / "sched.yaml").write_text(yaml.safe_dump(body))
    expected = {"actor_config.lr": {0: 1e-3, 2: 2e-4}, "rl_config.clip_ratio": {1: 0.1}}
    assert load_config(tmp_path / "sched.yaml").schedule == expected
    run_dir = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, "-m", "grpo.engine.cli", "--config-dir", str(tmp_path), "--config-name", "sched",
         f"hydra.run.dir={run_dir}"],
        capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert [r["actor/lr"] for r in read_metrics(run_dir / "metrics.jsonl")] == [1e-3, 1e-3, 2e-4]
    assert (
        "schedule: from iteration 1: actor_config.lr=0.001, rl_config.clip_ratio=0.1"
        in (run_dir / "train.log").read_text()
    )


def test_a_resumed_run_takes_the_fixed_kl_coefficient_and_weight_decay_from_its_config(cache_dir, tmp_path):
    ckpt = tmp_path / "ckpt"
    base = small(cache_dir, **{"megatron_training.train_iters": 2, "engine.exit_interval": 1,
                               "actor_config.save": str(ckpt)})  # fmt: skip
    train(load_config(TINY, [*base, "rl_config.kl_ctrl_type=adaptive", "rl_config.kl_target=1e-6"]), tmp_path / "a")
    ckpt_kl = json.loads((ckpt / "iter_0000001" / "trainer_state.json").read_text())["kl_coef"]
    assert ckpt_kl != 0.01  # the adaptive controller moved it
    changed = [*base, *resume_overrides(ckpt), "rl_config.init_kl_coef=0.3", "actor_config.weight_decay=0.25"]
    for kind, expected_kl in (("adaptive", ckpt_kl), ("fixed", 0.3)):
        run_dir = tmp_path / kind
        run_dir.mkdir()
        run = Run(load_config(TINY, [*changed, f"rl_config.kl_ctrl_type={kind}"]), run_dir)
        try:
            assert run.state.iteration == 1
            assert run.kl_ctrl.value == expected_kl  # adaptive: the checkpoint's; fixed: the config's
            # load_state_dict brought back the checkpoint's 0.0; the config's applies, as Megatron's scheduler sets it
            assert [g["weight_decay"] for g in run.optimizer.param_groups] == [0.25, 0.0]
        finally:
            close_logger(run.log)
