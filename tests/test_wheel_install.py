"""Installed from a wheel, outside any checkout, the shipped configs and example sweeps resolve.

The wheel is built from a copy of the sources the build reads (pyproject.toml, README.md, grpo/, configs/,
sweeps/), so the checkout gets no build/ folder; it is installed with ``pip install --target`` and run with
only that folder on PYTHONPATH from an empty directory (the project's dependencies come from this venv).
The subprocess checks that it imported the installed copy, not the checkout.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

# One interpreter for every check (imports are most of the cost): each line of output is one JSON result.
CHECKS = r"""
import contextlib, io, json, os, sys
import grpo
from grpo.cli import sweep_main

def run(*argv):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = sweep_main(list(argv))
    print(json.dumps({"argv": argv, "code": code, "out": out.getvalue(), "err": err.getvalue()}))

print(json.dumps({"grpo": grpo.__file__}))
run("validate", "grpo_trainer_tiny_cpu", "layout=tp1_pp1_cpu", "--section", "rl_config")
run("validate", "quickstart")
run("validate", "my_sweep.yaml")
run("validate", "sweeps/quickstart.yaml")
run("validate", "grpo_trainer_nope")
"""

MY_SWEEP = """\
study: mine
base: grpo_trainer_tiny_cpu
overrides: [megatron_training.train_iters=4, layout=tp1_pp1_cpu]
search:
  rl_config.clip_ratio: choice(0.1, 0.2)
objective: {metric: grpo/score/mean, direction: maximize}
trials: 2
"""


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """The wheel built from this checkout, installed into a folder of its own; returns that folder."""
    root = tmp_path_factory.mktemp("wheel")
    src = root / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, src / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in ("grpo", "configs", "sweeps"):
        shutil.copytree(REPO / name, src / name, symlinks=True, ignore=ignore)  # grpo/_data links stay links
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-input", "-q"]
    env = {**os.environ, "PIP_NO_INDEX": "1"}  # nothing is downloaded
    subprocess.run(
        [*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", str(root / "dist"), str(src)],
        check=True,
        capture_output=True,
        cwd=root,
        env=env,
        timeout=120,
    )
    (wheel,) = (root / "dist").glob("grpo_sweep-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "grpo/_data/configs/grpo_trainer_tiny_cpu.yaml" in names and "grpo/_data/sweeps/quickstart.yaml" in names
    assert any(n.startswith("grpo/_data/warm_start/") and n.endswith(".safetensors") for n in names)
    assert "grpo/_data/warm_start/SHA256SUMS" in names  # the shipped base policy, the same bytes everywhere
    site = root / "site"
    subprocess.run(
        [*pip, "install", "--no-deps", "--target", str(site), str(wheel)],
        check=True,
        capture_output=True,
        cwd=root,
        env=env,
        timeout=120,
    )
    assert not (site / "grpo" / "_data" / "configs").is_symlink()  # the files themselves
    return site


def test_shipped_configs_and_sweeps_resolve_from_an_installed_wheel(installed, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "my_sweep.yaml").write_text(MY_SWEEP)
    env = {k: v for k, v in os.environ.items() if k not in ("GRPO_CONFIG_DIR", "PYTHONPATH")}
    env["PYTHONPATH"] = str(installed)
    proc = subprocess.run(
        [sys.executable, "-c", CHECKS], capture_output=True, text=True, timeout=180, cwd=elsewhere, env=env
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    first, *results = (json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{"))
    assert Path(first["grpo"]).resolve().is_relative_to(installed.resolve())  # the wheel's copy, not the checkout
    by_target = {r["argv"][1]: r for r in results}

    config = by_target["grpo_trainer_tiny_cpu"]
    assert config["code"] == 0, config["err"]
    assert "grpo/_data/configs/grpo_trainer_tiny_cpu.yaml: valid (rl_config)" in config["out"]
    assert "clip_ratio: 0.2" in config["out"]

    for name in ("quickstart", "my_sweep.yaml"):  # a shipped example by name; the user's own spec on it
        assert by_target[name]["code"] == 0, by_target[name]["err"]
    assert "quickstart: base grpo_trainer_tiny_cpu" in by_target["quickstart"]["out"]
    assert "mine: base grpo_trainer_tiny_cpu" in by_target["my_sweep.yaml"]["out"]

    # The checkout's spelling of the example says what works instead; an unknown name lists the shipped ones.
    missing = by_target["sweeps/quickstart.yaml"]
    assert (missing["code"], missing["err"]) == (
        2,
        "error: sweeps/quickstart.yaml: no such spec file (the example "
        "sweep shipped with grpo-sweep goes by its name: quickstart)\n",
    )
    nope = by_target["grpo_trainer_nope"]
    assert nope["code"] == 2 and nope["err"].count("\n") == 1
    assert "(available: grpo_trainer_gpu, grpo_trainer_qwen25_7b_A3, grpo_trainer_tiny_cpu)" in nope["err"]
    assert sorted(p.name for p in elsewhere.iterdir()) == ["my_sweep.yaml"]  # validate writes nothing
