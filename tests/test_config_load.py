"""Composition of grpo_trainer configs: names, paths, layouts, overrides, attribute access."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from grpo.config import (
    GRPOConfig,
    config_from_dict,
    default_config_dir,
    derive,
    known_keys,
    load_config,
    render_mindspeed,
    suggest_key,
)
from grpo.errors import UserError

CONFIGS = Path(__file__).resolve().parents[1] / "configs"


@pytest.fixture(scope="module")
def tiny() -> GRPOConfig:
    return load_config("grpo_trainer_tiny_cpu")


@pytest.fixture(scope="module")
def qwen7b() -> GRPOConfig:
    return load_config(CONFIGS / "grpo_trainer_qwen25_7b_A3.yaml")


def test_tiny_config_composes_with_model_and_layout(tiny):
    assert tiny.layout == "tp1_pp1_cpu"
    assert list(tiny.model) == ["tiny_qwen"]
    arch = tiny.model_arch
    assert arch.num_attention_heads == 4 and arch.num_query_groups == 2
    assert tiny.actor_config.tensor_model_parallel_size == 1
    assert tiny.rl_config.actor_resource.num_npus == 1
    assert tiny.megatron_training.global_batch_size == 32
    assert tiny.rl_config.mini_batch_size == 16 and tiny.rl_config.n_samples_per_prompt == 8
    assert tiny.actor_config.load is None and tiny.actor_config.save is None
    assert tiny.engine.device == "auto"
    assert tiny.generate_config.sampling_config.max_tokens == 24


def test_qwen7b_matches_mindspeed_example(qwen7b):
    arch = qwen7b.model_arch
    assert (arch.num_layers, arch.hidden_size, arch.ffn_hidden_size) == (28, 3584, 18944)
    assert (arch.num_attention_heads, arch.num_query_groups, arch.padded_vocab_size) == (28, 4, 152064)
    assert arch.rotary_base == 1e6 and arch.norm_epsilon == 1e-6
    assert qwen7b.layout is None
    assert qwen7b.actor_config.tensor_model_parallel_size == 4
    assert qwen7b.rl_config.actor_resource.num_npus == 16
    assert qwen7b.generate_config.dtype == "bfloat16"


def test_qwen32b_architecture_loads_with_tp8_layout():
    # `model=[...]` is Hydra's override of the defaults-list group; the two model keys follow it.
    cfg = load_config("grpo_trainer_qwen25_7b_A3", [
        "model=[qwen25_32b]", "megatron_training.model=qwen25_32b", "actor_config.model=qwen25_32b",
        "layout=tp8_pp1",
    ])
    arch = cfg.model_arch
    assert (arch.num_layers, arch.hidden_size, arch.ffn_hidden_size) == (64, 5120, 27648)
    assert (arch.num_attention_heads, arch.num_query_groups, arch.padded_vocab_size) == (40, 8, 152064)
    assert cfg.layout == "tp8_pp1" and derive(cfg).train_dp == 2


@pytest.mark.parametrize("target", ["grpo_trainer_tiny_cpu", "configs/grpo_trainer_tiny_cpu.yaml"])
def test_name_and_path_give_the_same_config(target, tiny, monkeypatch):
    monkeypatch.chdir(CONFIGS.parent)
    assert load_config(target).to_dict() == tiny.to_dict()


def test_file_outside_config_dir_still_sees_model_and_layout_groups(tmp_path):
    shutil.copy(CONFIGS / "grpo_trainer_qwen25_7b_A3.yaml", tmp_path / "mine.yaml")
    cfg = load_config(tmp_path / "mine.yaml", ["layout=tp2_pp2"])
    assert cfg.model_arch.num_layers == 28 and cfg.layout == "tp2_pp2"


def test_model_group_override_switches_the_model():
    overrides = ["model=[qwen25_32b]", "megatron_training.model=qwen25_32b", "actor_config.model=qwen25_32b",
                 "layout=tp8_pp1"]
    switched = load_config("grpo_trainer_qwen25_7b_A3", overrides)
    assert list(switched.model) == ["qwen25_32b"] and switched.layout == "tp8_pp1"
    assert switched.to_dict() == load_config("grpo_trainer_qwen25_7b_A3", overrides).to_dict()  # cached = fresh
    with pytest.raises(UserError, match=r"model: unknown model 'qwen9' \(available: deepseekv3_671b, qwen25_0_5b, qwen25_32b, qwen25_7b, qwen3_235b_a22b, "
                       r"qwen3_30b_a3b, qwen3_8b, tiny_qwen\)"):
        load_config("grpo_trainer_qwen25_7b_A3", ["model=[qwen9]"])


def test_the_files_own_model_folder_wins_over_the_config_dir(tmp_path):
    (tmp_path / "model").mkdir()
    shutil.copy(CONFIGS / "grpo_trainer_qwen25_7b_A3.yaml", tmp_path / "mine.yaml")
    text = (CONFIGS / "model" / "qwen25_7b.yaml").read_text().replace("num_layers: 28", "num_layers: 4")
    (tmp_path / "model" / "qwen25_7b.yaml").write_text(text)
    assert load_config(tmp_path / "mine.yaml").model_arch.num_layers == 4


def test_config_dir_argument_and_env(tmp_path, monkeypatch):
    shutil.copytree(CONFIGS, tmp_path / "cfgs")
    text = (tmp_path / "cfgs" / "grpo_trainer_tiny_cpu.yaml").read_text().replace("train_iters: 150", "train_iters: 7")
    (tmp_path / "cfgs" / "grpo_trainer_tiny_cpu.yaml").write_text(text)
    assert load_config("grpo_trainer_tiny_cpu", config_dir=tmp_path / "cfgs").megatron_training.train_iters == 7
    monkeypatch.setenv("GRPO_CONFIG_DIR", str(tmp_path / "cfgs"))
    assert default_config_dir() == (tmp_path / "cfgs").resolve()
    assert load_config("grpo_trainer_tiny_cpu").megatron_training.train_iters == 7


def test_layout_override_with_and_without_layout_in_defaults(tiny):
    # tiny names layout tp1_pp1_cpu in its defaults list; the 7B config names none (-> +layout=).
    swapped = load_config("grpo_trainer_tiny_cpu", ["layout=tp2_pp2"])
    assert swapped.layout == "tp2_pp2"
    assert (swapped.actor_config.tensor_model_parallel_size, swapped.actor_config.pipeline_model_parallel_size) == (2, 2)
    assert swapped.rl_config.actor_resource.num_npus == 16
    big = load_config("grpo_trainer_qwen25_7b_A3", ["layout=tp4_pp2"])
    assert big.layout == "tp4_pp2" and big.actor_config.pipeline_model_parallel_size == 2


def test_key_override_wins_over_layout():
    cfg = load_config("grpo_trainer_tiny_cpu", ["actor_config.micro_batch_size=8", "layout=tp2_pp2"])
    assert cfg.actor_config.micro_batch_size == 8 and cfg.layout == "tp2_pp2"


def test_override_of_key_absent_from_yaml_is_set():
    # kl_ctrl_type and wandb_save_dir are in the schema; the tiny YAML does not spell wandb_save_dir.
    cfg = load_config("grpo_trainer_tiny_cpu", ["rl_config.wandb_save_dir=/tmp/w", "rl_config.kl_ctrl_type=adaptive"])
    assert cfg.rl_config.wandb_save_dir == "/tmp/w" and cfg.rl_config.kl_ctrl_type == "adaptive"


def test_shuffle_minibatch_alias_sets_the_same_key():
    cfg = load_config("grpo_trainer_tiny_cpu", ["rl_config.shuffle_minibatch=true"])
    assert cfg.rl_config.shuffle_mini_batch is True
    again = load_config("grpo_trainer_tiny_cpu", ["rl_config.shuffle_minibatch=true", "rl_config.shuffle_minibatch=false"])
    assert again.rl_config.shuffle_mini_batch is False


def test_mindspeed_example_spelling_shuffle_minibatch_in_yaml(tmp_path):
    text = (CONFIGS / "grpo_trainer_qwen25_7b_A3.yaml").read_text()
    (tmp_path / "ms.yaml").write_text(text.replace("shuffle_mini_batch: false", "shuffle_minibatch: true"))
    cfg = load_config(tmp_path / "ms.yaml")
    assert cfg.rl_config.shuffle_mini_batch is True
    assert "shuffle_mini_batch: true" in render_mindspeed(cfg) and "shuffle_minibatch" not in render_mindspeed(cfg)


def test_overrides_revalidate_and_leave_the_base_alone(tiny):
    new = load_config("grpo_trainer_tiny_cpu", ["rl_config.clip_ratio=0.3",
                                                "generate_config.sampling_config.temperature=0.7", "layout=tp2_pp2"])
    assert new.rl_config.clip_ratio == 0.3 and new.generate_config.sampling_config.temperature == 0.7
    assert new.layout == "tp2_pp2" and new.actor_config.tensor_model_parallel_size == 2
    assert tiny.rl_config.clip_ratio == 0.2 and tiny.layout == "tp1_pp1_cpu"
    with pytest.raises(UserError, match=r"rl_config\.clip_ratio: must be <= 1 \(got 1\.5\)"):
        load_config("grpo_trainer_tiny_cpu", ["rl_config.clip_ratio=1.5"])
    with pytest.raises(UserError, match=r"did you mean rl_config\.clip_ratio\?"):
        load_config("grpo_trainer_tiny_cpu", ["rl_config.clip_rato=0.3"])


def test_repeated_composition_matches_a_fresh_one(tiny):
    """The cached composition (see compose.py) gives what a first, uncached composition gives."""
    overrides = ["layout=tp2_pp2", "rl_config.init_kl_coef=0.05", "actor_config.lr=1e-4"]
    first = load_config("grpo_trainer_tiny_cpu", overrides).to_dict()
    assert load_config("grpo_trainer_tiny_cpu", overrides).to_dict() == first
    assert load_config("grpo_trainer_tiny_cpu").to_dict() == tiny.to_dict()


def test_to_dict_round_trips(qwen7b, tiny):
    for cfg in (qwen7b, tiny):
        data = cfg.to_dict()
        assert isinstance(data["rl_config"], dict)
        assert GRPOConfig.model_validate(data).to_dict() == data
        assert config_from_dict(data).to_dict() == data


def test_known_keys_and_suggestions(tiny):
    keys = known_keys()
    for key in ("rl_config.clip_ratio", "generate_config.sampling_config.top_p", "layout",
                "rl_config.actor_resource.num_npus", "engine.device", "model.*.num_layers"):
        assert key in keys
    assert "model.tiny_qwen.num_layers" in known_keys(tiny)
    assert suggest_key("rl_config.clip_rato") == "rl_config.clip_ratio"
    assert suggest_key("generate_config.sampling_config.temprature") == "generate_config.sampling_config.temperature"
    assert suggest_key("model.tiny_qwen.num_layer") == "model.tiny_qwen.num_layers"
    assert suggest_key("rl_confg") == "rl_config"
    assert suggest_key("clip_ratio") == "rl_config.clip_ratio"
    assert suggest_key("rl_config.lr") == "actor_config.lr"
    assert suggest_key("generate_config.micro_batch_size") == "actor_config.micro_batch_size"
    assert suggest_key("rl_config.reuse_fp32_param") == "megatron_training.reuse_fp32_param"
    assert suggest_key("megatron_training.reuse_fp32_parm") == "megatron_training.reuse_fp32_param"
    # MindSpeed-RL merges megatron_training and actor_config: a Megatron key is valid in either
    assert suggest_key("megatron_training.lr") == "megatron_training.lr"
    assert {"megatron_training.lr", "actor_config.global_batch_size", "actor_config.num_layers",
            "model.*.no_gradient_accumulation_fusion", "ref_config.lr", "rl_config.use_remove_padding"} <= set(keys)
    assert suggest_key("zzzz.qqqq") is None


def test_composing_inside_a_running_hydra_app_leaves_it_alone():
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    with initialize_config_dir(config_dir=str(CONFIGS / "layout"), version_base=None):
        load_config("grpo_trainer_tiny_cpu")
        assert GlobalHydra.instance().is_initialized()
        # the app's own config dir (here: the layout folder) still composes
        assert compose(config_name="tp2_pp2").actor_config.tensor_model_parallel_size == 2


def test_repeated_composition_sees_edited_files(tmp_path):
    """Compositions are reused only while every file they read is unchanged."""
    shutil.copytree(CONFIGS, tmp_path / "cfgs")
    layout = tmp_path / "cfgs" / "layout" / "tp1_pp1_cpu.yaml"
    assert load_config("grpo_trainer_tiny_cpu", ["rl_config.clip_ratio=0.3"],
                       config_dir=tmp_path / "cfgs").actor_config.micro_batch_size == 64
    layout.write_text(layout.read_text().replace("micro_batch_size: 64", "micro_batch_size: 32"))
    cfg = load_config("grpo_trainer_tiny_cpu", ["rl_config.clip_ratio=0.3"], config_dir=tmp_path / "cfgs")
    assert cfg.actor_config.micro_batch_size == 32 and cfg.rl_config.clip_ratio == 0.3
    (tmp_path / "cfgs" / "model" / "tiny_qwen.yaml").write_text("tiny_qwen: [\n")
    with pytest.raises(UserError, match=r"tiny_qwen\.yaml:\d+: YAML syntax error"):
        load_config("grpo_trainer_tiny_cpu", ["rl_config.clip_ratio=0.3"], config_dir=tmp_path / "cfgs")


def test_overrides_only_hydra_can_apply_still_work():
    """``~key`` and ``+key=v`` go through Hydra's own composition (uncached) with Hydra's meaning."""
    cfg = load_config("grpo_trainer_tiny_cpu", ["~rl_config.clip_ratio", "+rl_config.wandb_save_dir=/tmp/w"])
    assert cfg.rl_config.clip_ratio == 0.2  # removed from the YAML: the schema default applies
    assert cfg.rl_config.wandb_save_dir == "/tmp/w"
