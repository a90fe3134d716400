"""MindSpeed-RL's merge of Megatron sections, and the long tail of its keys.

MindSpeed-RL builds the actor's Megatron config from the model file, megatron_training and actor_config
(later wins), so any Megatron key is legal in any of them; grpo-sweep moves a first-class key to the
section that holds it (grpo/config/canonical.py). Every other MindSpeed-RL key is a long-tail field:
accepted, typed, rendered back exactly as written, and never rendered when unset.
"""

from __future__ import annotations

import pytest
import yaml

from grpo.config import GRPOConfig, config_from_dict, load_config, render_mindspeed, render_mindspeed_model
from grpo.config.canonical import canonicalize
from grpo.config.schema import KEY_HOMES, MEGATRON_DEFAULTS, ActorConfig, GenerateConfig, MegatronTrainingConfig
from grpo.config.schema import ModelConfig, RLConfig
from grpo.errors import UserError

BASE = "grpo_trainer_qwen25_7b_A3"
SOURCE = "configs/grpo_trainer_qwen25_7b_A3.yaml"


def problems(overrides: list[str]) -> list[str]:
    with pytest.raises(UserError) as info:
        load_config(BASE, overrides)
    return info.value.problems


def rendered(cfg: GRPOConfig) -> tuple[dict, dict]:
    name, text = render_mindspeed_model(cfg)
    return yaml.safe_load(render_mindspeed(cfg)), yaml.safe_load(text)[name]


# ------------------------------------------------------------------------------------------- the merge
def test_a_model_key_in_actor_config_overrides_the_model_file():
    # As MindSpeed-RL's Qwen3-235B recipe does (actor_config.num_layers: 96 with two noop layers).
    cfg = load_config(BASE, ["actor_config.num_layers=32"])
    assert cfg.model_arch.num_layers == 32
    trainer, model = rendered(cfg)
    assert model["num_layers"] == 32 and "num_layers" not in trainer["actor_config"]


def test_actor_config_wins_over_megatron_training():
    cfg = load_config(BASE, ["megatron_training.lr=2e-6", "megatron_training.tensor_model_parallel_size=2"])
    assert cfg.actor_config.lr == 1e-6 and cfg.actor_config.tensor_model_parallel_size == 4  # actor_config's own
    trainer, _ = rendered(cfg)
    assert "lr" not in trainer["megatron_training"] and trainer["actor_config"]["lr"] == 1e-6


def test_a_key_written_in_the_other_section_is_taken():
    cfg = load_config(BASE, ["~actor_config.micro_batch_size", "megatron_training.micro_batch_size=2",
                             "actor_config.global_batch_size=64", "rl_config.mini_batch_size=64"])
    assert cfg.actor_config.micro_batch_size == 2 and cfg.megatron_training.global_batch_size == 64


def test_a_training_key_in_the_model_file_applies_unless_a_section_sets_it():
    data = load_config(BASE).to_dict()
    data["model"]["qwen25_7b"]["sequence_parallel"] = False
    del data["megatron_training"]["sequence_parallel"]
    assert config_from_dict(data).megatron_training.sequence_parallel is False
    data["megatron_training"]["sequence_parallel"] = True  # megatron_training wins over the model file
    assert config_from_dict(data).megatron_training.sequence_parallel is True


def test_dashes_read_as_underscores_in_megatron_sections():
    data = load_config(BASE).to_dict()
    data["megatron_training"]["no-shuffle"] = True
    data["megatron_training"]["reuse-fp32-param"] = True
    cfg = config_from_dict(data)
    assert cfg.megatron_training.no_shuffle is True and cfg.megatron_training.reuse_fp32_param is True


def test_a_moved_key_is_named_as_written_in_errors():
    assert problems(["actor_config.num_layers=0"]) == [f"{SOURCE}: actor_config.num_layers: must be > 0 (got 0)"]
    assert problems(["~actor_config.lr", "megatron_training.lr=-1"]) == [
        f"{SOURCE}: megatron_training.lr: must be > 0 (got -1)"]


def test_role_sections_keep_what_they_inherited():
    """Without the integrated worker, ref_config merges over megatron_training and its model: a move must
    not change what it gets."""
    data = {
        "model": {"m": {"num_layers": 28}},
        "megatron_training": {"model": "m", "lr": 2e-6, "global_batch_size": 8},
        "actor_config": {"model": "m", "lr": 1e-6, "num_layers": 30},
        "ref_config": {"micro_batch_size": 4},
        "reward_config": {"lr": 3e-6},
    }
    out, moved = canonicalize(data, KEY_HOMES, MEGATRON_DEFAULTS)
    assert out["actor_config"]["lr"] == 1e-6 and "lr" not in out["megatron_training"]
    assert out["model"]["m"]["num_layers"] == 30 and "num_layers" not in out["actor_config"]
    assert out["ref_config"] == {"micro_batch_size": 4, "lr": 2e-6, "num_layers": 28}
    assert out["reward_config"] == {"lr": 3e-6, "num_layers": 28}
    assert out["megatron_training"]["global_batch_size"] == 8  # already home
    assert moved == {("model", "m", "num_layers"): ("actor_config", "num_layers")}
    assert data["actor_config"]["num_layers"] == 30  # the input is left alone


