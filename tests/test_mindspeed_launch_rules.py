"""The long tail of ``validate_rl_args``, refused in preflight with one line naming the key.

Each case mirrors one check of ``mindspeed_rl/config_cls/validate_config.py`` (``validate_rl_args``,
MindSpeed-RL 05a90d7; the line of that file is in the comment). The base config (Qwen2.5-7B A3, TP2 PP2 on
16 NPUs: train DP 4, generation DP 8; global_batch_size 32, n_samples_per_prompt 8, mini_batch_size 32)
passes every rule, and so does every GRPO recipe MindSpeed-RL ships.
"""

from pathlib import Path

import pytest
from mindspeed_helpers import config, make_weights, settings_for

from grpo.config import load_config
from grpo.sweep.backends.mindspeed.backend import MindSpeedBackend
from grpo.sweep.backends.mindspeed.rules import actor_key, launch_rule_problems

RECIPES = Path(__file__).parent / "data" / "mindspeed_recipes"

CASES = [
    # l.22: ai_framework not None and != "mindspore"
    (("+actor_config.ai_framework=jax",), "actor_config.ai_framework"),
    # l.38: integrated worker and reward_resource set
    (("+rl_config.reward_resource={num_npus:8}",), "rl_config.reward_resource"),
    # l.56: CP > 1 with an unknown context_parallel_algo
    (("actor_config.context_parallel_size=2", "actor_config.tensor_model_parallel_size=2",
      "actor_config.pipeline_model_parallel_size=1", "+actor_config.context_parallel_algo=ring"),
     "actor_config.context_parallel_algo"),
    # l.64: use_remove_padding with PP > 1 needs no_pad_to_seq_lengths
    (("+rl_config.use_remove_padding=true", "+megatron_training.reset_attention_mask=true"),
     "megatron_training.no_pad_to_seq_lengths"),
    # l.70: use_remove_padding needs reset_attention_mask
    (("+rl_config.use_remove_padding=true", "+megatron_training.no_pad_to_seq_lengths=true"),
     "megatron_training.reset_attention_mask"),
    # l.74: use_remove_padding refuses multimodal models
    (("+rl_config.use_remove_padding=true", "+megatron_training.no_pad_to_seq_lengths=true",
      "+megatron_training.reset_attention_mask=true", "+rl_config.is_multimodal=true"), "rl_config.use_remove_padding"),
    # l.288: share_backbone needs lora_target_modules
    (("+rl_config.share_backbone=true",), "rl_config.share_backbone"),
    # l.194 (_validate_data_parallel "Generation"): (gbs // gen DP * n) % actor_rollout_dispatch_size
    (("+rl_config.actor_rollout_dispatch_size=5",), "rl_config.actor_rollout_dispatch_size"),
    # l.376 (_validate_dispatch_size): more than one DP rank's gbs*n//DP = 64 responses
    (("+rl_config.actor_logprob_dispatch_size=128",), "rl_config.actor_logprob_dispatch_size"),
    (("+rl_config.ref_dispatch_size=128",), "rl_config.ref_dispatch_size"),
    # l.311 (_validate_experience_ratio): gbs*n = 256 % size
    (("+rl_config.actor_logprob_dispatch_size=3",), "rl_config.actor_logprob_dispatch_size"),
    (("+rl_config.adv_dispatch_size=3",), "rl_config.adv_dispatch_size"),
    # l.367: actor_update_dispatch_size < mini_batch_size / DP = 32 / 4
    (("+rl_config.actor_update_dispatch_size=4",), "rl_config.actor_update_dispatch_size"),
    # l.480, l.484: overlong buffer below max_tokens, rollout_max_tokens == max_tokens
    (("+rl_config.overlong_buffer_enable=true", "+rl_config.overlong_buffer=4096"), "rl_config.overlong_buffer"),
    (("+rl_config.overlong_buffer_enable=true", "+rl_config.overlong_buffer=512", "+rl_config.rollout_max_tokens=1024"),
     "rl_config.rollout_max_tokens"),
    # l.491: clip_ratio_low > clip_ratio_high with clip_higher_enable: a config rule for every backend
    # (grpo/config/rules.py clip_higher_ratios, tests/test_config_rules.py)
    # l.500: filter_groups_metric must be a verifier_function
    (("+rl_config.filter_groups_enable=true", "+rl_config.filter_groups_metric=strict_format",
      "+rl_config.filter_groups_train_batch_size=32"), "rl_config.filter_groups_metric"),
    # l.506: partial rollout and guarantee_order
    (("+rl_config.partial_rollout_max_split=2", "rl_config.guarantee_order=true"), "rl_config.guarantee_order"),
    # l.513, l.517: multi-turn budget and async engine
    (("+rl_config.multi_turn_enable=true", "+rl_config.max_total_response_length=100", "+rl_config.async_engine=true"),
     "rl_config.max_total_response_length"),
    (("+rl_config.multi_turn_enable=true", "+rl_config.max_total_response_length=4096"), "rl_config.async_engine"),
]


@pytest.mark.parametrize("overrides, key", CASES, ids=[key + "-" + ov[-1] for ov, key in CASES])
def test_each_long_tail_launch_rule_refuses_with_one_line_naming_the_key(overrides, key):
    cfg = config(*overrides)
    problems = launch_rule_problems(cfg)
    assert len(problems) == 1, problems
    assert problems[0].startswith(f"{cfg._source}: {key}: ") and "\n" not in problems[0]


