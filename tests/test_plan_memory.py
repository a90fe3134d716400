"""The layout memory planner against its sources and against MindSpeed-RL's published layouts.

Published layouts (MindSpeed-RL configs, all on 16 NPUs of 64 GB, integrated worker, offload on):
Qwen2.5-7B GRPO with TP4 PP1 (grpo_trainer_qwen25_7b_A3.yaml of spring 2025) and with TP2 PP2,
micro batch 4, rollout TP1 (grpo_qwen25_7b_A3.yaml on master); Qwen2.5-32B with TP4 PP4, micro
batch 2, rollout TP2 (grpo_qwen25_32b_A3.yaml). All of them run, so all must be estimated to fit.
"""

from pathlib import Path
from types import SimpleNamespace

import pytest

from grpo.config import load_config
from grpo.plan import estimate, model_parameters
from grpo.plan.memory import layer_activation_bytes

BASE = "grpo_trainer_qwen25_7b_A3"


@pytest.fixture(scope="module")
def qwen32b_config(tmp_path_factory) -> Path:
    """The 7B A3 trainer config pointed at configs/model/qwen25_32b.yaml."""
    text = (Path(__file__).parents[1] / "configs" / f"{BASE}.yaml").read_text().replace("qwen25_7b", "qwen25_32b")
    path = tmp_path_factory.mktemp("cfg") / "grpo_trainer_qwen25_32b_A3.yaml"
    path.write_text(text)
    return path


def test_parameter_counts_match_the_released_checkpoints(qwen32b_config):
    # Parameter totals of the Hugging Face safetensors of Qwen2.5-7B and Qwen2.5-32B.
    assert model_parameters(load_config(BASE).model_arch) == 7_615_616_512
    assert model_parameters(load_config(str(qwen32b_config)).model_arch) == 32_763_876_352


def _gpt(h=1024, a=16):
    """A GPT-3-style block as in Korthikanti et al.: MHA, 4h GeLU MLP."""
    return SimpleNamespace(hidden_size=h, ffn_hidden_size=4 * h, num_attention_heads=a, effective_query_groups=a,
                           swiglu=False)


@pytest.mark.parametrize("tp, sp", [(1, False), (4, False), (4, True)])
def test_activations_reduce_to_korthikanti_et_al(tp, sp):
    arch, s, b = _gpt(), 2048, 2
    h, a = arch.hidden_size, arch.num_attention_heads
    got = layer_activation_bytes(arch, s * b, tp, s, sequence_parallel=sp, flash_attention=False,
                                 selective_recompute=False, attention_dropout=0.1, hidden_dropout=0.1)
    if sp or tp == 1:  # eq. (5): sbh/t (34 + 5as/h)
        expected = s * b * h / tp * (34 + 5 * a * s / h)
    else:  # eq. (2): sbh (10 + 24/t + 5as/(ht))
        expected = s * b * h * (10 + 24 / tp + 5 * a * s / (h * tp))
    assert got == pytest.approx(expected)
    selective = layer_activation_bytes(arch, s * b, tp, s, sequence_parallel=True, flash_attention=False,
                                       selective_recompute=True, attention_dropout=0.1, hidden_dropout=0.1)
    assert selective == pytest.approx(s * b * h / tp * 34)  # eq. (6): selective recompute drops 5as/h


def test_published_qwen25_7b_layouts_fit_on_16_npus_of_64_gb():
    old = estimate(load_config(BASE, ["layout=tp4_pp1"]), 64)
    master = estimate(load_config(BASE, [
        "layout=tp2_pp2", "actor_config.micro_batch_size=4", "generate_config.infer_tensor_parallel_size=1",
        "rl_config.actor_forward_micro_batch_size=4", "rl_config.ref_forward_micro_batch_size=4"]), 64)
    for est in (old, master):
        assert est.feasible, est.reason
        assert est.train_dp == 4 and est.kv_sequences >= 1
    assert master.reason.startswith("fits: training") and "GiB" in master.reason
    assert master.activations_gb > old.activations_gb  # micro batch 4 over 2 pipeline stages in flight


def test_published_qwen25_32b_layout_fits_and_tp1_pp1_does_not(qwen32b_config):
    published = estimate(load_config(str(qwen32b_config), [
        "actor_config.tensor_model_parallel_size=4", "actor_config.pipeline_model_parallel_size=4",
        "actor_config.micro_batch_size=2", "generate_config.infer_tensor_parallel_size=2",
        "megatron_training.global_batch_size=64", "rl_config.mini_batch_size=64", "rl_config.n_samples_per_prompt=16",
        "rl_config.max_prompt_length=1024", "megatron_training.seq_length=1024", "generate_config.max_num_seqs=64",
        "generate_config.max_model_len=3072", "generate_config.gpu_memory_utilization=0.6",
        "generate_config.sampling_config.max_tokens=2048", "rl_config.ref_forward_micro_batch_size=16"]), 64)
    assert published.feasible, published.reason
    assert published.train_dp == 1 and published.optimizer_gb > 2 * published.grads_gb  # no DP to shard over
    whole = estimate(load_config(str(qwen32b_config), [
        "actor_config.tensor_model_parallel_size=1", "actor_config.pipeline_model_parallel_size=1",
        "generate_config.infer_tensor_parallel_size=1"]), 64)
    assert not whole.feasible
    assert whole.reason.startswith("training needs") and "> 60.0 GiB usable" in whole.reason
    assert "cannot hold one 4096-token sequence" in whole.reason  # 61 GiB of weights at rollout TP1
    assert whole.weights_gb == pytest.approx(32_763_876_352 * 2 / 2**30)


