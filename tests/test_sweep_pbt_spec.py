"""A pbt spec's bad input: one line naming the file and the key, exit code 2, nothing written; and what
`validate` says of a good one (the population, its generations, what it explores)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from grpo.sweep.backends.mindspeed.backend import segment_problems
from grpo.config import load_config
from sweep_helpers import run_cli

BASE = {
    "study": "p",
    "base": "grpo_trainer_tiny_cpu",
    "overrides": ["megatron_training.train_iters=40"],
    "search": {"actor_config.lr": "tag(log, interval(1e-5, 1e-3))", "rl_config.clip_ratio": "choice(0.1, 0.2)"},
    "objective": {"metric": "eval/acc_greedy", "reduce": "auc"},
    "scheduler": {"kind": "pbt", "population": 4, "interval": 10},
}


def spec_file(folder: Path, **changes) -> Path:
    spec = {**BASE, **changes}
    for key in [k for k, v in spec.items() if v is None]:
        del spec[key]
    path = folder / "p.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


@pytest.mark.parametrize(
    ("changes", "key", "says"),
    [
        ({"trials": 8}, "trials", "population x generations"),
        ({"pruner": {"name": "median"}}, "pruner.name", "set pruner.name: none"),
        ({"scheduler": {"kind": "pbt", "interval": 40}}, "scheduler.interval", "not shorter than"),
        ({"scheduler": {"kind": "pbt", "population": 1, "interval": 10}}, "scheduler.population", "must be >= 2"),
        ({"scheduler": {"kind": "pbt", "interval": 10, "quantile": 0.7}}, "scheduler.quantile", "0.5"),
        ({"scheduler": {"kind": "pbt"}}, "scheduler.interval", "required"),
        (
            {"search": {"megatron_training.train_iters": "choice(20, 40)"}, "overrides": []},
            "search.megatron_training.train_iters",
            "trains one length",
        ),
        ({"confirm": {"top_k": 2, "seeds": 2, "base": "grpo_trainer_nope"}}, "confirm.base", "no config named"),
    ],
)
def test_bad_pbt_specs_are_one_line_errors(tmp_path, changes, key, says):
    path = spec_file(tmp_path, **changes)
    done = run_cli(["validate", str(path)], cwd=tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    first = done.stderr.strip().splitlines()[0]
    assert first.startswith(f"error: {path}: {key}: ") and says in first, first
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "studies").exists()  # validate writes nothing


def test_validate_shows_the_population_and_what_it_explores(tmp_path):
    path = spec_file(tmp_path, search={**BASE["search"], "actor_config.micro_batch_size": "choice(2, 4)"})
    done = run_cli(["validate", str(path)], cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    said = " ".join(done.stdout.split())  # rich wraps at the terminal's width
    assert "pbt: 4 members x 4 generations of 10 iterations = 16 segment trials" in said
    assert "exploring actor_config.lr, rl_config.clip_ratio" in said  # the micro batch is inherited
    assert not (tmp_path / "studies").exists()


def test_mindspeed_refuses_segments_its_lr_schedule_would_distort():
    # MindSpeed-RL has no exit interval: a segment is a resume cut at the segment's end, so Megatron's lr
    # schedule (decay and warmup over train_iters) would span the segment instead of the run.
    cosine = load_config("grpo_trainer_tiny_cpu", ["actor_config.lr_decay_style=cosine"])
    assert "actor_config.lr_decay_style" in segment_problems(cosine, "s.yaml", segments=True)[0]
    constant = load_config(
        "grpo_trainer_tiny_cpu", ["actor_config.lr_decay_style=constant", "actor_config.lr_warmup_fraction=0"]
    )
    assert segment_problems(constant, "s.yaml", segments=True) == []
    # a schedule that changes a value inside a run cannot run there; at segment starts it can
    constant.engine.exit_interval = 10
    constant.schedule = {"rl_config.clip_ratio": {0: 0.2, 10: 0.3}}
    assert segment_problems(constant, "s.yaml") == []
    constant.schedule = {"rl_config.clip_ratio": {0: 0.2, 15: 0.3}}
    assert "schedule.rl_config.clip_ratio" in segment_problems(constant, "s.yaml")[0]
