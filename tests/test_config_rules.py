"""Every cross-field rule: a config breaking exactly that rule gets exactly that rule's message.

The cases start from the shipped tiny and 7B configs and change a few keys with overrides; the
message must be the only problem reported, so each case also proves the other rules stay quiet.
"""

from __future__ import annotations

import pytest

from grpo.config import RULES, check_rules, derive, load_config
from grpo.errors import UserError

NPUS, TP, PP = "rl_config.actor_resource.num_npus", "actor_config.tensor_model_parallel_size", \
    "actor_config.pipeline_model_parallel_size"
ITP, GBS, MBS, MINI = "generate_config.infer_tensor_parallel_size", "megatron_training.global_batch_size", \
    "actor_config.micro_batch_size", "rl_config.mini_batch_size"

# rule name -> (base, overrides, expected message)
CASES: dict[str, list[tuple[str, list[str], str]]] = {
    "model_is_loaded": [("tiny", ["megatron_training.model=qwen25_7b"],
                         "megatron_training.model: model 'qwen25_7b' is not loaded by the defaults list "
                         "(loaded: tiny_qwen)")],
    # cli/train_grpo.py parse_training_config: the role sections exactly when the integrated worker is off
    "integrated_worker_sections": [
        ("tiny", ["rl_config.use_integrated_worker=false"],
         "rl_config.use_integrated_worker=false needs ref_config and reward_config sections (missing: "
         "ref_config, reward_config); MindSpeed-RL merges each over megatron_training for its role"),
        ("tiny", ["rl_config.use_integrated_worker=false", "ref_config.micro_batch_size=2"],
         "rl_config.use_integrated_worker=false needs ref_config and reward_config sections (missing: "
         "reward_config); MindSpeed-RL merges each over megatron_training for its role"),
        ("tiny", ["ref_config.micro_batch_size=2"],
         "ref_config is set but rl_config.use_integrated_worker=true (the actor's config serves every role)"),
    ],
    "npus_divisible_by_train_tp_pp": [("tiny", [f"{PP}=2", f"{NPUS}=3", f"{GBS}=6", f"{MINI}=2"],
                                       f"{NPUS}=3 is not divisible by {TP}*{PP}=1*2=2 "
                                       "(train DP = num_npus / (TP*PP) must be a whole number)"),
                                      ("7b", [f"{TP}=2", "actor_config.context_parallel_size=3"],
                                       f"{NPUS}=16 is not divisible by {TP}*{PP}*actor_config.context_parallel_size"
                                       "=2*1*3=6 (train DP = num_npus / (TP*PP*CP) must be a whole number)")],
    "global_batch_divisible_by_train_dp": [("tiny", [f"{NPUS}=4", f"{ITP}=2", f"{GBS}=6", f"{MINI}=2", f"{MBS}=4"],
                                            f"{GBS}=6 is not divisible by train DP=4 (num_npus / (TP*PP))")],
    "dp_share_divisible_by_micro_batch": [("tiny", [f"{MBS}=48"],
                                           f"{GBS}/DP*rl_config.n_samples_per_prompt = 32/1*8 = 256 responses per "
                                           f"rank is not divisible by {MBS}=48")],
    "heads_divisible_by_tp": [("7b", ["layout=tp8_pp1"],
                               f"model.qwen25_7b.num_attention_heads=28 is not divisible by {TP}=8")],
    "query_groups_divisible_by_tp": [("tiny", ["layout=tp4_pp1"],
                                      f"model.tiny_qwen.num_query_groups=2 is not divisible by {TP}=4")],
    "layers_divisible_by_pp": [
        ("tiny", [f"{PP}=4", f"{NPUS}=4"], f"model.tiny_qwen.num_layers=2 is not divisible by {PP}=4"),
        # MindSpeed-LLM's uneven split: one entry per stage, summing to num_layers (qwen25_7b: 28)
        ("7b", [f"{PP}=2", f"{TP}=2", "actor_config.num_layer_list='15,14'"],
         "actor_config.num_layer_list='15,14' sums to 29, model.qwen25_7b.num_layers=28"),
        ("7b", [f"{PP}=2", f"{TP}=2", "actor_config.num_layer_list='10,9,9'"],
         f"actor_config.num_layer_list='10,9,9' has 3 entries, {PP}=2 stages"),
        ("7b", [f"{PP}=2", f"{TP}=2", "actor_config.num_layer_list='14,x'"],
         "actor_config.num_layer_list='14,x' must be comma-separated layer counts >= 1 (e.g. 16,17,16,15)"),
    ],
    "vocab_divisible_by_tp": [("tiny", [f"{TP}=2", f"{NPUS}=2", f"{ITP}=2", "model.tiny_qwen.padded_vocab_size=65"],
                               f"model.tiny_qwen.padded_vocab_size=65 is not divisible by {TP}=2")],
    "infer_pp_is_one": [("tiny", ["generate_config.infer_pipeline_parallel_size=2"],
                         "generate_config.infer_pipeline_parallel_size=2: only 1 is supported "
                         "(no rollout pipeline parallel)")],
    "train_and_infer_tp_are_multiples": [("tiny", [f"{TP}=2", f"{ITP}=3", f"{NPUS}=6", f"{GBS}=6", f"{MINI}=3",
                                                   f"{MBS}=8"],
                                          f"{TP}=2 and {ITP}=3 must be multiples of one another (weight resharding)")],
    "infer_tp_fits_train_devices": [("7b", [f"{PP}=4", f"{ITP}=8"],
                                     f"train DP*TP = 1*4 = 4 is smaller than {ITP}=8")],
    "npus_divisible_by_infer_tp": [("tiny", [f"{NPUS}=3", f"{ITP}=2", f"{GBS}=6", f"{MINI}=3", f"{MBS}=8"],
                                    f"{NPUS}=3 is not divisible by {ITP}=2 (generation DP must be a whole number)")],
    "global_batch_divisible_by_generation_dp": [("tiny", [f"{TP}=2", f"{ITP}=1", f"{NPUS}=2", f"{GBS}=7",
                                                          f"{MINI}=1", f"{MBS}=8"],
                                                 f"{GBS}=7 is not divisible by generation DP = {NPUS}/{ITP} "
                                                 "= 2/1 = 2")],
    "mini_batch_divides_global_batch": [("tiny", [f"{MINI}=3", f"{MBS}=8"],
                                         f"{GBS}=32 is not divisible by {MINI}=3 (both count prompts)")],
    "mini_batch_divisible_by_dp_micro_batches": [("tiny", [f"{MINI}=1"],
                                                  f"{MINI}*rl_config.n_samples_per_prompt = 1*8 = 8 responses per "
                                                  f"optimizer step is not divisible by train DP*{MBS} = 1*64 = 64")],
    "verifier_lengths_match": [("tiny", ["rl_config.verifier_weight=[1.0]"],
                                "rl_config.verifier_function has 2 entries ['acc', 'strict_format'] but "
                                "rl_config.verifier_weight has 1 [1.0]")],
    "group_norm_needs_two_samples": [("tiny", ["rl_config.n_samples_per_prompt=1", f"{MBS}=1"],
                                      "rl_config.n_samples_per_prompt=1 must be >= 2 with "
                                      "rl_config.adv_estimator=group_norm")],
    "token_level_loss_agrees_with_loss_agg_mode": [
        ("tiny", ["rl_config.token_level_loss=false", "engine.loss_agg_mode=token-mean"],
         "engine.loss_agg_mode=token-mean contradicts rl_config.token_level_loss=false (true means token-mean, "
         "false a seq-mean mode); set only one of them"),
        ("tiny", ["rl_config.token_level_loss=true", "engine.loss_agg_mode=seq-mean-token-sum-norm"],
         "engine.loss_agg_mode=seq-mean-token-sum-norm contradicts rl_config.token_level_loss=true (true means "
         "token-mean, false a seq-mean mode); set only one of them"),
    ],
    # mindspeed_rl/config_cls/validate_config.py validate_rl_args: "clip_ratio_low ... must less than clip_ratio_high"
    "clip_higher_ratios": [
        ("tiny", ["rl_config.clip_higher_enable=true", "rl_config.clip_ratio_low=0.3", "rl_config.clip_ratio_high=0.2"],
         "rl_config.clip_ratio_low=0.3 must be <= rl_config.clip_ratio_high=0.2 with "
         "rl_config.clip_higher_enable=true (MindSpeed-RL's validate_rl_args)"),
        ("tiny", ["rl_config.clip_higher_enable=true", "rl_config.clip_ratio_low=1.0", "rl_config.clip_ratio_high=2"],
         "rl_config.clip_ratio_low: must be >= 0 and < 1 with rl_config.clip_higher_enable=true (got 1.0)"),
        ("tiny", ["rl_config.clip_higher_enable=true", "rl_config.clip_ratio_high=null"],
         "rl_config.clip_ratio_high: must be >= 0 with rl_config.clip_higher_enable=true (got None)"),
    ],
    "wandb_needs_project": [("tiny", ["rl_config.use_wandb=true"],
                             "rl_config.use_wandb=true needs rl_config.wandb_project (got '')")],
    # mindspeed_rl/utils/loggers.py, WandbLogger._init_wandb: "Please specify the wandb experiment name!"
    "wandb_needs_exp_name": [("tiny", ["rl_config.use_wandb=true", "rl_config.wandb_project=grpo"],
                              "rl_config.use_wandb=true needs rl_config.wandb_exp_name (got '')")],
    # mindspeed_rl/utils/loggers.py, SwanLabLogger._init_swanlab: nothing logged without a project or a valid mode,
    # "Please specify the swanlab experiment name!" without a name
    "swanlab_settings": [
        ("tiny", ["rl_config.use_swanlab=true"], "rl_config.use_swanlab=true needs rl_config.swanlab_project (got '')"),
        ("tiny", ["rl_config.use_swanlab=true", "rl_config.swanlab_project=p"],
         "rl_config.use_swanlab=true needs rl_config.swanlab_exp_name (got '')"),
        ("tiny", ["rl_config.use_swanlab=true", "rl_config.swanlab_project=p", "rl_config.swanlab_exp_name=e"],
         "rl_config.swanlab_mode must be one of cloud, local, offline, disabled with rl_config.use_swanlab=true "
         "(got '')"),
    ],
    "min_lr_not_above_lr": [("tiny", ["actor_config.min_lr=1e-3"],
                             "actor_config.min_lr=0.001 is larger than actor_config.lr=0.0001")],
    "recompute_method_needs_full": [
        ("tiny", ["megatron_training.recompute_method=block"],
         "megatron_training.recompute_method=block needs megatron_training.recompute_granularity=full (got None)"),
        ("7b", ["megatron_training.recompute_granularity=full"],
         "megatron_training.recompute_granularity=full needs megatron_training.recompute_method and "
         "megatron_training.recompute_num_layers (got None, None)"),
    ],
    "max_model_len_leaves_room_for_a_response": [("tiny", ["rl_config.max_prompt_length=64"],
                                                  "generate_config.max_model_len=64 leaves no room for a response "
                                                  "after rl_config.max_prompt_length=64")],
    "max_model_len_fits_seq_length": [("tiny", ["megatron_training.seq_length=128"],
                                       "generate_config.max_model_len=64 is smaller than "
                                       "megatron_training.seq_length=128")],
    "positions_fit_max_model_len": [("tiny", ["model.tiny_qwen.max_position_embeddings=32"],
                                     "model.tiny_qwen.max_position_embeddings=32 is smaller than "
                                     "generate_config.max_model_len=64")],
    "heads_divide_hidden_and_groups": [
        ("tiny", ["model.tiny_qwen.hidden_size=66"],
         "model.tiny_qwen.hidden_size=66 is not divisible by model.tiny_qwen.num_attention_heads=4"),
        ("tiny", ["model.tiny_qwen.num_query_groups=3"],
         "model.tiny_qwen.num_attention_heads=4 is not divisible by model.tiny_qwen.num_query_groups=3"),
    ],
}


