"""backend verl's preflight against verl 0.9.1's real code: its ppo_trainer config composed by Hydra, its
``validate_config`` and ``omega_conf_to_dataclass``, on a CPU. A wrong value is one line naming the grpo-sweep key
(exit 2, no traceback); a spec that does not use verl never imports it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from grpo.config import load_config
from grpo.sweep.backends import load_backend
from grpo.sweep.backends.verl import _render, _validate
from grpo.sweep.backends.verl.backend import VerlBackend
from grpo.sweep.spec.load import load_spec
from grpo.sweep.spec.space import SearchSpace

pytest.importorskip("verl")
REPO = Path(__file__).resolve().parents[1]
TINY = "grpo_trainer_tiny_cpu"


def test_every_rendered_key_is_a_key_of_verls_own_config():
    """No override adds a key (Hydra would refuse it: verl's config has no '+' keys of ours), and verl reads back
    the values we meant, types included."""
    cfg = load_config(TINY, ["rl_config.use_kl_in_reward=true", "engine.eval_every=5"])
    settings = {**_render.verl_settings(cfg), **_render.launch_settings(cfg)}
    base = _validate.compose()
    for key in settings:
        parent, _, leaf = key.rpartition(".")
        assert leaf in OmegaConf.select(base, parent).keys(), key  # present (rollout.name is there as verl's ???)
    composed = _validate.validate(_render.trial_overrides(cfg))
    assert composed.algorithm.adv_estimator == "grpo" and composed.algorithm.use_kl_in_reward is True
    assert composed.actor_rollout_ref.actor.use_kl_loss is False
    assert composed.actor_rollout_ref.rollout.name == "vllm"
    assert composed.actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu == cfg.actor_config.micro_batch_size
    assert list(composed.actor_rollout_ref.actor.optim.betas) == [0.9, 0.99]
    assert composed.actor_rollout_ref.actor.clip_ratio_low == composed.actor_rollout_ref.actor.clip_ratio_high == 0.2
    assert composed.trainer.n_gpus_per_node == 1 and composed.trainer.test_freq == 5


def test_copy_and_override_is_hydras_full_compose():
    """The preflight composes verl's base once and applies each trial's overrides with Hydra's own override
    step; that is what a full compose with the overrides (main_ppo's @hydra.main) gives."""
    overrides = _render.trial_overrides(load_config(TINY, ["actor_config.lr=3e-6", "rl_config.clip_ratio=0.28"]))
    full = OmegaConf.to_container(_validate.compose(overrides))
    assert OmegaConf.to_container(_validate.apply(overrides)) == full


def test_verls_defaults_alone_fail_its_own_validation():
    """Why the renderer sets what it sets: verl's ppo_trainer defaults leave the micro batches None."""
    with pytest.raises(Exception) as err:
        _validate.validate(["actor_rollout_ref.rollout.name=vllm"])
    assert "micro_batch_size" in str(err.value)


def test_a_value_verl_refuses_is_one_line_naming_the_key():
    """MindSpeed-RL allows lr_decay_style linear; verl's FSDP optimizer asserts constant or cosine."""
    (line,) = VerlBackend().check(load_config(TINY, ["actor_config.lr_decay_style=linear"]))
    assert line == (
        f"configs/{TINY}.yaml: actor_config.lr_decay_style: verl refuses "
        "actor_rollout_ref.actor.optim.lr_scheduler_type=linear: "
        'optimizer.py: assert self.lr_scheduler_type in ["constant", "cosine"]'
    )
    assert VerlBackend().check(load_config(TINY, ["actor_config.lr_decay_style=cosine"])) == []


@pytest.mark.parametrize(("extra", "key"), [
    (["trainer.n_gpus_per_node=3"], "rl_config.actor_resource.num_npus"),  # real_train_batch_size % n_gpus
    (["data.train_batch_size=8"], "rl_config.mini_batch_size"),  # train_batch_size >= ppo_mini_batch_size
])  # fmt: skip
def test_verls_own_messages_map_to_the_grpo_sweep_key(extra, key):
    overrides = _render.trial_overrides(load_config(TINY)) + extra
    with pytest.raises(Exception) as err:
        _validate.validate(overrides)
    line = _validate.explain(err.value, dict(o.split("=", 1) for o in overrides), "s.yaml")
    assert line.startswith(f"s.yaml: {key}: verl refuses") and "\n" not in line


def test_unknown_verl_key_is_hydras_refusal():
    with pytest.raises(Exception, match="Could not override 'actor_rollout_ref.actor.clip_ratoi'"):
        _validate.apply(["actor_rollout_ref.actor.clip_ratoi=0.1"])


def test_refused_and_no_effect_keys_before_verl():
    backend = VerlBackend()
    (line,) = backend.check(load_config(TINY, ["rl_config.adv_estimator=gae"]))
    assert "rl_config.adv_estimator" in line and "backend verl runs only 'group_norm'" in line
    (searched,) = backend.check_search(["engine.warm_start_steps"], "s.yaml")
    assert searched.startswith("s.yaml: search.engine.warm_start_steps: cannot change a verl run")


def test_the_shipped_study_validates_through_verl():
    spec = load_spec(REPO / "sweeps" / "verl_study.yaml")
    backend = load_backend(spec)
    assert isinstance(backend, VerlBackend)
    space = SearchSpace.from_spec(spec)
    from grpo.sweep.run.preflight import preflight

    checked = preflight(spec, space, backend, no_plan=True)
    assert checked.checked and not checked.checked[-1][1]
    assert any("tokenizer_name_or_path" in w for w in checked.warnings)  # the model lives where trials launch


def test_validate_cli_wrong_value_exit_2_one_line(tmp_path):
    spec = tmp_path / "bad.yaml"
    spec.write_text(
        "study: bad\nbase: grpo_trainer_tiny_cpu\nbackend: verl\n"
        "overrides: [actor_config.lr_decay_style=linear]\n"
        "search: {rl_config.clip_ratio: choice(0.2)}\nobjective: grpo/score/mean\n"
    )
    done = subprocess.run([sys.executable, "-m", "grpo.cli", "validate", str(spec)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=180)  # fmt: skip
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert any("actor_config.lr_decay_style: verl refuses" in line for line in errors), done.stderr


def test_preflight_without_verl_in_the_spec_never_imports_it():
    code = (
        "import sys; from grpo.sweep.spec.load import load_spec; from grpo.sweep.backends import load_backend; "
        "from grpo.config import load_config; b = load_backend(load_spec('sweeps/trl_study.yaml')); "
        "b.check(load_config('grpo_trainer_tiny_cpu')); print('verl' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.stdout.strip() == "False", done.stderr


def test_the_spec_verl_section_configures_the_backend_and_its_overrides_meet_verl(tmp_path):
    spec_path = tmp_path / "v.yaml"
    spec_path.write_text(
        "study: v\nbase: grpo_trainer_tiny_cpu\nbackend: verl\n"
        "search: {rl_config.clip_ratio: choice(0.2)}\nobjective: grpo/score/mean\n"
        "verl: {python: /opt/verl/bin/python, address: 'http://head:8265', gpus_per_node: 4, env: {A: 1},\n"
        "       overrides: [actor_rollout_ref.actor.clip_ratoi=0.1]}\n"
    )
    backend = load_backend(load_spec(spec_path))
    assert isinstance(backend, VerlBackend)
    assert (backend.python, backend.address, backend.gpus_per_node, backend.env) == (
        "/opt/verl/bin/python", "http://head:8265", 4, {"A": "1"},
    )  # fmt: skip
    # verl.overrides go through verl's own composition with the trial's: a key verl does not have is refused
    (line,) = backend.check(load_config(TINY, []))
    assert "actor_rollout_ref.actor.clip_ratoi" in line


@pytest.mark.parametrize(
    ("section", "said"),
    [
        ("backend: embedded\nverl: {gpus_per_node: 4}", "verl.gpus_per_node: only backend verl reads verl: (backend is embedded)"),
        ("backend: verl\nverl: {overrides: [trainer.total_epochs]}", "verl.overrides: trainer.total_epochs: not a Hydra override"),
        ("backend: verl\nverl: {gpus_per_node: 0}", "verl.gpus_per_node"),
    ],
)
def test_a_wrong_verl_setting_is_one_line_naming_it(tmp_path, section, said):
    spec_path = tmp_path / "v.yaml"
    spec_path.write_text(
        f"study: v\nbase: grpo_trainer_tiny_cpu\n{section}\n"
        "search: {rl_config.clip_ratio: choice(0.2)}\nobjective: grpo/score/mean\n"
    )
    from grpo.errors import UserError

    with pytest.raises(UserError) as err:
        load_spec(spec_path)
    assert str(err.value).startswith(str(spec_path)) and said in str(err.value)