def test_recompute_reduces_activation_memory():
    common = ["layout=tp2_pp2", "megatron_training.use_flash_attn=false"]
    none = estimate(load_config(BASE, common), 64).activations_gb
    selective = estimate(load_config(BASE, common + ["megatron_training.recompute_granularity=selective"]), 64)
    full = estimate(load_config(BASE, common + ["megatron_training.recompute_granularity=full",
                                                "megatron_training.recompute_method=uniform",
                                                "megatron_training.recompute_num_layers=1"]), 64)
    assert none > selective.activations_gb > full.activations_gb
    flash = estimate(load_config(BASE, ["layout=tp2_pp2"]), 64).activations_gb
    assert flash == pytest.approx(selective.activations_gb)  # flash attention never stores the scores either


def test_distributed_optimizer_shards_optimizer_state_over_dp():
    sharded = estimate(load_config(BASE, ["layout=tp4_pp1"]), 64)
    replicated = estimate(load_config(BASE, ["layout=tp4_pp1", "megatron_training.use_distributed_optimizer=false"]), 64)
    assert replicated.optimizer_gb == pytest.approx(sharded.optimizer_gb * sharded.train_dp)
    # Megatron-Core: 6 + 12/d bytes per parameter for bf16 params, fp32 grads, distributed optimizer.
    per_param = (sharded.weights_gb + sharded.grads_gb + sharded.optimizer_gb) * 2**30 / (sharded.params_per_npu * 1e9)
    assert per_param == pytest.approx(6 + 12 / 4)


def test_a_kv_cache_that_cannot_hold_one_sequence_is_infeasible():
    est = estimate(load_config(BASE, ["layout=tp2_pp2", "generate_config.infer_tensor_parallel_size=1",
                                      "generate_config.gpu_memory_utilization=0.2"]), 64)
    assert not est.feasible and est.kv_sequences == 0
    assert "KV cache" in est.reason and "infer TP1" in est.reason


def test_offloading_lowers_the_generation_peak():
    offloaded = estimate(load_config(BASE, ["layout=tp4_pp1"]), 64)
    resident = estimate(load_config(BASE, ["layout=tp4_pp1", "generate_config.offload_train_optimizer=false",
                                           "generate_config.offload_train_grad=false",
                                           "generate_config.offload_train_param=false"]), 64)
    assert resident.generation_peak_gb == pytest.approx(
        offloaded.generation_peak_gb + resident.weights_gb + resident.grads_gb + resident.optimizer_gb)


def test_smaller_devices_turn_a_fitting_layout_infeasible():
    cfg = load_config(BASE, ["layout=tp2_pp2", "actor_config.micro_batch_size=4"])
    assert estimate(cfg, 64).feasible and not estimate(cfg, 32).feasible


# ---------------------------------------------------------------------------- Qwen3, MoE, MLA, uneven PP
RECIPES = Path(__file__).parent / "data" / "mindspeed_recipes"


def test_qwen3_parameter_counts_with_per_head_size_and_qk_norm():
    # Hugging Face safetensors totals: Qwen3-8B (head 128 = hidden/heads) and Qwen3-32B, whose 64 heads of
    # kv_channels=128 make the attention 8192 wide on a 5120 hidden size.
    qwen3_8b = load_config(RECIPES / "grpo_qwen3_8b_A3.yaml")
    assert model_parameters(qwen3_8b.model_arch) == 8_190_735_360
    qwen3_32b = load_config(RECIPES / "grpo_qwen3_8b_A3.yaml", [
        "model.qwen3_8b.num_layers=64", "model.qwen3_8b.hidden_size=5120", "model.qwen3_8b.ffn_hidden_size=25600",
        "model.qwen3_8b.num_attention_heads=64", "model.qwen3_8b.kv_channels=128"])
    assert model_parameters(qwen3_32b.model_arch) == 32_762_123_264


@pytest.mark.parametrize("name, why", [
    ("grpo_qwen3_235b_a22b_A2", "model.qwen3_235b_a22b is MoE (128 experts, top-8), which the planner does not model"),
    ("grpo_deepseek_r1_671b_A3", "model.deepseekv3_671b is MoE (256 experts, top-8) + MLA, which the planner does "
                                 "not model"),
])
def test_moe_and_mla_models_are_not_estimated(name, why):
    est = estimate(load_config(RECIPES / f"{name}.yaml"), 64)
    assert not est.estimated and est.reason == f"not estimated: {why}"
    assert est.feasible  # neither pruned nor vouched for: the reason says which
    assert est.notes == (est.reason,) and est.train_peak_gb != est.train_peak_gb  # NaN, not a figure


def test_context_parallelism_is_not_estimated():
    est = estimate(load_config(BASE, ["actor_config.context_parallel_size=2", "layout=tp4_pp1"]), 64)
    assert not est.estimated and "context_parallel_size=2" in est.reason


def test_an_uneven_layer_split_is_estimated_per_stage():
    """1F1B: stage i holds up to PP - i micro batches, so 17 layers on the second of 4 stages weigh less
    than 16 plus the embedding on the first: MindSpeed-RL's 16,17,16,15 split of Qwen2.5-32B fits."""
    even = estimate(load_config(RECIPES / "grpo_qwen25_32b_A3.yaml", ["actor_config.num_layer_list=null"]), 64)
    uneven = estimate(load_config(RECIPES / "grpo_qwen25_32b_A3.yaml"), 64)
    assert uneven.feasible and uneven.update_peak_gb == pytest.approx(even.update_peak_gb)
    heavy = estimate(load_config(RECIPES / "grpo_qwen25_32b_A3.yaml", ["actor_config.num_layer_list='22,14,14,14'"]),
                     64)
    assert heavy.update_peak_gb > even.update_peak_gb