BASE_NAMES = {"tiny": "grpo_trainer_tiny_cpu", "7b": "grpo_trainer_qwen25_7b_A3"}


@pytest.fixture(scope="module")
def bases():
    return {base: load_config(name) for base, name in BASE_NAMES.items()}


def compose(base, overrides):
    """A base config with overrides, composed as the sweep composes every trial."""
    return load_config(BASE_NAMES[base], overrides)


def test_every_rule_has_a_case():
    assert sorted(CASES) == sorted(rule.__name__ for rule in RULES)


def test_shipped_configs_and_layouts_are_feasible(bases):
    assert check_rules(bases["tiny"]) == [] and check_rules(bases["7b"]) == []
    for layout in ("tp4_pp1", "tp2_pp2", "tp4_pp2"):
        assert check_rules(compose("7b", [f"layout={layout}"])) == []


@pytest.mark.parametrize("rule, base, overrides, message",
                         [(rule, *case) for rule, cases in CASES.items() for case in cases])
def test_rule_broken_alone(bases, rule, base, overrides, message):
    with pytest.raises(UserError) as info:
        compose(base, overrides)
    source = bases[base]._source
    assert info.value.problems == [f"{source}: {message}"]


def test_load_config_reports_every_broken_rule_at_once():
    with pytest.raises(UserError) as info:
        load_config("grpo_trainer_tiny_cpu", ["rl_config.verifier_weight=[1.0]", "rl_config.use_wandb=true"])
    assert len(info.value.problems) == 2
    assert all(p.startswith("configs/grpo_trainer_tiny_cpu.yaml: ") or "grpo_trainer_tiny_cpu.yaml: " in p
               for p in info.value.problems)


