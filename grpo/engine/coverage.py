"""Every config key, classified for the embedded engine: applied, refused, or no effect on the outcome.

One table (``TABLE``) for every key of MindSpeed-RL's config classes (the manifest, ``grpo/config/manifest.py``)
and of the schema (``grpo/config/schema/``, grpo-sweep's ``engine`` section included):

- ``applied``: the engine reads it and trains as it says (some applied keys take only some values;
  ``check.py`` refuses the others in one line each);
- ``refused``: the engine does not carry it out; a value other than the one it does carry out is an error
  before launch, one line naming the key and ``backend: mindspeed``, which applies it;
- ``no effect``: it cannot change what is trained on this engine: speed, memory, parallel layout, logging
  and tracking (tracking keys are honoured), or a key only a refused feature reads.

Megatron keys are one namespace (``megatron.<key>``): MindSpeed-RL merges the model file,
``megatron_training`` and ``actor_config`` into one config, so a key means the same wherever it is written.
``tools/key_table.py`` writes ``docs/keys.md`` from this table; tests/test_engine_key_coverage.py fails when a
manifest or schema key is missing here or the doc is stale. No torch here: the driver and the CLI import it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, Any

from grpo.config.inert import MEGATRON_SECTIONS, key_name
from grpo.config.manifest import manifest_keys

if TYPE_CHECKING:
    from grpo.config import GRPOConfig


class Kind(str, Enum):
    APPLIED = "applied"
    REFUSED = "refused"
    NO_EFFECT = "no effect"


@dataclass(frozen=True)
class KeyClass:
    """One key: its namespace-qualified name, kind, reason, and for a refused key the values carried out."""

    name: str  # megatron.lr, rl_config.clip_ratio, generate_config.sampling_config.top_p, engine.task ...
    kind: Kind
    reason: str
    # refused keys: is this value one the engine carries out (default: null or the manifest default)?
    carried_out: Callable[[Any], bool] | None = None
    # refused keys that check.py refuses with a message of its own (not the table's generic line)
    own_check: bool = False


MEGATRON = "megatron"
RL, GEN, SAMPLING, ENGINE = "rl_config", "generate_config", "generate_config.sampling_config", "engine"
PROFILER, MSPROBE = "profiler_config.integrated", "msprobe_config"
TOP = ""  # top-level keys of the config (sections and the layout choice)

TABLE: dict[str, KeyClass] = {}


def _add(kind: Kind, section: str, reason: str, *keys: str, **extra: Any) -> None:
    for key in keys:
        name = f"{section}.{key}" if section else key
        assert name not in TABLE, f"{name} classified twice"
        TABLE[name] = KeyClass(name, kind, reason, **extra)


def applied(section: str, reason: str, *keys: str, **extra: Any) -> None:
    _add(Kind.APPLIED, section, reason, *keys, **extra)


def refused(section: str, reason: str, *keys: str, **extra: Any) -> None:
    _add(Kind.REFUSED, section, reason, *keys, **extra)


def no_effect(section: str, reason: str, *keys: str) -> None:
    _add(Kind.NO_EFFECT, section, reason, *keys)


def _one_of(*values: Any) -> Callable[[Any], bool]:
    return lambda value: value is None or value in values


# ------------------------------------------------------------------------------------------- megatron
M = MEGATRON
QWEN2_ONLY = "the Qwen2 decoder is built from it; other values are refused in one line (backend: mindspeed)"
applied(M, "architecture of the decoder the engine builds", "num_layers", "hidden_size", "ffn_hidden_size",
        "num_attention_heads", "group_query_attention", "num_query_groups", "padded_vocab_size",
        "max_position_embeddings", "rotary_base", "norm_epsilon", "add_qkv_bias",
        "untie_embeddings_and_output_weights")  # fmt: skip
applied(M, f"Qwen2 value only: {QWEN2_ONLY}", "kv_channels", "position_embedding_type", "normalization", "swiglu",
        "qk_layernorm", "num_experts", "multi_latent_attention", "disable_bias_linear")  # fmt: skip
applied(M, "picks the architecture (a key of `model`)", "model")
refused(M, "RoPE scaling: the engine's rotary embedding is unscaled", "rope_scaling_type", "rope_scaling_factor",
        own_check=True)  # fmt: skip
refused(M, "extra attention biases (attention_bias): the engine's Qwen2 has none", "attention_bias")
refused(M, "no-op layers inside num_layers: the engine would build them as real layers", "noop_layers")
refused(M, "extra tokenizer ids change the vocabulary", "vocab_extra_ids")
refused(M, "MindSpeed-RL's prompt template (prompt_type): the engine applies the tokenizer's own chat prompt",
        "prompt_type", "prompt_type_path")  # fmt: skip
refused(M, "tokenizer family: the engine loads Hugging Face tokenizers (PretrainedFromHF) only", "tokenizer_type",
        carried_out=_one_of("PretrainedFromHF"))  # fmt: skip
refused(M, "optimizer: the engine's is AdamW (adam)", "optimizer", carried_out=_one_of("adam"))
refused(M, "attention mask: the engine's is causal", "attention_mask_type", carried_out=_one_of("causal"))
refused(M, "skip_train: the engine always trains", "skip_train")
refused(M, "a separate pretrained checkpoint: the engine loads actor_config.load only", "pretrained_checkpoint")
refused(M, "a multimodal model: the engine trains text decoders", "mm_model")
applied(M, "training loop length, checkpoint interval, seed", "train_iters", "save_interval", "seed")
applied(M, "prompts per iteration", "global_batch_size")
applied(M, "responses per gradient-accumulation step (token-mean: each micro batch's mean weighs the same)",
        "micro_batch_size")  # fmt: skip
applied(M, "the dataset (engine.task: dataset) or where the generated task is written", "data_path")
applied(M, "train/held-out split of a dataset (engine.task: dataset)", "split")
applied(M, "seeded data order on or off", "no_shuffle")
applied(M, "tokenizer folder (null: the engine's built-in tokenizer)", "tokenizer_name_or_path")
applied(M, "weight initialisation of a freshly built policy", "init_method_std")
applied(M, "dropout in the training forward passes (the rollout has none)", "hidden_dropout", "attention_dropout")
applied(M, "AdamW and its learning-rate schedule", "lr", "lr_decay_style", "min_lr", "lr_warmup_fraction",
        "weight_decay", "clip_grad", "adam_beta1", "adam_beta2")  # fmt: skip
applied(M, "loading and saving checkpoints", "finetune", "load", "save", "no_load_optim", "no_load_rng",
        "no_save_optim", "no_save_rng")  # fmt: skip
applied(M, "LoRA adapters through peft (target names mapped to the Qwen2 modules)", "lora_r", "lora_alpha",
        "lora_target_modules")  # fmt: skip
no_effect(M, "checkpoint contents only (LoRA: adapters alone, or with the merged and base weights)", "lora_ckpt_filter")
no_effect(M, "speed: a fused LoRA kernel", "lora_fusion")
no_effect(M, "parallel layout: the same training on one device", "tensor_model_parallel_size",
          "pipeline_model_parallel_size", "context_parallel_size", "expert_model_parallel_size", "num_layer_list",
          "num_layers_per_virtual_pipeline_stage", "sequence_parallel", "use_distributed_optimizer",
          "use_tp_pp_dp_mapping", "context_parallel_algo")  # fmt: skip
no_effect(M, "speed or memory: kernel choice, fusion, overlap, recomputation, swapping", "use_mcore_models", "spec",
          "use_flash_attn", "use_fused_rmsnorm", "use_fused_swiglu", "use_fused_rotary_pos_emb",
          "no_masked_softmax_fusion", "attention_softmax_in_fp32", "no_gradient_accumulation_fusion",
          "gemm_gradient_accumulation_fusion", "no_bias_dropout_fusion", "shape_order", "moe_grouped_gemm",
          "moe_permutation_async_comm", "moe_tp_extend_ep", "moe_alltoall_overlap_comm",
          "use_fused_moe_token_permute_and_unpermute", "moe_token_dispatcher_type", "use_fused_ring_attention_update",
          "use_cp_send_recv_overlap", "use_ascend_coc", "coc_mode", "coc_parallel_num", "coc_fused_kernel",
          "overlap_grad_reduce", "overlap_param_gather", "reuse_fp32_param", "swap_attention", "swap_optimizer",
          "recompute_granularity", "recompute_method", "recompute_num_layers", "recompute_activation_function",
          "ddp_bucket_size", "accumulate_allreduce_grads_in_fp32", "transformer_impl", "use_kv_cache")  # fmt: skip
no_effect(M, "number format of a mixed-precision speed setting: the engine computes in float32", "bf16",
          "initial_loss_scale")  # fmt: skip
no_effect(M, "cluster plumbing: communication backend, storage, fault tolerance, framework", "distributed_backend",
          "no_shared_storage", "enable_high_availability", "ai_framework", "npu_deterministic")  # fmt: skip
no_effect(
    M,
    "NaN guard of Megatron: the engine always stops on a NaN or infinite loss or gradient",
    "no_check_for_nan_in_loss_and_grad",
)
no_effect(M, "logging and evaluation schedule of Megatron (bookkeeping)", "log_throughput", "log_interval",
          "eval_iters", "eval_interval")  # fmt: skip
no_effect(M, "padding, packing and loading of training batches: memory and speed", "seq_length",
          "variable_seq_lengths", "no_pad_to_seq_lengths", "pad_to_multiple_of", "reset_position_ids",
          "reset_attention_mask", "dataloader_type", "num_workers", "tokenizer_not_use_fast",
          "tokenizer_padding_side", "make_vocab_size_divisible_by", "load_checkpoint_loosely")  # fmt: skip
no_effect(M, "dataset format flags and columns: the engine reads prompt and label records itself",
          "is_instruction_dataset", "dataset_additional_keys", "full_shuffle_instruction_dataset")  # fmt: skip
no_effect(M, "only ray_grpo is accepted (schema)", "stage")
no_effect(M, "not GRPO: DPO, inference or reference-iteration settings that MindSpeed-RL's GRPO does not read",
          "algorithm", "dpo_loss_type", "ref_model", "refer_model_iter", "is_pairwise_dataset",
          "do_sample")  # fmt: skip
no_effect(M, "legacy Megatron flag: position_embedding_type decides", "use_rotary_position_embeddings")
no_effect(M, "mixture-of-experts routing: read only with num_experts, which the engine refuses",
          "moe_router_topk", "n_shared_experts", "moe_ffn_hidden_size", "first_k_dense_replace", "moe_layer_freq",
          "moe_router_load_balancing_type", "moe_router_num_groups", "moe_router_group_topk",
          "moe_router_topk_scaling_factor", "norm_topk_prob", "moe_router_score_function",
          "moe_router_enable_expert_bias", "seq_aux", "moe_aux_loss_coeff")  # fmt: skip
no_effect(M, "multi-head latent attention sizes: read only with multi_latent_attention, which the engine refuses",
          "q_lora_rank", "kv_lora_rank", "qk_head_dim", "qk_pos_emb_head_dim", "v_head_dim")  # fmt: skip
no_effect(M, "RoPE scaling details: read only with rope_scaling_type, which the engine refuses", "low_freq_factor",
          "high_freq_factor", "original_max_position_embeddings", "beta_fast", "beta_slow", "rope_scaling_mscale",
          "rope_scaling_mscale_all_dim", "rope_scaling_original_max_position_embeddings")  # fmt: skip

# ------------------------------------------------------------------------------------------ rl_config
applied(RL, "rule rewards (true only; check.py refuses false)", "rule_reward")
applied(RL, "scored verifiers and their weights (names the engine cannot score are refused by check.py)",
        "verifier_function", "verifier_weight")  # fmt: skip
applied(RL, "advantage estimator: group_norm (gae needs a critic and is refused by check.py)",
        "adv_estimator")  # fmt: skip
applied(RL, "GRPO group size, mini batch, epochs, shuffling", "n_samples_per_prompt", "mini_batch_size", "epochs",
        "shuffle_mini_batch")  # fmt: skip
applied(RL, "prompts longer than this are dropped", "max_prompt_length")
applied(RL, "policy loss: PPO clip, entropy bonus", "clip_ratio", "entropy_coeff")
applied(RL, "clip-higher: the asymmetric clip 1 - clip_ratio_low .. 1 + clip_ratio_high", "clip_higher_enable",
        "clip_ratio_low", "clip_ratio_high")  # fmt: skip
applied(RL, "loss aggregation: token mean (true) or sequence mean (false); engine.loss_agg_mode is the superset",
        "token_level_loss")  # fmt: skip
applied(RL, "KL term: estimator, coefficient, controller", "kl_penalty", "kl_ctrl_type", "init_kl_coef",
        "kl_target", "kl_horizon", "use_kl_in_reward")  # fmt: skip
applied(RL, "dynamic sampling (DAPO): groups of zero metric variance dropped, generation continued",
        "filter_groups_enable", "filter_groups_metric", "filter_groups_max_batches",
        "filter_groups_train_batch_size")  # fmt: skip
applied(RL, "overlong reward shaping (DAPO)", "overlong_buffer_enable", "overlong_buffer",
        "overlong_buffer_penalty_factor", "rollout_max_tokens")  # fmt: skip
applied(RL, "micro batch of the no-grad log-prob passes (speed and memory only)", "actor_forward_micro_batch_size",
        "ref_forward_micro_batch_size")  # fmt: skip
refused(RL, "a separate reference checkpoint (integrated_mode_config.ref_model_load_path): the engine's reference "
        "is the actor's starting weights", "integrated_mode_config",
        carried_out=lambda v: not (isinstance(v, dict) and v.get("ref_model_load_path")))  # fmt: skip
refused(RL, "a model-based reward: the engine scores with rule rewards only", "reward_resource")
refused(RL, "a critic model (PPO): the engine has none", "critic_resource")
refused(RL, "a vision encoder (multimodal): the engine trains text decoders", "vit_resource", "is_multimodal")
refused(RL, "partial rollouts across iterations (off-policy responses): the engine finishes every rollout",
        "partial_rollout_max_split", carried_out=lambda v: v is None or int(v) <= 1)  # fmt: skip
refused(RL, "multi-turn tool-calling rollouts: the engine generates single-turn responses", "multi_turn_enable")
no_effect(RL, "tracking (honoured: TensorBoard, Weights & Biases, SwanLab), never the training", "use_tensorboard",
          "use_wandb", "wandb_project", "wandb_exp_name", "wandb_save_dir", "use_swanlab", "swanlab_mode",
          "swanlab_project", "swanlab_exp_name", "swanlab_save_dir")  # fmt: skip
no_effect(RL, "throughput reporting", "log_max_throughput")
no_effect(RL, "PPO/GAE only (critic value clip, discount, GAE lambda, whitening): group_norm does not read them",
          "cliprange_value", "gamma", "lam", "advantage_whiten")  # fmt: skip
no_effect(RL, "declared by MindSpeed-RL's RLConfig but read by neither its GRPO actor loss nor its trainer", "beta",
          "num_samples_per_step", "verifier_parallel", "verifier_timeout")  # fmt: skip
no_effect(RL, "devices and placement: where it runs (engine.device decides here)", "actor_resource",
          "reference_resource", "use_integrated_worker", "num_cpus_for_local_task", "num_cpus_for_placement_group",
          "runtime_env_path", "hccl_buffersize", "tp_split_expert", "share_backbone")  # fmt: skip
no_effect(RL, "scheduling and data transport between workers", "blocking", "async_engine", "guarantee_order",
          "data_strategy", "transfer_queue_data_shard_num", "transfer_queue_data_shard_port_base",
          "zmq_communication", "use_dp_batch_balance", "require_max_age_all_finished")  # fmt: skip
no_effect(RL, "dispatch sizes: how many rows each stage hands a worker at once (speed only)",
          "actor_rollout_dispatch_size", "actor_logprob_dispatch_size", "ref_dispatch_size", "reward_dispatch_size",
          "dynamic_sampling_dispatch_size", "adv_dispatch_size", "actor_update_dispatch_size",
          "critic_update_dispatch_size", "critic_value_dispatch_size", "kl_dispatch_size",
          "actor_image_embeds_dispatch_size")  # fmt: skip
no_effect(RL, "padding removal and token-budget packing of micro batches (speed and memory)", "use_remove_padding",
          "use_dynamic_bsz", "max_packing_token_size", "ref_max_packing_token_size", "actor_max_packing_token_size",
          "update_max_packing_token_size", "dynamic_max_batch_size", "ref_dynamic_max_batch_size",
          "actor_dynamic_max_batch_size", "update_dynamic_max_batch_size")  # fmt: skip
no_effect(RL, "multimodal only (refused with is_multimodal)", "vit_forward_micro_batch_size", "reuse_image_embeds",
          "colocate_actor_and_vit")  # fmt: skip
no_effect(RL, "multi-turn tool calling only (refused with multi_turn_enable)", "tool_config_path", "max_tool_calls",
          "max_parallel_calls", "max_total_response_length", "max_tool_response_length",
          "tool_response_truncate_side", "tool_parser_format")  # fmt: skip

# ------------------------------------------------------------------------------------- generate_config
applied(GEN, "longest prompt + response of the rollout", "max_model_len")
applied(GEN, "sampling parameters", "sampling_config")
no_effect(GEN, "rollout engine (vLLM) parallelism, scheduling, memory and graph mode: speed and memory",
          "data_parallel_size", "infer_tensor_parallel_size", "infer_pipeline_parallel_size",
          "infer_expert_parallel_size", "max_num_seqs", "max_num_batched_tokens", "gpu_memory_utilization",
          "offload_train_optimizer", "offload_train_grad", "offload_train_param", "enable_prefix_caching",
          "num_scheduler_steps", "enforce_eager", "torchair_graph", "enable_expert_parallel",
          "ascend_scheduler_config_enabled", "eplb_token_collects", "eplb_token_save_path",
          "expert_map_path")  # fmt: skip
no_effect(GEN, "number format of the rollout weights: the engine samples in float32", "dtype")
no_effect(GEN, "tokenizer loading of the rollout engine: the rollout uses the training tokenizer",
          "tokenizer_name_or_path", "trust_remote_code")  # fmt: skip
no_effect(GEN, "multimodal only", "limit_mm_image_per_prompt", "limit_mm_video_per_prompt")
applied(SAMPLING, "sampling parameters of the rollout", "max_tokens", "top_p", "top_k", "min_p", "temperature",
        "seed")  # fmt: skip
no_effect(SAMPLING, "what the sampler returns besides the tokens (bookkeeping)", "logprobs", "detokenize")

# ------------------------------------------------------------------------------------------- engine
applied(ENGINE, "where and with how many threads the engine trains (device: numerics; threads: speed)",
        "device", "num_threads")  # fmt: skip
applied(ENGINE, "the generated task, its size and seed, the warm start of the tiny policy", "task", "task_size",
        "task_seed", "warm_start_steps")  # fmt: skip
applied(ENGINE, "held-out evaluation schedule and size (eval metrics only, not the training)", "eval_every",
        "eval_size")  # fmt: skip
applied(ENGINE, "a dataset's held-out file and its column names (engine.task: dataset; grpo.engine.datasets)",
        "eval_data_path", "data_fields")  # fmt: skip
applied(ENGINE, "stops after an iteration divisible by it, evaluated and checkpointed (a segment of a longer run)",
        "exit_interval")  # fmt: skip
applied(ENGINE, "old log-probs recomputed by a forward pass (MindSpeed-RL) or the sampler's", "recompute_old_logprobs")
applied(ENGINE, "loss aggregation (verl's modes; null: rl_config.token_level_loss decides)", "loss_agg_mode")
applied(ENGINE, "policy loss (vanilla, gspo) and advantage estimator (group_norm, group_norm_no_std)",
        "policy_loss", "advantage_estimator")  # fmt: skip
no_effect(ENGINE, "bookkeeping (honoured): cache folder, checkpoints kept, W&B and SwanLab mode and group, HParams",
          "cache_dir", "keep_checkpoints", "wandb_mode", "wandb_group", "swanlab_group", "trial_params")  # fmt: skip

# --------------------------------------------------------------------------- profiling, debugging, top
for _key in (
    "profile", "mstx", "stage", "profile_save_path", "profile_export_type", "profile_level", "profile_with_memory",
    "profile_record_shapes", "profile_with_cpu", "profile_with_npu", "profile_with_module", "profile_step_start",
    "profile_step_end", "profile_analysis", "profile_ranks",
):  # fmt: skip
    no_effect(PROFILER, "MindSpeed-RL's NPU profiler (observation only)", _key)
for _key in (
    "msprobe", "dump_path", "key_data_dump", "configurations_dump", "actor_train_dump", "actor_infer_dump",
    "token_range_start", "token_range_end", "reference_dump", "critic_train_dump", "step_start", "step_end",
):  # fmt: skip
    no_effect(MSPROBE, "MindSpeed-RL's msprobe precision dumps (observation only)", _key)
applied(TOP, "a config-group choice: the keys it sets are classified on their own", "layout", "algorithm")
applied(TOP, "values switched between iterations (grpo/config/schedule.py: SCHEDULABLE keys only)", "schedule")
refused(TOP, "backend verl's own settings (verl's config paths): backend verl only", "verl", own_check=True)
refused(TOP, "backend trl's own settings (trl.args: TRL GRPOConfig fields): backend trl only", "trl", own_check=True)
no_effect(TOP, "the reference's own Megatron settings: the engine's reference is the actor's starting weights, so "
          "only keys that would change it (load, model) are refused", "ref_config")  # fmt: skip
no_effect(TOP, "the reward model's Megatron settings: read only with rl_config.reward_resource, which is refused",
          "reward_config")  # fmt: skip
no_effect(
    TOP,
    "MindSpeed-RL's profiler and msprobe sections (observation only)",
    "profiler_config",
    "msprobe_config",
    "profiler_config.integrated",
)
applied(TOP, "sections whose keys are classified one by one", "model", "megatron_training", "actor_config",
        "rl_config", "generate_config", "engine")  # fmt: skip


# --------------------------------------------------------------------------------------------- lookups
def classify(path: str) -> KeyClass | None:
    """The table's entry for a config path (an override or search key), None for a key it does not know."""
    return TABLE.get(key_name(path))


