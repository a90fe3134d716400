"""grpo-sweep installs into MindSpeed-RL's own environment: the `mindspeed` extra, CI's 3.10 stage (.ci/setup310)
and docs/npu.md name MindSpeed-RL's pins (its requirements.txt) for the packages both use, and the main
dependency ranges admit them. Against the real requirements.txt of the MindSpeed-RL checkout or bare mirror that
$MINDSPEED_RL_SOURCE names (https://gitee.com/ascend/MindSpeed-RL); without it, the pins below are checked alone."""

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10 (MindSpeed-RL's): tomli, pytest's own dependency there
    import tomli as tomllib

REPO = Path(__file__).resolve().parents[1]
CHECKOUTS = [os.environ.get("MINDSPEED_RL_SOURCE", "")]  # only from the environment: no guessed place
# MindSpeed-RL's requirements.txt at master 05a90d7, the lines naming a package grpo-sweep also depends on
# (lines 3, 5, 8, 13, 23, 24).
SHARED = {
    "ray": "2.54.0",
    "hydra-core": "1.3.2",
    "cloudpickle": "3.1.1",
    "numpy": "1.26.4",
    "transformers": "4.57.1",
    "click": "8.2.1",
}
# Its install guide (docs/zh/install_guide.md at 05a90d7, lines 115-116): `torch-2.7.1-cp310-*.whl`,
# `torch_npu-2.7.1.*.whl` (a post release such as 2.7.1.post1).
TORCH = {"torch": "2.7.1", "torch-npu": "2.7.1"}

PROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]


def pins(lines):
    """{name: version} of the ``name==version`` requirements among ``lines``."""
    out = {}
    for line in lines:
        req = Requirement(line)
        exact = [s.version for s in req.specifier if s.operator == "=="]
        if exact:
            out[req.name.lower().replace("_", "-")] = exact[0]
    return out


def requirements_txt():
    """MindSpeed-RL's requirements.txt from a work tree or a bare git mirror; None when there is neither."""
    for place in filter(None, CHECKOUTS):
        path = Path(place)
        if (path / "requirements.txt").is_file():
            return (path / "requirements.txt").read_text()
        if (path / "HEAD").is_file():
            done = subprocess.run(
                ["git", "-C", str(path), "show", "HEAD:requirements.txt"], capture_output=True, text=True
            )
            if done.returncode == 0:
                return done.stdout
    return None


def test_the_recorded_pins_are_mindspeed_rls_own():
    text = requirements_txt()
    if text is None:
        pytest.skip("no MindSpeed-RL checkout here (set MINDSPEED_RL_SOURCE)")
    theirs = pins(line.split("#")[0].strip() for line in text.splitlines() if line.split("#")[0].strip())
    assert {name: theirs.get(name) for name in SHARED} == SHARED  # MindSpeed-RL moved a pin: update all three


def test_the_mindspeed_extra_is_those_pins_and_the_ascend_torch():
    extra = PROJECT["optional-dependencies"]["mindspeed"]
    assert pins(extra) == {**SHARED, **{"torch": TORCH["torch"]}}
    npu = next(Requirement(r) for r in extra if Requirement(r).name == "torch-npu")
    assert npu.specifier.contains(TORCH["torch-npu"]) and npu.specifier.contains("2.7.1.post1")
    # source installs in MindSpeed-RL's guide: a PyPI pin would replace them
    assert not {Requirement(r).name for r in extra} & {"vllm", "vllm-ascend", "megatron-core"}


def test_the_main_dependencies_admit_mindspeed_rls_pins():
    wanted = {**SHARED, **TORCH}
    for line in PROJECT["dependencies"]:
        req = Requirement(line)
        if req.name in wanted:
            assert req.specifier.contains(wanted[req.name]), (line, wanted[req.name])
    assert {Requirement(r).name for r in PROJECT["dependencies"]} >= {"ray", "hydra-core", "torch"}
    assert "hydra-ray-launcher" not in {Requirement(r).name for r in PROJECT["dependencies"]}  # cloudpickle<3
    assert Requirement("x" + PROJECT["requires-python"]).specifier.contains("3.10.13")


def test_ci_3_10_stage_installs_the_same_pins():
    script = (REPO / ".ci" / "setup310").read_text()
    found = re.search(r"^PINS=\((.*?)\)$", script, re.M | re.S)
    assert found is not None
    assert pins(shlex.split(found.group(1))) == SHARED