def test_the_base_config_and_compliant_long_tail_settings_pass():
    assert launch_rule_problems(config()) == []
    fine = config("+rl_config.use_remove_padding=true", "+megatron_training.no_pad_to_seq_lengths=true",
                  "+megatron_training.reset_attention_mask=true", "+rl_config.actor_rollout_dispatch_size=8",
                  "+rl_config.actor_logprob_dispatch_size=16", "+rl_config.actor_update_dispatch_size=8",
                  "+rl_config.adv_dispatch_size=32", "+rl_config.ref_dispatch_size=64")
    assert launch_rule_problems(fine) == []


def test_the_backend_check_refuses_them_too(tmp_path):
    backend = MindSpeedBackend(settings_for(make_weights(tmp_path / "w")))
    assert any(": megatron_training.reset_attention_mask: " in p
               for p in backend.check(config("+rl_config.use_remove_padding=true",
                                             "+megatron_training.no_pad_to_seq_lengths=true")))



def test_the_engines_loss_aggregation_switch_is_refused_for_mindspeed(tmp_path):
    """MindSpeed-RL's GRPO loss has no aggregation switch (grpo_actor_loss_func.py: masked_mean over the micro
    batch; token_level_loss only switches the DAPO loss): a seq-mean trial would silently run token-mean."""
    backend = MindSpeedBackend(settings_for(make_weights(tmp_path / "w")))
    assert not any("loss_agg_mode" in p for p in backend.check(config()))
    problems = backend.check(config("engine.loss_agg_mode=seq-mean-token-mean"))
    assert any(": engine.loss_agg_mode: seq-mean-token-mean is the embedded engine's" in p for p in problems)

def test_dynamic_sampling_and_kl_in_reward_are_refused_where_mindspeed_rl_ignores_them(tmp_path):
    """RayGRPOTrainer (grpo_trainer_hybrid.py, run by cli/train_grpo.py) has no dynamic sampling: only
    RayDAPOTrainer (dapo_trainer_hybrid.py) reads filter_groups_*; use_kl_in_reward is read by RayPPOTrainer
    (ppo_trainer_hybrid.py) alone. A trial with either would silently train plain GRPO."""
    backend = MindSpeedBackend(settings_for(make_weights(tmp_path / "w")))
    assert not any("filter_groups_enable" in p or "use_kl_in_reward" in p for p in backend.check(config()))
    problems = backend.check(config("+rl_config.filter_groups_enable=true", "+rl_config.use_kl_in_reward=true"))
    assert any(": rl_config.filter_groups_enable: MindSpeed-RL's GRPO loss" in p for p in problems), problems
    assert any(": rl_config.use_kl_in_reward: MindSpeed-RL applies it in its PPO trainer only" in p for p in problems)


def test_a_megatron_key_is_read_as_mindspeeds_merge_reads_it():
    """cli/train_grpo.py parse_training_config: MegatronConfig({**megatron_training, **actor_config}, model)."""
    cfg = config("+megatron_training.reset_attention_mask=true", "+actor_config.reset_attention_mask=false")
    assert actor_key(cfg, "reset_attention_mask") is False  # actor_config wins
    assert actor_key(config("+megatron_training.reset_attention_mask=true"), "reset_attention_mask") is True
    assert actor_key(config(), "reset_attention_mask") is False  # MegatronConfig's default


@pytest.mark.parametrize("recipe", sorted(p.name for p in RECIPES.glob("grpo_*.yaml")))
def test_every_mindspeed_recipe_passes_every_launch_rule(recipe):
    """MindSpeed-RL's own recipes (configs/grpo_*.yaml, written as ours) start under validate_rl_args."""
    assert launch_rule_problems(load_config(RECIPES / recipe)) == []


# ------------------------------------------------------- what the embedded engine cannot honour
# MindSpeed-RL spells RoPE scaling as Megatron keys (mindspeed_rl/config_cls/megatron_config.py, MegatronConfig:
# rope_scaling_type, rope_scaling_factor ...; configs/model/deepseekv3_671b.yaml sets yarn, factor 40); a Hugging
# Face config.json as rope_scaling / use_sliding_window. MindSpeed-RL honours them; the embedded engine refuses them.
def test_the_embedded_engine_refuses_rope_scaling_naming_the_key():
    from grpo.engine.check import check_config

    for override, key in (("+model.tiny_qwen.rope_scaling_type=yarn", "rope_scaling_type"),
                          ("+megatron_training.rope_scaling_factor=4.0", "rope_scaling_factor")):
        problems = check_config(load_config("grpo_trainer_tiny_cpu", [override]))
        assert [p for p in problems if f": model.tiny_qwen.{key}: RoPE scaling" in p], problems
    assert not [p for p in check_config(load_config("grpo_trainer_tiny_cpu")) if "RoPE" in p]
    deepseek = check_config(load_config(RECIPES / "grpo_deepseek_r1_671b_A3.yaml"))
    assert any(".rope_scaling_type: RoPE scaling (yarn)" in p for p in deepseek)


@pytest.mark.parametrize("extra, words", [
    ({"rope_scaling": {"type": "yarn", "factor": 4.0}}, "rope_scaling is 'yarn'"),
    ({"rope_scaling": {"rope_type": "linear", "factor": 2.0}}, "rope_scaling is 'linear'"),
    ({"use_sliding_window": True, "sliding_window": 4096}, "use_sliding_window is true"),
])
def test_a_hf_config_with_rope_scaling_or_a_sliding_window_is_refused(tmp_path, extra, words):
    import json

    from grpo.engine.hf_checkpoint import read_model_args
    from grpo.errors import UserError

    qwen = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
            "vocab_size": 256, "rope_scaling": None, "use_sliding_window": False, "sliding_window": 131072}
    (tmp_path / "config.json").write_text(json.dumps({**qwen, **extra}))
    with pytest.raises(UserError, match=words):
        read_model_args(tmp_path)
