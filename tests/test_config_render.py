"""Rendering for MindSpeed-RL: trainer YAML + model YAML, and the compose -> render -> reload round trip."""

from __future__ import annotations

import types
import typing
from pathlib import Path

import pytest
import yaml

from grpo.config import GRPOConfig, load_config, render_mindspeed, render_mindspeed_model
from grpo.config.reference import TABLES

GRPO_ONLY = ("engine", "layout")


def _reload(cfg: GRPOConfig, folder: Path) -> GRPOConfig:
    """Write the rendered files as a MindSpeed-RL configs/ folder and load them back from there alone."""
    (folder / "model").mkdir(parents=True)
    (folder / "grpo_trainer_rendered.yaml").write_text(render_mindspeed(cfg))
    name, text = render_mindspeed_model(cfg)
    (folder / "model" / f"{name}.yaml").write_text(text)
    return load_config(folder / "grpo_trainer_rendered.yaml", config_dir=folder)


def _without_grpo_sections(cfg: GRPOConfig) -> dict:
    data = cfg.to_dict()
    for key in GRPO_ONLY:
        data.pop(key)
    return data


@pytest.mark.parametrize("name, overrides", [
    ("grpo_trainer_tiny_cpu", []),
    ("grpo_trainer_tiny_cpu", ["rl_config.kl_ctrl_type=adaptive", "actor_config.save=/tmp/ckpt",
                               "megatron_training.recompute_granularity=full",
                               "megatron_training.recompute_method=uniform",
                               "megatron_training.recompute_num_layers=1"]),
    ("grpo_trainer_qwen25_7b_A3", ["layout=tp2_pp2", "rl_config.shuffle_minibatch=true"]),
])
def test_compose_render_reload_gives_the_same_config(tmp_path, name, overrides):
    cfg = load_config(name, overrides)
    again = _reload(cfg, tmp_path / "configs")
    assert _without_grpo_sections(again) == _without_grpo_sections(cfg)


def test_rendered_yaml_has_mindspeed_layout():
    cfg = load_config("grpo_trainer_qwen25_7b_A3", ["layout=tp2_pp2"])
    data = yaml.safe_load(render_mindspeed(cfg))
    assert data["defaults"] == [{"model": ["qwen25_7b"]}, "_self_"]
    assert list(data) == ["defaults", "megatron_training", "actor_config", "rl_config", "generate_config"]
    assert "qwen25_7b" not in data and "model" not in data  # MindSpeed-RL loads configs/model/ itself
    assert data["actor_config"]["tensor_model_parallel_size"] == 2  # the layout's values are inlined
    assert data["actor_config"]["pipeline_model_parallel_size"] == 2
    assert data["rl_config"]["actor_resource"] == {"num_npus": 16}
    assert data["generate_config"]["sampling_config"]["top_k"] == -1
    assert data["rl_config"]["shuffle_mini_batch"] is False  # the key MindSpeed-RL's RLConfig reads
    assert "shuffle_minibatch" not in data["rl_config"]
    assert "recompute_granularity" not in data["megatron_training"]  # null = MindSpeed's default
    name, text = render_mindspeed_model(cfg)
    model = yaml.safe_load(text)
    assert name == "qwen25_7b" and model["qwen25_7b"]["num_query_groups"] == 4
    assert model["qwen25_7b"]["padded_vocab_size"] == 152064


def test_render_drops_grpo_sections_and_nulls():
    cfg = load_config("grpo_trainer_tiny_cpu")
    data = yaml.safe_load(render_mindspeed(cfg))
    assert "engine" not in data and "layout" not in data
    assert "load" not in data["actor_config"] and "save" not in data["actor_config"]
    assert all(v is not None for section in data.values() if isinstance(section, dict) for v in section.values())


def _optional(annotation) -> bool:
    return typing.get_origin(annotation) in (typing.Union, types.UnionType) and type(None) in typing.get_args(annotation)


def test_every_nullable_field_defaults_to_null():
    """Leaving nulls out of the render is lossless only if every nullable first-class field's default is null.

    (Long-tail fields are rendered when set, null or not, and never otherwise.)"""
    for _, model in TABLES:  # every section model, ModelConfig included
        for name, info in model.model_fields.items():
            if _optional(info.annotation) and name not in model.long_tail:
                assert info.default is None, f"{model.__name__}.{name}"


# mindspeed_rl/config_cls/mindstudio_config.py (ProfilerConfig, MsprobeConfig) and cli/train_grpo.py
# parse_training_config: profiler_config.integrated and msprobe_config, MindSpeed-RL's keys and defaults.
def test_profiler_and_msprobe_sections_take_mindspeeds_keys_and_render_only_when_given():
    cfg = load_config("grpo_trainer_qwen25_7b_A3", ["+profiler_config.integrated.profile=true",
                                                    "+profiler_config.integrated.profile_ranks=[0,1]",
                                                    "+msprobe_config.msprobe=true"])
    prof, probe = cfg.profiler_config.integrated, cfg.msprobe_config
    assert prof.profile and prof.profile_ranks == [0, 1]
    assert (prof.profile_level, prof.profile_step_start, prof.profile_step_end, prof.stage) == ("level0", 1, 2, "all")
    assert probe.msprobe and probe.dump_path == "./msprobe_dump" and probe.step_end == 0
    rendered = yaml.safe_load(render_mindspeed(cfg))
    assert rendered["profiler_config"]["integrated"]["profile"] is True
    assert rendered["msprobe_config"]["msprobe"] is True
    plain = yaml.safe_load(render_mindspeed(load_config("grpo_trainer_qwen25_7b_A3")))
    assert "profiler_config" not in plain and "msprobe_config" not in plain


def test_an_unknown_profiler_key_gets_a_did_you_mean():
    from grpo.errors import UserError

    with pytest.raises(UserError, match="profiler_config.integrated.profile_levl.*did you mean.*profile_level"):
        load_config("grpo_trainer_qwen25_7b_A3", ["+profiler_config.integrated.profile_levl=level1"])
    with pytest.raises(UserError, match="profile_level"):
        load_config("grpo_trainer_qwen25_7b_A3", ["+profiler_config.integrated.profile_level=level9"])
