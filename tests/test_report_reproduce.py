"""Reproduce: the exported config, the exact command (embedded or MindSpeed-RL), the environment."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import yaml
from report_fixtures import ENVIRONMENT, make_study

from grpo.report import write_report
from grpo.report.reproduce import commands, exported_config

REPO = Path(__file__).resolve().parents[1]


def section(page: str) -> str:
    return re.search(r'<section id="reproduce">.*?</section>', page, re.S).group(0)


def test_embedded_command_reruns_every_seed_from_the_exported_config(tmp_path):
    study = make_study(tmp_path, confirm=True, environment=True)
    out = tmp_path / "report dir"  # a space: the command quotes the path
    page = write_report(study, out).read_text()
    how = commands(study, study.trials[6], out / "best_config.yaml")
    line = f"grpo-train --config-dir '{out.resolve()}' --config-name best_config"
    assert how.lines == [line, f"{line} megatron_training.seed=2002", f"{line} megatron_training.seed=2003"]
    body = section(page)
    assert "\n".join(how.lines).replace("'", "&#x27;") in body
    assert "one line per seed it ran (2001, 2002, 2003)" in body
    # The environment the study recorded: versions and commit.
    assert f"<code>{ENVIRONMENT['commit']}</code>" in body and "<td>torch</td><td><code>2.5.1</code></td>" in body
    text = (out / "best_config.yaml").read_text()
    assert text.startswith("# trial 6 of study report_study")
    assert "# seeds it ran (megatron_training.seed): 2001" in text
    assert yaml.safe_load(text)["megatron_training"]["seed"] == 2001


def test_exported_config_drops_the_trials_own_paths(tmp_path):
    study = make_study(tmp_path)
    trial = study.trials[5]
    base = {"actor_config": {"load": "/weights/qwen", "save": None}}
    trial.user_attrs["config"]["actor_config"]["load"] = "/weights/qwen"  # the starting weights: kept
    kept = exported_config(trial, base)
    assert "save" not in kept["actor_config"] and kept["actor_config"]["load"] == "/weights/qwen"
    trial.user_attrs["config"]["actor_config"]["load"] = "/studies/s/trials/5/ckpt"  # a retry's checkpoint:
    assert exported_config(trial, base)["actor_config"]["load"] == "/weights/qwen"  # back to the starting weights
    assert "load" not in exported_config(trial, {"actor_config": {"load": None}})["actor_config"]
    assert trial.user_attrs["config"]["actor_config"]["save"]  # the trial's own attrs are left alone


def test_a_study_without_an_environment_says_so(tmp_path):
    page = write_report(make_study(tmp_path), tmp_path / "out").read_text()
    assert "The study records no environment" in section(page)


def test_mindspeed_command_is_the_launch_the_trial_logged(tmp_path):
    study = make_study(tmp_path)
    study.set_user_attr("backend", "mindspeed")
    trial = study.trials[5]
    run = Path(trial.user_attrs["trial_dir"]) / "runs" / "seed0"
    # Without a launch line: rebuilt from the spec's mindspeed settings and the rendered config folder.
    spec = dict(study.user_attrs["spec"], mindspeed={"path": "/opt/MindSpeed-RL", "python": "/opt/venv/bin/python"})
    study.set_user_attr("spec", spec)
    how = commands(study, trial, tmp_path / "best_config.yaml")
    assert how.lines == ["cd /opt/MindSpeed-RL", f"/opt/venv/bin/python cli/train_grpo.py --config-path "
                         f"{run / 'mindspeed_config'} --config-name grpo_trainer"]
    # With it: exactly what ran, where it ran.
    launch = f"/usr/bin/python3 cli/train_grpo.py --config-path {run}/mindspeed_config --config-name grpo_trainer"
    (run / "train.log").write_text(f"# grpo-sweep: {launch} (cwd /opt/MindSpeed-RL, from iteration 0)\nstep 1\n")
    how = commands(study, trial, tmp_path / "best_config.yaml")
    assert how.lines == ["cd /opt/MindSpeed-RL", launch]
    assert "as its train.log recorded it" in how.note


def test_the_exported_config_loads_in_grpo_train(tmp_path):
    """The command the report prints composes: grpo-train reads the exported YAML (``--cfg job`` prints the
    composed config and stops, no training)."""
    study = make_study(tmp_path)
    out = tmp_path / "report"
    write_report(study, out)
    exe = shutil.which("grpo-train", path=str(Path(sys.executable).parent)) or "grpo-train"
    run = subprocess.run([exe, "--config-path", str(out.resolve()), "--config-name", "best_config", "--cfg", "job"],
                         capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-2000:]
    composed = yaml.safe_load(run.stdout)
    assert composed["rl_config"]["clip_ratio"] == study.trials[5].params["rl_config.clip_ratio"]
    assert "save" not in composed["actor_config"] or composed["actor_config"]["save"] in (None, "")
