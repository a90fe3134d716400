"""Bad input never gets past the door: one line naming the file and the key, exit 2, nothing written,
and quickly (YAML aliases counted, not expanded; search spaces counted, not enumerated)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from grpo.errors import UserError
from grpo.sweep.load import load_spec
from sweep_helpers import cli_env

GOOD = """\
study: s1
base: grpo_trainer_tiny_cpu
search:
  rl_config.clip_ratio: choice(0.1, 0.2)
objective: grpo/score/mean
"""
BOMB = "".join(f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]\n" if i else "l0: &l0 [x]\n" for i in range(10))


def write(tmp_path: Path, text: str | bytes) -> Path:
    path = tmp_path / "spec.yaml"
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    return path


def problems(path: Path) -> list[str]:
    started = time.monotonic()
    with pytest.raises(UserError) as err:
        load_spec(path)
    assert time.monotonic() - started < 10, "bad input must be refused within seconds"
    for line in err.value.problems:
        assert line.startswith(str(path)) and "\n" not in line
    return err.value.problems


CASES = {
    "duplicate top-level key": (GOOD + "study: s2\n", "key 'study' is written twice"),
    "duplicate nested key": (GOOD.replace("choice(0.1, 0.2)\n", "choice(0.1, 0.2)\n  rl_config.clip_ratio: choice(0.3)\n"),
                             "key 'rl_config.clip_ratio' is written twice"),
    "alias bomb": (GOOD + BOMB, "YAML aliases expand to more than 100,000 values"),
    "utf-16 file": (GOOD.encode("utf-16"), "the spec file is UTF-16 text; save it as UTF-8"),
    "latin-1 bytes": (GOOD.replace("s1", "s\xe9").encode("latin-1"), "the spec file is not UTF-8 text"),
    "study name with a newline": (GOOD.replace("study: s1", 'study: "s1\\nrm"'), "study: must use letters"),
    "address with a newline": (GOOD + 'cluster: {address: "auto\\n"}\n', "cluster.address: must be local"),
    "in-memory sqlite": (GOOD + "storage: 'sqlite:///:memory:'\n", "storage: must name a file or a database"),
    "empty journal path": (GOOD + "storage: 'journal:'\n", "storage: must name a file or a database"),
    "override value out of range": (GOOD + "overrides: [generate_config.sampling_config.top_p=2]\n",
                                    "overrides[0]: generate_config.sampling_config.top_p: must be <= 1"),
    "override breaking a rule": (GOOD.replace("  rl_config.clip_ratio: choice(0.1, 0.2)\n",
                                              "  rl_config.entropy_coeff: choice(0.0, 0.1)\n")
                                 + "overrides: [rl_config.n_samples_per_prompt=1]\n", ": overrides"),
    "huge grid": (GOOD.replace("choice(0.1, 0.2)", "range(1, 1000000000000)").replace(
        "rl_config.clip_ratio", "megatron_training.train_iters") + "sampler: grid\n",
        "grid over 1,000,000,000,000 points is more than grid sampling can enumerate"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_spec_is_one_line_error(tmp_path, case):
    text, says = CASES[case]
    lines = problems(write(tmp_path, text))
    assert any(says in line for line in lines), lines


def test_a_huge_discrete_space_is_counted_not_enumerated(tmp_path):
    text = GOOD.replace("rl_config.clip_ratio: choice(0.1, 0.2)", "megatron_training.train_iters: range(1, 1000000000000)")
    started = time.monotonic()
    spec = load_spec(write(tmp_path, text))
    assert time.monotonic() - started < 10 and spec.trials == 20


def test_read_only_commands_write_nothing_for_a_study_never_run(tmp_path):
    path = write(tmp_path, GOOD)
    for command in ("status", "best", "report", "export"):
        done = subprocess.run([sys.executable, "-m", "grpo.cli", command, str(path)], cwd=tmp_path,
                              env=cli_env(), capture_output=True, text=True, timeout=120)
        assert done.returncode == 2 and "has not been run yet" in done.stderr, (command, done.stderr)
        assert "Traceback" not in done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["spec.yaml"]


def test_a_storage_password_is_never_shown_or_stored(tmp_path):
    path = write(tmp_path, GOOD + "storage: 'postgresql://grpo:s3cret@127.0.0.1:1/sweeps'\n")
    spec = load_spec(path)
    assert spec.storage_label() == "postgresql://grpo:***@127.0.0.1:1/sweeps"
    assert "s3cret" not in str(spec.to_dict())  # what a study stores as its `spec` attr
    done = subprocess.run([sys.executable, "-m", "grpo.cli", "status", str(path)], cwd=tmp_path, env=cli_env(),
                          capture_output=True, text=True, timeout=120)
    assert "s3cret" not in done.stdout + done.stderr and done.returncode == 2, done.stderr