@pytest.mark.parametrize("override, message", [
    ("rl_config.clip_ratio=1.5", "rl_config.clip_ratio: must be <= 1 (got 1.5)"),
    ("rl_config.clip_ratio=-0.1", "rl_config.clip_ratio: must be >= 0 (got -0.1)"),
    ("generate_config.sampling_config.temperature=0", "generate_config.sampling_config.temperature: must be > 0 (got 0)"),
    ("generate_config.sampling_config.top_p=0", "generate_config.sampling_config.top_p: must be > 0 (got 0)"),
    ("generate_config.sampling_config.top_p=1.5", "generate_config.sampling_config.top_p: must be <= 1 (got 1.5)"),
    ("generate_config.sampling_config.top_k=0",
     "generate_config.sampling_config.top_k: must be -1 (all tokens) or >= 1 (got 0)"),
    ("generate_config.sampling_config.top_k=-2",
     "generate_config.sampling_config.top_k: must be -1 (all tokens) or >= 1 (got -2)"),
    ("generate_config.sampling_config.min_p=1.0", "generate_config.sampling_config.min_p: must be < 1 (got 1.0)"),
    ("generate_config.sampling_config.min_p=-0.5", "generate_config.sampling_config.min_p: must be >= 0 (got -0.5)"),
    ("generate_config.gpu_memory_utilization=0", "generate_config.gpu_memory_utilization: must be > 0 (got 0)"),
    ("generate_config.gpu_memory_utilization=1.2", "generate_config.gpu_memory_utilization: must be <= 1 (got 1.2)"),
])
def test_single_field_rules(bases, override, message):
    with pytest.raises(UserError) as info:
        compose("tiny", [override])
    assert info.value.problems == [f"{bases['tiny']._source}: {message}"]