def manifest_default(name: str) -> Any:
    """MindSpeed-RL's default of a table entry (None where the manifest has none)."""
    section, _, key = name.rpartition(".")
    manifest = {MEGATRON: "megatron", RL: "rl", GEN: "generate", SAMPLING: "sampling"}.get(section)
    if manifest is None:
        return None
    entry = manifest_keys(manifest).get(key)  # type: ignore[arg-type]
    return entry.get("default") if entry else None


def _setting(cfg: GRPOConfig, entry: KeyClass) -> Iterator[tuple[str, Any]]:
    """(config path, value) of every place ``cfg`` sets the key of ``entry``."""
    section, _, key = entry.name.rpartition(".")
    if section == MEGATRON:
        sections: list[tuple[str, Any]] = [(f"model.{name}", arch) for name, arch in cfg.model.items()]
        sections += [(s, getattr(cfg, s)) for s in MEGATRON_SECTIONS]
        for where, obj in sections:
            if obj is not None and key in obj.model_fields_set:
                yield f"{where}.{key}", getattr(obj, key)
    elif section == RL and key in cfg.rl_config.model_fields_set:
        yield entry.name, getattr(cfg.rl_config, key)
    elif section == TOP and key in cfg.model_fields_set:
        yield key, getattr(cfg, key)


