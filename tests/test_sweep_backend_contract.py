"""The backend seam: a backend is built once from the spec, checked before launch, and named nowhere else.

What a spec's backend cannot run is refused by ``grpo-sweep validate`` and ``run`` before anything is
written (exit 2, one line per problem), and a backend that cannot be imported is a one-line error too.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from sweep_helpers import cli_env, write_spec

from grpo.config import load_config
from grpo.errors import UserError
from grpo.sweep.backends import TrialBackend, backend_class, load_backend
from grpo.sweep.backends.embedded import EmbeddedBackend
from grpo.sweep.backends.mindspeed.backend import MindSpeedBackend
from grpo.sweep.spec.load import load_spec

REPO = Path(__file__).resolve().parents[1]


def test_builtin_backends_declare_what_the_driver_needs():
    cfg = load_config("grpo_trainer_tiny_cpu")
    embedded, mindspeed = EmbeddedBackend(), MindSpeedBackend()
    assert not embedded.plans_memory and not embedded.keeps_relative_paths
    assert mindspeed.plans_memory and mindspeed.keeps_relative_paths
    assert embedded.devices_held(embedded.resources(cfg)) == 0
    assert embedded.devices_held({"num_cpus": 1, "resources": {"NPU": 8}}) == 8
    assert mindspeed.devices_held(mindspeed.resources(cfg)) == cfg.rl_config.actor_resource.num_npus


def test_the_embedded_engine_refuses_what_it_cannot_train_before_launch():
    base = load_config("grpo_trainer_tiny_cpu")
    assert EmbeddedBackend().check(base) == []
    gae = load_config("grpo_trainer_tiny_cpu", ["rl_config.adv_estimator=gae"])
    (problem,) = EmbeddedBackend().check(gae)
    assert "rl_config.adv_estimator" in problem and "group_norm" in problem


def test_a_spec_the_embedded_engine_cannot_run_is_refused_by_validate_and_run(tmp_path):
    """Before: `adv_estimator: gae` passed the preflight and every trial failed (and was retried) in Ray."""
    spec = write_spec(tmp_path, overrides=["rl_config.adv_estimator=gae"], backend="embedded")
    for command in (["validate", str(spec)], [str(spec), "--no-report"]):
        done = subprocess.run([sys.executable, "-m", "grpo.cli", *command], cwd=tmp_path, env=cli_env(),
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 2, done.stderr
        assert "Traceback" not in done.stderr
        assert "rl_config.adv_estimator" in done.stderr
        assert "no point of the search space is feasible" not in done.stderr  # the fixed override's fault: it alone
    assert not (tmp_path / "studies").exists()


@pytest.mark.parametrize(("name", "says"), [
    ("no_such_module:Backend", "cannot import no_such_module"),
    ("sweep_test_backends:NoSuchBackend", "module sweep_test_backends has no NoSuchBackend"),
    ("sweep_test_backends:TrialFailed", "TrialFailed is not a subclass of grpo.sweep.backends.TrialBackend"),
])
def test_a_backend_that_cannot_be_loaded_is_a_one_line_error(tmp_path, name, says):
    spec = load_spec(write_spec(tmp_path, backend=name))
    with pytest.raises(UserError) as err:
        load_backend(spec)
    assert str(err.value) == f"{spec.path}: backend: {name}: {says}" or says in str(err.value)
    assert str(err.value).startswith(f"{spec.path}: backend: {name}: ") and "\n" not in str(err.value)
    done = subprocess.run([sys.executable, "-m", "grpo.cli", "validate", str(spec.path)], cwd=tmp_path,
                          env=cli_env(), capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "Traceback" not in done.stderr and says in done.stderr


def test_user_backends_are_built_from_the_spec_and_travel_whole():
    cls = backend_class("sweep_test_backends:CurveBackend")
    assert issubclass(cls, TrialBackend) and cls.__name__ == "CurveBackend"


def test_the_driver_and_preflight_name_no_backend():
    """The seam: only the backends (and the spec, whose default is ``embedded``) know which backends exist."""
    for name in ("run/driver", "run/admit", "run/live", "run/record", "run/stoppers", "run/snapshot",
                 "run/trial_builder", "run/preflight", "run/outcome", "execution/scheduler", "execution/worker",
                 "execution/seed_result", "study/store", "study/lease", "study/retry", "commands/progress",
                 "commands/handlers", "commands/layout_table"):
        path = REPO / "grpo" / "sweep" / f"{name}.py"
        text = path.read_text()
        for word in ('"mindspeed"', '"embedded"', "npu_slots", "GRPO_SWEEP_"):
            assert word not in text, f"{path.name} names {word}"


def test_launch_warnings_default_to_none_and_preflight_reports_them_without_refusing(tmp_path):
    """Node-level problems (what the machine running preflight lacks) are warnings, each once (issue 11)."""
    from grpo.sweep.run.preflight import preflight
    from grpo.sweep.spec.space import SearchSpace

    cfg = load_config("grpo_trainer_tiny_cpu")
    assert EmbeddedBackend().launch_warnings(cfg) == []

    class Away(EmbeddedBackend):
        def launch_warnings(self, cfg):
            return ["spec: somewhere: not on this machine"]

    spec = load_spec(write_spec(tmp_path, backend="embedded"))
    checks = preflight(spec, SearchSpace.from_spec(spec), Away(), no_plan=True)
    assert checks.warnings == ["spec: somewhere: not on this machine"]
    assert all(not problems for _, problems in checks.checked)