def test_derived_values_follow_mindspeed_batch_arithmetic(bases):
    tiny = derive(bases["tiny"])
    assert (tiny.train_dp, tiny.generation_dp) == (1, 1)
    assert tiny.rollouts_per_iteration == 256  # 32 prompts * 8 samples
    assert tiny.mini_batch_responses == 128  # MindSpeed-RL: mini_batch_size * n_samples_per_prompt
    assert tiny.optimizer_steps_per_iteration == 4  # 32 prompts / 16 per step, 2 epochs
    assert tiny.micro_batches_per_step == 2  # 128 responses / DP 1 / micro batch 64
    assert tiny.tokens_per_iteration_max == 256 * (32 + 24)
    big = derive(compose("7b", ["layout=tp2_pp2", "rl_config.epochs=2", "rl_config.mini_batch_size=8"]))
    assert (big.train_tp, big.train_pp, big.train_dp, big.infer_tp, big.generation_dp) == (2, 2, 4, 2, 8)
    assert big.optimizer_steps_per_iteration == 2 * 32 // 8
    assert big.micro_batches_per_step == 8 * 8 // 4 // 1
    assert big.prompts_per_generation_replica == 4


def test_a_named_wandb_run_passes(bases):
    """WandbLogger._init_wandb accepts a project with an experiment name."""
    cfg = compose("tiny", ["rl_config.use_wandb=true", "rl_config.wandb_project=grpo", "rl_config.wandb_exp_name=t0"])
    assert check_rules(cfg) == []


