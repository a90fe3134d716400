"""One guarded YAML loader (grpo._yaml) behind every YAML file a user can hand grpo-sweep, one test per entry
point: the guard itself, `grpo-sweep validate CONFIG` (Hydra's files pre-checked), `grpo-train`, the report's
recorded trial config, MindSpeed-RL's runtime env; and Optuna's warnings said once, as a spec warning.

The bomb: 10 levels of 9 aliases each, 9**9 (387 million) values once expanded; PyYAML shares them (cheap),
Hydra's OmegaConf expands them (until killed, before the guard).
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from grpo._yaml import MAX_YAML_VALUES, parse_yaml_text, read_yaml
from grpo.errors import UserError
from sweep_helpers import REPO, cli_env, run_cli

BOMB = "".join(f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]\n" if i else "l0: &l0 [x]\n" for i in range(10))
TINY = (REPO / "configs" / "grpo_trainer_tiny_cpu.yaml").read_text()


def run_module(module: str, args: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", module, *args], cwd=cwd, env={**cli_env(), **env},
                          capture_output=True, text=True, timeout=180)


def one_line(call, *args, **kwargs) -> str:
    started = time.monotonic()
    with pytest.raises(UserError) as err:
        call(*args, **kwargs)
    assert time.monotonic() - started < 10, "the guard took seconds"
    assert len(err.value.problems) == 1 and "\n" not in str(err.value)
    return str(err.value)


# ------------------------------------------------------------------------------------------ the guard
@pytest.mark.parametrize(("content", "expect"), [
    (TINY + BOMB, f"YAML aliases expand to more than {MAX_YAML_VALUES:,} values"),
    (TINY + "x: " + "[" * 5000 + "]" * 5000 + "\n", "YAML nested too deeply"),
    (TINY + "x:\n  " + "- " * 3000 + "a\n", "YAML nested too deeply"),  # block style: no brackets to count
    ("a: 1\na: 2\n", "key 'a' is written twice"),
    (TINY.encode("utf-16"), "the config file is UTF-16 text; save it as UTF-8"),
    ("caf\xe9: 1\n".encode("latin-1"), "the config file is not UTF-8 text"),
    (b"a: 1\n" + b"#" * 1_500_000, "the config file is 1.5 MB"),
    ("a: !!python/object/apply:os.system [echo hi]\n", "YAML syntax error"),
])
def test_the_guard_refuses_in_one_line_naming_the_file(tmp_path, content, expect):
    path = tmp_path / "c.yaml"
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    message = one_line(read_yaml, path, "c.yaml", kind="config")
    assert message.startswith("c.yaml") and expect in message, message


def test_deep_nesting_is_refused_whatever_the_recursion_limit(tmp_path):
    # Libraries (sympy, torch) raise the recursion limit; PyYAML then loads 3000 levels without a RecursionError,
    # which once made this guard depend on which tests ran before it.
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(100_000)
    try:
        path = tmp_path / "c.yaml"
        path.write_text(TINY + "x:\n  " + "- " * 3000 + "a\n")
        assert "YAML nested too deeply" in one_line(read_yaml, path, "c.yaml", kind="config")
    finally:
        sys.setrecursionlimit(old)


def test_the_guard_says_a_folder_is_a_folder(tmp_path):
    assert one_line(read_yaml, tmp_path, "somewhere", kind="config") == "somewhere: is a folder, not a config file"
    assert one_line(read_yaml, tmp_path / "nope.yaml", "nope.yaml") == "nope.yaml: no such spec file"


def test_the_fast_guard_refuses_the_same_bomb_and_duplicates():
    assert "YAML aliases expand" in one_line(parse_yaml_text, BOMB, "t", fast=True)
    assert "key 'a' is written twice" in one_line(parse_yaml_text, "a: 1\na: 2\n", "t", fast=True)


# ------------------------------------------------------------------------------------- entry points
def test_validate_a_config_path_with_a_bomb_exits_2_in_seconds(tmp_path):
    (tmp_path / "cfg.yaml").write_text(TINY + BOMB)  # ran until killed before issue 27
    done = run_cli(["validate", "cfg.yaml"], cwd=tmp_path, timeout=60)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.strip() == "error: cfg.yaml: YAML aliases expand to more than 100,000 values; write them out"


def test_load_config_prechecks_every_file_hydra_composes(tmp_path):
    from grpo.config import load_config

    (tmp_path / "main.yaml").write_text("defaults:\n  - extra\n  - _self_\n")
    (tmp_path / "extra.yaml").write_text(BOMB)  # a sibling in the defaults list: Hydra would expand it
    assert "extra.yaml: YAML aliases expand" in one_line(load_config, tmp_path / "main.yaml")
    (tmp_path / "base.yaml").write_text(TINY)
    (tmp_path / "algo").mkdir()
    (tmp_path / "algo" / "evil.yaml").write_text(BOMB)  # a group only an override names
    assert "algo/evil.yaml: YAML aliases expand" in one_line(load_config, tmp_path / "base.yaml", ["+algo=evil"])


def test_grpo_train_refuses_a_bomb_config_in_one_line(tmp_path):
    (tmp_path / "bomb.yaml").write_text(TINY + BOMB)
    done = run_module("grpo.engine.cli", ["--config-path", str(tmp_path), "--config-name", "bomb"], tmp_path)
    assert done.returncode != 0 and "Traceback" not in done.stderr, done.stderr
    assert "bomb.yaml: YAML aliases expand to more than 100,000 values" in done.stderr


def test_the_report_reads_a_recorded_config_through_the_guard(tmp_path):
    from grpo.report.trial_config import recorded_config

    trial_dir = tmp_path / "trials" / "0"
    trial_dir.mkdir(parents=True)
    (trial_dir / "config.yaml").write_text("a: 1\n" + BOMB)  # trial storage is input like any other
    trial = SimpleNamespace(user_attrs={"config_file": {"path": "trials/0/config.yaml", "sha256": "0"},
                                        "trial_dir": str(trial_dir)})
    started = time.monotonic()
    assert recorded_config(trial) is None  # type: ignore[arg-type]
    assert time.monotonic() - started < 5
    (trial_dir / "config.yaml").write_text("a: 1\n")
    assert recorded_config(trial).config == {"a": 1}  # type: ignore[arg-type,union-attr]


def test_mindspeeds_runtime_env_goes_through_the_guard(tmp_path):
    from grpo.sweep.backends.mindspeed._render import runtime_env_for
    from grpo.sweep.spec.models import MindSpeedSpec
    from mindspeed_helpers import config

    bad = tmp_path / "env.yaml"
    bad.write_text("env_vars: {A: '1'}\n" + BOMB)
    cfg = config(f"+rl_config.runtime_env_path={bad}")
    message = one_line(runtime_env_for, cfg, MindSpeedSpec(path=str(tmp_path)), 0)
    assert message.startswith(str(bad)) and "YAML aliases expand" in message


def test_a_deprecated_sampler_option_is_one_warning_line_naming_it(tmp_path):
    spec = (
        "study: s1\nbase: grpo_trainer_tiny_cpu\nsearch:\n  rl_config.clip_ratio: interval(0.1, 0.3)\n"
        "objective: grpo/score/mean\nsampler: {name: tpe, options: {consider_endpoints: true}}\n"
    )
    (tmp_path / "spec.yaml").write_text(spec)
    done = run_module("grpo.cli", ["validate", "spec.yaml"], tmp_path, COLUMNS="400")
    assert done.returncode == 0, done.stderr
    assert "FutureWarning" not in done.stdout + done.stderr and "optuna_warn" not in done.stderr
    warned = [ln for ln in (done.stdout + done.stderr).splitlines() if "consider_endpoints" in ln]
    assert len(warned) == 1 and warned[0].startswith("warning: spec.yaml: sampler.options.consider_endpoints: ")


def test_nothing_in_grpo_reads_yaml_around_the_guard():
    """Every yaml.load/safe_load in grpo/ is the guard's (a new reader must go through grpo._yaml)."""
    import re

    readers = []
    for path in sorted((REPO / "grpo").rglob("*.py")):
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if re.search(r"\byaml\.(safe_load|load|full_load|unsafe_load)\(|OmegaConf\.load\(", line):
                readers.append(f"{path.relative_to(REPO)}:{number}")
    assert all(r.startswith("grpo/_yaml.py:") for r in readers), readers
    assert Path(REPO / "grpo" / "_yaml.py").is_file()
