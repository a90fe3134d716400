"""verl-native overrides (the spec's ``verl.overrides``, issue 42 item 2): one that pins a key the search varies, or
sets a verl key a grpo-sweep key already sets, is refused in one line naming that key; a key verl refuses is
named by the spec's line; a native key nothing else sets reaches the config verl resolves."""

from __future__ import annotations

import subprocess
import sys

import pytest

from grpo.config import load_config
from grpo.sweep.backends import load_backend
from grpo.sweep.backends.verl import _validate
from grpo.sweep.spec.load import load_spec

pytest.importorskip("verl")
TINY = "grpo_trainer_tiny_cpu"


def _spec(tmp_path, overrides: list[str], search: str = "rl_config.clip_ratio: choice(0.2, 0.3)"):
    path = tmp_path / "v.yaml"
    listed = "".join(f"\n    - {o}" for o in overrides)
    path.write_text(
        f"study: v\nbase: {TINY}\nbackend: verl\nsearch:\n  {search}\nobjective: grpo/score/mean\n"
        + (f"verl:\n  overrides:{listed}\n" if overrides else "")
    )
    spec = load_spec(path)
    return spec, load_backend(spec), path


def test_an_override_pinning_a_searched_key_is_refused(tmp_path):
    spec, backend, path = _spec(tmp_path, ["actor_rollout_ref.rollout.temperature=0.7"],
                                "generate_config.sampling_config.temperature: choice(0.7, 1.0)")  # fmt: skip
    (line,) = backend.check_search(["generate_config.sampling_config.temperature"], spec.source)
    assert line == (
        f"{path}:9: verl.overrides[0]: actor_rollout_ref.rollout.temperature pins what "
        "search.generate_config.sampling_config.temperature varies (the search would change nothing); remove the "
        "override"
    )


def test_an_override_of_a_mapped_key_names_the_key_to_set(tmp_path):
    _, backend, path = _spec(tmp_path, ["actor_rollout_ref.actor.entropy_coeff=0.01", "data.train_files=x.parquet"])
    lines = backend.check(load_config(TINY))
    assert lines == [
        f"{path}:9: verl.overrides[0]: actor_rollout_ref.actor.entropy_coeff is set from rl_config.entropy_coeff; "
        "set that key instead (this override would silently replace its value)",
        f"{path}:10: verl.overrides[1]: data.train_files is set from megatron_training.data_path; set that key "
        "instead (this override would silently replace its value)",
    ]


def test_a_launch_key_is_refused(tmp_path):
    _, backend, path = _spec(tmp_path, ["trainer.experiment_name=mine"])
    (line,) = backend.check(load_config(TINY))
    assert (
        line
        == f"{path}:9: verl.overrides[0]: trainer.experiment_name is set by backend verl at launch from the trial's run"
    )


def test_an_override_verl_refuses_names_its_spec_line(tmp_path):
    _, backend, path = _spec(tmp_path, ["actor_rollout_ref.rollout.enforce_eager=true",
                                        "actor_rollout_ref.rollout.free_cache_engin=true"])  # fmt: skip
    (line,) = backend.check(load_config(TINY))
    assert line.startswith(
        f"{path}:10: verl.overrides[1]: verl refuses actor_rollout_ref.rollout.free_cache_engin=true: "
    )
    assert "Key 'free_cache_engin' is not in struct" in line
    assert "configs/" not in line


def test_a_native_key_reaches_what_verl_resolves(tmp_path):
    _, backend, _ = _spec(tmp_path, ["actor_rollout_ref.rollout.enforce_eager=true"])
    cfg = load_config(TINY)
    assert backend.check(cfg) == []
    composed = _validate.validate(backend.launch_overrides(cfg, tmp_path / "run").overrides)
    assert composed.actor_rollout_ref.rollout.enforce_eager is True


def test_validate_cli_refuses_a_pinned_searched_key(tmp_path):
    spec, _, path = _spec(tmp_path, ["actor_rollout_ref.rollout.temperature=0.7"],
                          "generate_config.sampling_config.temperature: choice(0.7, 1.0)")  # fmt: skip
    done = subprocess.run([sys.executable, "-m", "grpo.cli", "validate", str(path)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=180)  # fmt: skip
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert f"{path}:9: verl.overrides[0]: actor_rollout_ref.rollout.temperature pins what" in done.stderr


def test_a_searched_verl_key_validates_and_reaches_what_verl_resolves(tmp_path):
    """search: verl.<path> is a key of the trial's config (its verl section), rendered after the mapped keys."""
    spec, backend, path = _spec(tmp_path, [], "verl.actor_rollout_ref.rollout.enforce_eager: choice(true, false)")
    from grpo.sweep.spec.space import SearchSpace

    assert SearchSpace.from_spec(spec).keys == ["verl.actor_rollout_ref.rollout.enforce_eager"]
    cfg = load_config(TINY, ["verl.actor_rollout_ref.rollout.enforce_eager=true"])
    assert backend.check(cfg) == []
    composed = _validate.validate(backend.launch_overrides(cfg, tmp_path / "run").overrides)
    assert composed.actor_rollout_ref.rollout.enforce_eager is True
    done = subprocess.run([sys.executable, "-m", "grpo.cli", "validate", str(path)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=180)  # fmt: skip
    assert done.returncode == 0, done.stderr


def test_a_verl_key_a_mapped_key_sets_is_refused_naming_it(tmp_path):
    _, backend, _ = _spec(tmp_path, [])
    (line,) = backend.check(load_config(TINY, ["verl.actor_rollout_ref.actor.entropy_coeff=0.01"]))
    assert line == (
        f"configs/{TINY}.yaml: verl.actor_rollout_ref.actor.entropy_coeff: set from rl_config.entropy_coeff; set "
        "that key instead"
    )


def test_a_verl_key_verl_refuses_is_named(tmp_path):
    _, backend, _ = _spec(tmp_path, [])
    (line,) = backend.check(load_config(TINY, ["verl.actor_rollout_ref.rollout.free_cache_engin=true"]))
    assert line.startswith(
        f"configs/{TINY}.yaml: verl.actor_rollout_ref.rollout.free_cache_engin: verl refuses "
        "actor_rollout_ref.rollout.free_cache_engin=true: "
    )


def test_an_override_pinning_a_searched_verl_key_is_refused(tmp_path):
    spec, backend, path = _spec(tmp_path, ["actor_rollout_ref.rollout.enforce_eager=true"],
                                "verl.actor_rollout_ref.rollout.enforce_eager: choice(true, false)")  # fmt: skip
    (line,) = backend.check_search(["verl.actor_rollout_ref.rollout.enforce_eager"], spec.source)
    assert line.startswith(f"{path}:9: verl.overrides[0]: actor_rollout_ref.rollout.enforce_eager pins what "
                           "search.verl.actor_rollout_ref.rollout.enforce_eager varies")  # fmt: skip


def test_every_other_backend_refuses_verl_keys():
    from grpo.engine.check import check_config
    from grpo.sweep.backends.trl.coverage import KEYS

    cfg = load_config(TINY, ["verl.actor_rollout_ref.rollout.enforce_eager=true"])
    assert [p for p in check_config(cfg) if "verl" in p] == [
        f"configs/{TINY}.yaml: verl.actor_rollout_ref: backend verl's own setting; the embedded engine has none"
    ]
    (line,) = KEYS.refusals(cfg, "s.yaml")
    assert line.startswith("s.yaml: verl: ") and "backend trl refuses it" in line