# Each batch/layout refusal of MindSpeed-RL's validate_rl_args (mindspeed_rl/config_cls/validate_config.py,
# master 05a90d7) that our schema can express, as (its inner check, overrides on the 7B A3 config that
# break it). Our rules must refuse every one: a config MindSpeed-RL refuses at launch never launches.
VALIDATE_RL_ARGS = [
    ("_validate_resource: num_npus % (TP*PP*CP)", ["actor_config.tensor_model_parallel_size=3"]),
    ("_validate_batch_ratio: (gbs*n) % micro_batch_size", ["actor_config.micro_batch_size=3"]),
    ("_validate_data_parallel (Actor): gbs % DP", ["megatron_training.global_batch_size=6",
                                                    "rl_config.mini_batch_size=6"]),
    ("_validate_data_parallel (Actor): (gbs/DP*n) % micro_batch_size",
     ["actor_config.micro_batch_size=32", "rl_config.n_samples_per_prompt=2"]),
    ("_validate_data_parallel (Generation): gbs % generation DP",
     ["megatron_training.global_batch_size=4", "rl_config.mini_batch_size=4",
      "generate_config.infer_tensor_parallel_size=1", "actor_config.micro_batch_size=1"]),
    ("infer_pipeline_parallel_size > 1", ["generate_config.infer_pipeline_parallel_size=2"]),
    ("max_model_len < seq_length", ["megatron_training.seq_length=8192"]),
    ("len(verifier_function) != len(verifier_weight)", ["rl_config.verifier_weight=[1.0,0.5]"]),
]


@pytest.mark.parametrize("check, overrides", VALIDATE_RL_ARGS, ids=[c for c, _ in VALIDATE_RL_ARGS])
def test_what_validate_rl_args_refuses_is_refused_before_launch(check, overrides):
    with pytest.raises(UserError):
        compose("7b", overrides)


def test_a_config_validate_rl_args_accepts_passes(bases):
    """The shipped 7B A3 config and its layouts obey every validate_rl_args rule (see the cases above)."""
    for layout in ("tp4_pp1", "tp2_pp2", "tp4_pp2"):
        assert check_rules(compose("7b", [f"layout={layout}", "actor_config.micro_batch_size=2"])) == []


def test_every_verifier_we_accept_is_one_mindspeeds_registry_knows():
    """mindspeed_rl/models/rule_verifier.py, compute_verifier_score: its rule_verifier_function registry.
    MindSpeed-RL skips an unknown name silently (the reward loses that term); we refuse it. (The embedded engine
    scores all but retool_reward, and math_verify_reward only where the math-verify package is installed.)"""
    from typing import get_args

    from grpo.config.schema import VerifierName

    registry = {"acc", "format", "step", "strict_format", "base_acc", "math_17k_acc", "acc_for_dapo", "acc_for_ppo",
                "math_verify_reward", "retool_reward"}
    assert set(get_args(VerifierName)) <= registry
    with pytest.raises(UserError) as info:
        compose("7b", ["rl_config.verifier_function=[accuracy]"])
    assert "rl_config.verifier_function" in str(info.value)