def test_without_the_integrated_worker_ref_and_reward_sections_validate_and_render():
    cfg = load_config(BASE, ["rl_config.use_integrated_worker=false", "ref_config.micro_batch_size=2",
                             "reward_config.model=qwen25_7b", "reward_config.tensor_model_parallel_size=2"])
    assert cfg.ref_config is not None and cfg.ref_config.micro_batch_size == 2
    trainer, _ = rendered(cfg)
    assert list(trainer) == ["defaults", "megatron_training", "actor_config", "ref_config", "reward_config",
                             "rl_config", "generate_config"]
    assert trainer["ref_config"] == {"micro_batch_size": 2}  # as written, nothing added
    assert trainer["reward_config"] == {"model": "qwen25_7b", "tensor_model_parallel_size": 2}
    assert "ref_config" not in load_config(BASE).to_dict()  # absent sections stay absent


# ------------------------------------------------------------------------------------------ long tail
FIRST_CLASS = {name: set(cls.model_fields) - cls.long_tail for name, cls in (
    ("megatron_training", MegatronTrainingConfig), ("actor_config", ActorConfig), ("rl_config", RLConfig),
    ("generate_config", GenerateConfig))}  # fmt: skip


def test_unset_long_tail_keys_are_neither_dumped_nor_rendered():
    cfg = load_config(BASE)
    trainer, model = rendered(cfg)
    for section, first_class in FIRST_CLASS.items():
        assert set(trainer[section]) <= first_class, section
        assert set(cfg.to_dict()[section]) <= first_class, section
    assert set(model) <= set(ModelConfig.model_fields) - ModelConfig.long_tail
    assert cfg.megatron_training.reuse_fp32_param is False  # MindSpeed-RL's default, readable


def test_long_tail_keys_render_back_exactly_as_given():
    overrides = ["megatron_training.reuse_fp32_param=false", "actor_config.expert_model_parallel_size=1",
                 "model.qwen25_7b.rope_scaling_factor=40", "model.qwen25_7b.spec=[a.b,layer_spec]",
                 "rl_config.use_remove_padding=false", "rl_config.reward_dispatch_size=null",
                 "generate_config.enable_prefix_caching=true", "actor_config.noop_layers='5,95'"]
    cfg = load_config(BASE, overrides)
    trainer, model = rendered(cfg)
    assert trainer["megatron_training"]["reuse_fp32_param"] is False  # the default, but written: kept
    assert trainer["actor_config"]["expert_model_parallel_size"] == 1
    assert trainer["actor_config"]["noop_layers"] == "5,95"
    assert trainer["rl_config"]["use_remove_padding"] is False and trainer["rl_config"]["reward_dispatch_size"] is None
    assert trainer["generate_config"]["enable_prefix_caching"] is True
    assert model["rope_scaling_factor"] == 40 and isinstance(model["rope_scaling_factor"], int)  # not 40.0
    assert model["spec"] == ["a.b", "layer_spec"]
    again = GRPOConfig.model_validate(cfg.to_dict())
    assert again.to_dict() == cfg.to_dict() and rendered(again) == (trainer, model)


def test_long_tail_keys_are_typed_and_misspellings_suggested():
    assert problems(["megatron_training.reuse_fp32_parm=true"]) == [
        f"{SOURCE}: megatron_training.reuse_fp32_parm: unknown key; did you mean megatron_training.reuse_fp32_param?"]
    assert problems(["megatron_training.swap_optimizer=[1]"]) == [
        f"{SOURCE}: megatron_training.swap_optimizer: must be true or false (got [1])"]
    assert problems(["rl_config.use_remove_paddin=true"]) == [
        f"{SOURCE}: rl_config.use_remove_paddin: unknown key; did you mean rl_config.use_remove_padding?"]
    assert problems(["generate_config.sampling_config.n=2"])[0].startswith(
        f"{SOURCE}: generate_config.sampling_config.n: unknown key")


def test_a_model_key_for_a_model_not_loaded_names_the_cause_first():
    with pytest.raises(UserError) as info:
        load_config(BASE, ["actor_config.model=qwen25", "actor_config.num_layers=32"])
    assert info.value.problems[0] == (f"{SOURCE}: actor_config.model: model 'qwen25' is not loaded by the defaults "
                                      "list (loaded: qwen25_7b)")