def refusals(cfg: GRPOConfig) -> list[tuple[str, str]]:
    """(config path, why) for each refused key ``cfg`` sets to a value the engine would not carry out."""
    out: list[tuple[str, str]] = []
    for entry in TABLE.values():
        if entry.kind is not Kind.REFUSED or entry.own_check:
            continue
        ok = entry.carried_out or _one_of(manifest_default(entry.name))
        out += [(path, entry.reason) for path, value in _setting(cfg, entry) if not ok(value)]
    for role in ("ref_config", "reward_config"):
        section = getattr(cfg, role)
        if section is None:
            continue
        for key in ("model", "load"):
            mine, actor = getattr(section, key, None), getattr(cfg.actor_config, key)
            if key in section.model_fields_set and mine is not None and mine != actor:
                out.append((f"{role}.{key}", f"{mine} differs from actor_config.{key}: the engine's {role[:-7]} "
                            "model is the actor's starting weights"))  # fmt: skip
    return out


def searched_problems(keys: list[str], source: str) -> list[str]:
    """One line per searched key the embedded engine would not vary: refused, or no effect on the outcome."""
    out: list[str] = []
    for key in keys:
        entry = classify(key)
        if entry is None or entry.kind is Kind.APPLIED:
            continue
        if entry.kind is Kind.REFUSED:
            why = f"refused by the embedded engine ({entry.reason}); backend: mindspeed applies it"
        else:
            why = f"cannot change training on the embedded engine ({entry.reason}); searching it ranks seed noise"
        out.append(f"{source}: search.{key}: {why}")
    return out


def counts() -> dict[Kind, int]:
    return {kind: sum(1 for e in TABLE.values() if e.kind is kind) for kind in Kind}
