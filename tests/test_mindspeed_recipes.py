"""MindSpeed-RL's GRPO recipes validate: one test per recipe family, on configs written in their structure
(tests/data/mindspeed_recipes/), and every real recipe of a MindSpeed-RL checkout when one is here.

A recipe is taken as MindSpeed-RL takes it: its `defaults:` model comes from the configs/model/ beside it
(for a checkout, the checkout's own), Megatron keys may sit in the model, megatron_training or
actor_config, and every key of MindSpeed-RL's config classes is accepted.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from test_config_manifest import mindspeed_checkout

from grpo.config import GRPOConfig, check_rules, derive, load_config, render_mindspeed, render_mindspeed_model
from grpo.plan import estimate

REPO = Path(__file__).resolve().parents[1]
RECIPES = Path(__file__).parent / "data" / "mindspeed_recipes"


def recipe(name: str) -> GRPOConfig:
    cfg = load_config(RECIPES / f"{name}.yaml")
    assert check_rules(cfg) == []
    return cfg


def round_trips(cfg: GRPOConfig, tmp_path: Path) -> None:
    """The rendered trainer and model YAML load back to the same config (what MindSpeed-RL would be given)."""
    (tmp_path / "model").mkdir()
    (tmp_path / "rendered.yaml").write_text(render_mindspeed(cfg))
    for name in cfg.model:
        model_name, text = render_mindspeed_model(cfg, name)
        (tmp_path / "model" / f"{model_name}.yaml").write_text(text)
    again = load_config(tmp_path / "rendered.yaml", config_dir=tmp_path)
    drop = ("engine", "layout")
    assert {k: v for k, v in again.to_dict().items() if k not in drop} == {
        k: v for k, v in cfg.to_dict().items() if k not in drop}


def test_qwen25_7b_a3(tmp_path):
    cfg = recipe("grpo_qwen25_7b_A3")
    assert cfg.megatron_training.reuse_fp32_param is False  # the key the old schema refused
    assert (derive(cfg).train_dp, derive(cfg).generation_dp) == (4, 16)
    assert estimate(cfg, 64).feasible
    round_trips(cfg, tmp_path)


@pytest.mark.parametrize("name", ["grpo_qwen25_32b_A3", "grpo_qwen25_32b_A2"])
def test_qwen25_32b_a2_a3(name, tmp_path):
    cfg = recipe(name)
    assert cfg.rl_config.use_remove_padding is True and cfg.megatron_training.no_pad_to_seq_lengths is True
    assert cfg.rl_config.actor_update_dispatch_size == 1024
    if name.endswith("A3"):
        assert cfg.actor_config.num_layer_list == "16,17,16,15" and cfg.rl_config.hccl_buffersize == 64
    assert estimate(cfg, 64).feasible  # MindSpeed-RL runs it on 64 GB NPUs
    round_trips(cfg, tmp_path)


def test_lora_qwen25_32b_a2(tmp_path):
    cfg = recipe("grpo_lora_qwen25_32b_A2")
    mt = cfg.megatron_training
    assert (mt.lora_r, mt.lora_alpha, mt.lora_fusion) == (128, 128, True)
    assert mt.lora_target_modules == ["linear_qkv", "linear_proj", "linear_fc1", "linear_fc2"]
    assert cfg.rl_config.share_backbone is True
    round_trips(cfg, tmp_path)


def test_qwen3_8b_a3(tmp_path):
    cfg = recipe("grpo_qwen3_8b_A3")
    arch = cfg.model_arch
    assert arch.qk_layernorm and not arch.add_qkv_bias and arch.architecture == "dense"  # no QKV bias in Qwen3
    assert arch.norm_epsilon == 1e-5  # the model file does not set it: MindSpeed-RL's default
    assert cfg.actor_config.finetune is False
    assert estimate(cfg, 64).estimated  # a dense model: estimated
    round_trips(cfg, tmp_path)


def test_qwen3_235b_a22b_a2(tmp_path):
    cfg = recipe("grpo_qwen3_235b_a22b_A2")
    arch = cfg.model_arch
    assert arch.num_layers == 96  # actor_config.num_layers (94 + 2 noop layers) over the model file's 94
    assert (arch.num_experts, arch.moe_router_topk, arch.kv_channels) == (128, 8, 128)
    assert cfg.actor_config.expert_model_parallel_size == 4 and cfg.generate_config.enable_prefix_caching
    est = estimate(cfg, 64)
    assert not est.estimated and est.feasible and est.reason.startswith("not estimated: ")
    round_trips(cfg, tmp_path)


@pytest.mark.parametrize("name", ["grpo_deepseek_r1_671b_A3", "grpo_deepseek_r1_671b_A2"])
def test_deepseek_r1_671b_a2_a3(name, tmp_path):
    cfg = recipe(name)
    arch = cfg.model_arch
    assert arch.multi_latent_attention and (arch.q_lora_rank, arch.kv_lora_rank) == (1536, 512)
    assert (arch.num_experts, arch.n_shared_experts, arch.first_k_dense_replace) == (256, 1, 3)
    assert arch.rope_scaling_type == "yarn" and arch.rope_scaling_factor == 40
    assert cfg.actor_config.num_layer_list == "7,7,8,8,8,8,8,7"  # 61 layers over PP8
    assert derive(cfg).train_dp == 8
    assert estimate(cfg, 64).reason.startswith("not estimated: model.deepseekv3_671b is MoE (256 experts, top-8) + MLA")
    round_trips(cfg, tmp_path)


def test_grpo_sweep_validate_accepts_a_recipe():
    path = RECIPES / "grpo_qwen3_235b_a22b_A2.yaml"
    # A MoE recipe: the embedded engine (validate's default backend) refuses it; MindSpeed-RL runs it.
    done = subprocess.run([sys.executable, "-m", "grpo.cli", "validate", str(path), "--backend", "mindspeed"], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert ": valid" in done.stdout and "model qwen3_235b_a22b (MoE (128 experts, top-8))" in done.stdout


# ----------------------------------------------------------------------------- a MindSpeed-RL checkout
def checkout_configs(tmp_path: Path) -> Path:
    """The checkout's configs/ folder: in place for a work tree, written out of HEAD for a git directory."""
    checkout = mindspeed_checkout()
    if checkout is None:
        pytest.skip("no MindSpeed-RL checkout here (set MINDSPEED_RL_SOURCE)")
    if (checkout / "configs").is_dir():
        shutil.copytree(checkout / "configs", tmp_path / "configs")
        return tmp_path / "configs"
    git = ["git", "--git-dir", str(checkout)]
    names = subprocess.run([*git, "ls-tree", "-r", "--name-only", "HEAD", "configs/"], capture_output=True,
                           text=True, check=True).stdout.split()
    for name in names:
        if name.endswith(".yaml"):
            (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / name).write_bytes(subprocess.run([*git, "show", f"HEAD:{name}"], capture_output=True,
                                                         check=True).stdout)
    return tmp_path / "configs"


