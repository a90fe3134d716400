"""The layout table of `grpo-sweep validate SPEC`: rows per layout, verdicts and reasons.

The spec uses the mindspeed backend with the STAND-IN MindSpeed-RL checkout (tests/standin_mindspeed)
and converted weights for TP2 PP2 only, so each verdict appears: fits, does not fit (memory),
blocked (no converted checkpoint), invalid (a config rule).
"""

import io

import pytest
from mindspeed_helpers import STANDIN, config, convert
from rich.console import Console

from grpo.cli import sweep_main
from grpo.sweep.backends import load_backend
from grpo.sweep.commands.layout_table import config_layout_rows, rows_table, spec_layout_rows
from grpo.sweep.spec.load import load_spec

SPEC = """\
study: plan_table
base: grpo_trainer_qwen25_7b_A3
search:
  layout: choice(tp4_pp1, tp2_pp2, tp8_pp1)
  actor_config.micro_batch_size: choice(1, 8)
  rl_config.clip_ratio: choice(0.2, 0.3)
objective: {{metric: e2e_tps, direction: maximize}}
sampler: grid
backend: mindspeed
mindspeed:
  path: {standin}
  checkpoints: {{pattern: "{weights}/qwen7b-tp{{tp}}-pp{{pp}}"}}
plan: {{device_memory_gb: 64}}
"""


@pytest.fixture(scope="module")
def spec_path(tmp_path_factory):
    root = tmp_path_factory.mktemp("plan_table")
    convert(root / "weights", 2, 2)
    path = root / "layout_study.yaml"
    path.write_text(SPEC.format(standin=STANDIN.resolve(), weights=root / "weights"))
    return path


@pytest.fixture(scope="module")
def rows(spec_path):
    spec = load_spec(spec_path)
    return spec_layout_rows(spec, load_backend(spec))


def test_rows_cross_layouts_with_memory_relevant_choices_only(rows, spec_path):
    rows = {row.label: row for row in rows}
    assert list(rows) == [  # clip_ratio does not change memory: no extra rows
        "tp4_pp1 (micro_batch_size=1)", "tp4_pp1 (micro_batch_size=8)", "tp2_pp2 (micro_batch_size=1)",
        "tp2_pp2 (micro_batch_size=8)", "tp8_pp1 (micro_batch_size=1)", "tp8_pp1 (micro_batch_size=8)"]
    assert rows["tp2_pp2 (micro_batch_size=1)"].verdict == "fits"
    assert rows["tp2_pp2 (micro_batch_size=8)"].verdict == "does not fit"
    assert "training needs" in rows["tp2_pp2 (micro_batch_size=8)"].estimate.reason
    blocked = rows["tp4_pp1 (micro_batch_size=1)"]
    assert blocked.verdict == "blocked" and blocked.estimate.feasible
    assert "layout tp4_pp1" in blocked.launch_problems[0]
    assert str(spec_path.parent / "weights" / "qwen7b-tp4-pp1") in blocked.launch_problems[0]
    assert rows["tp8_pp1 (micro_batch_size=1)"].verdict == "invalid"
    assert "not divisible by actor_config.tensor_model_parallel_size=8" in rows["tp8_pp1 (micro_batch_size=1)"].problem


def test_table_shows_dp_memory_verdict_and_reason(rows):
    out = io.StringIO()
    Console(file=out, width=250).print(rows_table(rows, 64))
    text = out.getvalue()
    assert "layouts on 64 GiB NPUs" in text
    line = next(t for t in text.splitlines() if "tp2_pp2 (micro_batch_size=1)" in t)
    assert "2x2x4" in line and "fits" in line and "GiB headroom" in line
    assert "does not fit" in text and "blocked" in text and "invalid" in text


def test_table_of_configs_given_directly():
    rows = config_layout_rows({"a": config(layout="tp4_pp1"), "b": config(layout="tp2_pp2")}, 64)
    assert [(r.label, r.verdict, r.estimate.train_dp) for r in rows] == [("a", "fits", 4), ("b", "fits", 4)]
    (row,) = config_layout_rows([config(layout="tp4_pp2")], 16)
    assert row.label == "tp4_pp2" and row.verdict == "does not fit"


def test_validate_prints_the_layout_table(spec_path, capsys):
    assert sweep_main(["validate", str(spec_path)]) == 0
    out = capsys.readouterr().out
    assert "layouts on 64 GiB NPUs" in out and "tp2_pp2" in out


def test_a_model_the_planner_does_not_model_says_not_estimated_not_fits():
    from rich.console import Console

    from grpo.config import load_config
    from grpo.plan import estimate
    from grpo.sweep.commands.layout_table import LayoutRow, rows_table

    moe = "qwen3_30b_a3b"
    cfg = load_config("grpo_trainer_qwen25_7b_A3", [f"model={moe}", f"megatron_training.model={moe}",
                                                    f"actor_config.model={moe}"])
    row = LayoutRow("tp4_pp1", {}, estimate(cfg, 64))
    assert row.verdict == "not estimated"
    console = Console(width=250, record=True)
    console.print(rows_table([row], 64))
    text = console.export_text()
    assert "not estimated: model.qwen3_30b_a3b is MoE" in text and "nan" not in text and " fits " not in text