def test_every_grpo_recipe_of_the_checkout_validates(tmp_path):
    configs = checkout_configs(tmp_path)
    names = sorted(p.name for p in configs.glob("grpo_*.yaml"))
    assert len(names) >= 8
    results = {}
    for name in names:
        cfg = load_config(configs / name)  # `base:` of a sweep may be exactly this path
        results[name] = cfg.model_arch.architecture
    assert results["grpo_qwen3_235b_a22b_A2.yaml"] == "MoE (128 experts, top-8)"
    assert results["grpo_deepseek_r1_671b_A3.yaml"] == "MoE (256 experts, top-8) + MLA"


def test_a_checkout_recipe_takes_its_model_from_that_checkout(tmp_path):
    configs = checkout_configs(tmp_path)
    model = configs / "model" / "qwen25_7b.yaml"
    data = yaml.safe_load(model.read_text())
    data["qwen25_7b"]["max_position_embeddings"] = 16384  # the checkout's own edit, not ours (32768)
    model.write_text(yaml.safe_dump(data))
    cfg = load_config(configs / "grpo_qwen25_7b_A3.yaml")
    assert cfg.model_arch.max_position_embeddings == 16384
    assert cfg.megatron_training.reuse_fp32_param is False and cfg.actor_config.micro_batch_size == 4
