"""The typed schema of a grpo_trainer config: one pydantic model per MindSpeed-RL section.

Every parameter of the MindSpeed-RL GRPO reference (shared/seed) and of MindSpeed-RL's own
`grpo_trainer_qwen25_7b_A3.yaml` is a field with a default, a one-line description, its range and
its allowed values. Unknown keys are errors everywhere (``extra="forbid"``). Checks that involve
more than one field live in ``rules.py``; single-field ranges live here so the message names the
field and the offending value.

Fields whose default is ``None`` mean "not set: MindSpeed-RL's own default applies"; the renderer
leaves them out so versions of MindSpeed-RL that do not know the key still accept the YAML.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, PrivateAttr, field_validator, model_validator

from grpo.errors import UserError

# The names MindSpeed-RL's rule verifier knows (mindspeed_rl/models/rule_verifier.py); the embedded engine
# scores a subset (grpo.engine.rewards.VERIFIERS; grpo.engine.check refuses the others before launch).
VerifierName = Literal[
    "acc", "base_acc", "math_17k_acc", "strict_format", "format", "step",
    "math_verify_reward", "acc_for_dapo", "acc_for_ppo", "retool_reward",
]  # fmt: skip


class Section(BaseModel):
    """Base of every section: unknown keys are errors, values are checked on assignment too."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, populate_by_name=True)


# --------------------------------------------------------------------------------------------- model
class ModelConfig(Section):
    """Network architecture, one entry of `model:` (MindSpeed-RL's configs/model/<name>.yaml)."""

    use_mcore_models: bool = Field(True, description="Build the network with Megatron-core models.")
    num_layers: int = Field(gt=0, description="Number of transformer layers.")
    hidden_size: int = Field(gt=0, description="Hidden (model) dimension.")
    ffn_hidden_size: int = Field(gt=0, description="Inner dimension of the MLP (SwiGLU) block.")
    num_attention_heads: int = Field(gt=0, description="Number of query attention heads.")
    group_query_attention: bool = Field(False, description="Use grouped-query attention (num_query_groups KV heads).")
    num_query_groups: int = Field(
        1, gt=0, description="Number of key/value head groups when group_query_attention is on."
    )
    padded_vocab_size: int = Field(gt=0, description="Vocabulary size after padding (embedding rows).")
    make_vocab_size_divisible_by: int = Field(1, ge=1, description="Pad the vocabulary to a multiple of this.")
    max_position_embeddings: int = Field(gt=0, description="Longest sequence the position encoding supports.")
    position_embedding_type: Literal["rope", "learned_absolute"] = Field("rope", description="Position encoding.")
    rotary_base: float = Field(10000.0, gt=0, description="RoPE base frequency (theta).")
    normalization: Literal["RMSNorm", "LayerNorm"] = Field("RMSNorm", description="Normalisation layer type.")
    norm_epsilon: float = Field(1e-6, gt=0, description="Epsilon of the normalisation layers.")
    swiglu: bool = Field(True, description="Use the SwiGLU activation in the MLP.")
    add_qkv_bias: bool = Field(True, description="Add a bias to the Q, K and V projections (Qwen2 does).")
    disable_bias_linear: bool = Field(True, description="No bias in the other linear layers.")
    untie_embeddings_and_output_weights: bool = Field(
        True, description="Separate input embedding and output projection weights."
    )
    attention_softmax_in_fp32: bool = Field(True, description="Compute the attention softmax in fp32.")

    @property
    def effective_query_groups(self) -> int:
        """Key/value heads actually used: num_query_groups with GQA, else one per attention head."""
        return self.num_query_groups if self.group_query_attention else self.num_attention_heads


# --------------------------------------------------------------------------------- megatron_training
class MegatronTrainingConfig(Section):
    """Training-engine defaults shared by every model (MindSpeed-RL `megatron_training`)."""

    model: str = Field(description="Name of the model (a key of `model`, picked by the defaults list).")
    stage: Literal["ray_grpo"] = Field("ray_grpo", description="Training algorithm; Ray GRPO training needs ray_grpo.")
    global_batch_size: int = Field(
        32, gt=0, description="Prompts per iteration; actor and rollout weights are synchronised after each."
    )
    data_path: str = Field("./dataset/data", description="Dataset path prefix (MindSpeed style, e.g. /dataset/data).")
    tokenizer_type: str = Field(
        "PretrainedFromHF", description="Tokenizer family (PretrainedFromHF loads a HF folder)."
    )
    tokenizer_name_or_path: str | None = Field(
        None, description="Tokenizer folder (a Hugging Face checkpoint folder); null = the engine's built-in tokenizer."
    )
    seq_length: int = Field(
        2048, gt=0, description="Training sequence length (must fit in generate_config.max_model_len)."
    )
    train_iters: int = Field(1000, gt=0, description="Number of GRPO iterations.")
    save_interval: int = Field(200, gt=0, description="Save a checkpoint every this many iterations.")
    seed: int = Field(1234, ge=0, description="Random seed of training and data order.")
    recompute_granularity: Literal["full", "selective"] | None = Field(
        None, description="Activation recomputation: full keeps only layer inputs; null = off."
    )
    recompute_method: Literal["uniform", "block"] | None = Field(
        None, description="Full recompute: uniform splits layers into groups, block recomputes the first N layers."
    )
    recompute_num_layers: int | None = Field(
        None, ge=1, description="Layers per recompute group (uniform) or recomputed layers (block)."
    )
    use_mcore_models: bool = Field(True, description="Use Megatron-core model implementations.")
    use_fused_rmsnorm: bool = Field(True, description="Use the fused RMSNorm kernel.")
    use_fused_swiglu: bool = Field(True, description="Use the fused SwiGLU kernel.")
    use_fused_rotary_pos_emb: bool = Field(True, description="Use the fused rotary embedding kernel.")
    use_flash_attn: bool = Field(True, description="Use flash attention.")
    sequence_parallel: bool = Field(False, description="Megatron sequence parallelism (needs TP > 1).")
    use_distributed_optimizer: bool = Field(True, description="Shard optimizer state across data-parallel ranks.")
    no_masked_softmax_fusion: bool = Field(True, description="Disable the fused masked softmax kernel.")
    attention_softmax_in_fp32: bool = Field(True, description="Compute the attention softmax in fp32.")
    no_gradient_accumulation_fusion: bool = Field(True, description="Disable fused gradient accumulation.")
    bf16: bool = Field(True, description="Train in bfloat16.")
    attention_dropout: float = Field(0.0, ge=0, lt=1, description="Dropout probability on attention weights.")
    hidden_dropout: float = Field(0.0, ge=0, lt=1, description="Dropout probability on hidden states.")
    init_method_std: float = Field(0.01, gt=0, description="Standard deviation of the weight initialisation.")
    distributed_backend: Literal["nccl", "hccl", "gloo"] = Field("nccl", description="torch.distributed backend.")
    no_shared_storage: bool = Field(True, description="Nodes do not share a file system.")
    dataset_additional_keys: list[str] = Field(
        default_factory=lambda: ["labels"], description="Extra dataset columns kept with each prompt (e.g. labels)."
    )
    split: str = Field("100,0,0", description="Train,valid,test split of the dataset in percent.")
    no_shuffle: bool = Field(False, description="Do not shuffle the dataset.")
    full_shuffle_instruction_dataset: bool = Field(False, description="Shuffle the whole instruction dataset at once.")


# -------------------------------------------------------------------------------------- actor_config
class ActorConfig(Section):
    """Training settings of the actor (and reference) model (MindSpeed-RL `actor_config`)."""

    model: str = Field(description="Name of the actor model (a key of `model`).")
    micro_batch_size: int = Field(
        1, gt=0, description="Responses per forward/backward pass (gradient accumulation unit)."
    )
    tensor_model_parallel_size: int = Field(1, ge=1, description="Training tensor-parallel size (TP).")
    pipeline_model_parallel_size: int = Field(1, ge=1, description="Training pipeline-parallel size (PP).")
    lr: float = Field(1e-6, gt=0, description="Peak learning rate.")
    lr_decay_style: Literal["constant", "linear", "cosine"] = Field("constant", description="Learning-rate schedule.")
    min_lr: float = Field(0.0, ge=0, description="Learning rate at the end of the decay.")
    lr_warmup_fraction: float = Field(0.0, ge=0, le=1, description="Fraction of train_iters spent warming up the lr.")
    weight_decay: float = Field(0.01, ge=0, description="AdamW weight decay against overfitting.")
    clip_grad: float = Field(1.0, ge=0, description="Gradient-norm clipping threshold (0 = off).")
    adam_beta1: float = Field(0.9, ge=0, lt=1, description="Adam beta1.")
    adam_beta2: float = Field(0.95, ge=0, lt=1, description="Adam beta2.")
    finetune: bool = Field(
        True, description="Load weights only and restart the iteration count (false = resume a training run)."
    )
    load: str | None = Field(None, description="Checkpoint folder to load; null = a freshly built (cached) policy.")
    save: str | None = Field(None, description="Checkpoint folder to save into; null = no checkpoints.")
    no_load_optim: bool = Field(True, description="Do not load the optimizer state when loading.")
    no_load_rng: bool = Field(True, description="Do not load the random-generator state when loading.")
    no_save_optim: bool = Field(False, description="Do not save the optimizer state.")
    no_save_rng: bool = Field(False, description="Do not save the random-generator state.")


# ----------------------------------------------------------------------------------------- rl_config
class ResourceConfig(Section):
    """Devices given to one role."""

    num_npus: int = Field(1, ge=1, description="NPUs (or CPU slots) for the actor and reference models.")


class RLConfig(Section):
    """GRPO-specific parameters and resources (MindSpeed-RL `rl_config`).

    MindSpeed-RL multiplies mini_batch_size by n_samples_per_prompt internally: the YAML counts
    prompts, one optimizer step consumes mini_batch_size * n_samples_per_prompt responses.
    """

    use_integrated_worker: bool = Field(True, description="Colocate actor, reference and rollout on the same devices.")
    blocking: bool = Field(True, description="Run the stages synchronously (false = asynchronous).")
    guarantee_order: bool = Field(False, description="Keep sample order in the TransferDock.")
    gamma: float = Field(1.0, ge=0, le=1, description="Reward discount factor.")
    lam: float = Field(0.95, ge=0, le=1, description="GAE lambda.")
    actor_forward_micro_batch_size: int = Field(
        1, gt=0, description="Micro batch of the actor's log-prob forward pass."
    )
    ref_forward_micro_batch_size: int = Field(
        1, gt=0, description="Micro batch of the reference log-prob forward pass."
    )
    adv_estimator: Literal["group_norm", "gae"] = Field("group_norm", description="Advantage estimator.")
    kl_penalty: Literal["kl", "abs", "mse", "low_var_kl"] = Field(
        "low_var_kl", description="KL estimator of the KL term."
    )
    kl_ctrl_type: Literal["fixed", "adaptive"] = Field("fixed", description="KL coefficient control.")
    init_kl_coef: float = Field(0.01, ge=0, description="(Initial) weight of the KL loss.")
    kl_target: float = Field(0.1, gt=0, description="Target KL of the adaptive controller (kl_ctrl_type=adaptive).")
    kl_horizon: int = Field(10000, gt=0, description="Horizon (responses) of the adaptive KL controller.")
    mini_batch_size: int = Field(
        32, gt=0, description="Prompts per actor update (times n_samples_per_prompt responses)."
    )
    max_prompt_length: int = Field(2048, gt=0, description="Longest prompt in tokens.")
    epochs: int = Field(1, ge=1, description="Passes over each iteration's rollouts.")
    clip_ratio: float = Field(0.2, ge=0, le=1, description="PPO clip ratio of the policy loss; usually 0.1-0.3.")
    entropy_coeff: float = Field(0.0, ge=0, description="Weight of the entropy bonus.")
    n_samples_per_prompt: int = Field(8, ge=1, description="Responses generated per prompt (the GRPO group size).")
    shuffle_mini_batch: bool = Field(
        False,
        validation_alias=AliasChoices("shuffle_mini_batch", "shuffle_minibatch"),
        description="Shuffle responses into mini batches for the actor update (alias shuffle_minibatch).",
    )
    log_max_throughput: bool | None = Field(None, description="Report throughput from the slowest (max) stage time.")
    rule_reward: bool = Field(True, description="Score responses with rule-based verifiers.")
    verifier_function: list[VerifierName] = Field(
        default_factory=lambda: list[VerifierName](["base_acc"]),
        description="Rule-reward functions, e.g. [acc, strict_format].",
    )
    verifier_weight: list[float] = Field(
        default_factory=lambda: [1.0], description="Weight of each verifier_function, same length."
    )
    num_cpus_for_local_task: float = Field(1.0, gt=0, description="CPUs of each local Ray task.")
    use_tensorboard: bool = Field(False, description="Log to TensorBoard (ignored when use_wandb is on).")
    use_wandb: bool = Field(False, description="Log to Weights & Biases.")
    wandb_project: str = Field("", description="W&B project name.")
    wandb_exp_name: str = Field("", description="W&B experiment name.")
    wandb_save_dir: str = Field("", description="Local folder for W&B files.")
    actor_resource: ResourceConfig = Field(
        default_factory=ResourceConfig,
        description="Devices of the actor.",
    )

    @model_validator(mode="before")
    @classmethod
    def _one_spelling_of_shuffle(cls, data: Any) -> Any:
        """shuffle_minibatch (MindSpeed's example) and shuffle_mini_batch (its code) are one key."""
        if isinstance(data, dict) and "shuffle_minibatch" in data and "shuffle_mini_batch" in data:
            if data["shuffle_minibatch"] != data["shuffle_mini_batch"]:
                raise ValueError(
                    "rl_config.shuffle_minibatch and rl_config.shuffle_mini_batch are one key "
                    f"(got {data['shuffle_minibatch']} and {data['shuffle_mini_batch']}); set only one"
                )
            data = {k: v for k, v in data.items() if k != "shuffle_minibatch"}
        return data


# ----------------------------------------------------------------------------------- generate_config
class SamplingConfig(Section):
    """vLLM sampling parameters of the rollout."""

    logprobs: int = Field(1, ge=0, description="Top log-probabilities returned per token.")
    max_tokens: int = Field(2048, gt=0, description="Longest response in tokens.")
    top_p: float = Field(
        1.0, gt=0, le=1, description="Nucleus sampling: smallest token set with this total probability."
    )
    top_k: int = Field(
        -1,
        json_schema_extra={"allowed": "-1 or >= 1"},
        description="Sample among the top_k most likely tokens (-1 = all).",
    )
    min_p: float = Field(0.0, ge=0, lt=1, description="Drop tokens less likely than min_p times the top token.")
    temperature: float = Field(1.0, gt=0, description="Sampling temperature.")
    seed: int | None = Field(None, ge=0, description="Sampling seed (null = random).")
    detokenize: bool = Field(False, description="Turn output tokens back into text.")

    @field_validator("top_k")
    @classmethod
    def _top_k_all_or_positive(cls, value: int) -> int:
        if value != -1 and value < 1:
            raise ValueError(f"must be -1 (all tokens) or >= 1 (got {value})")
        return value


class GenerateConfig(Section):
    """Rollout (inference) settings: parallelism, weight resharding, vLLM engine, sampling."""

    trust_remote_code: bool = Field(True, description="Trust remote code of the tokenizer/model.")
    offload_train_optimizer: bool = Field(False, description="Offload the training optimizer during rollout.")
    offload_train_grad: bool = Field(False, description="Offload training gradients during rollout.")
    offload_train_param: bool = Field(False, description="Offload training weights during rollout.")
    infer_tensor_parallel_size: int = Field(1, ge=1, description="Rollout tensor-parallel size.")
    infer_pipeline_parallel_size: int = Field(
        1, ge=1, description="Rollout pipeline-parallel size (only 1 is supported)."
    )
    infer_expert_parallel_size: int = Field(1, ge=1, description="Rollout expert-parallel size (MoE models).")
    max_num_seqs: int = Field(1024, gt=0, description="Most sequences vLLM runs at once.")
    max_model_len: int = Field(4096, gt=0, description="Longest prompt + response vLLM handles.")
    max_num_batched_tokens: int = Field(8192, gt=0, description="Most tokens in one vLLM scheduler step.")
    enforce_eager: bool = Field(
        True, description="Run PyTorch eagerly (turn off only for DeepSeek V3 torchair graphs)."
    )
    torchair_graph: bool | None = Field(None, description="Torchair graph mode (DeepSeek V3).")
    enable_expert_parallel: bool | None = Field(None, description="Split MoE experts across devices.")
    dtype: Literal["bfloat16", "float16", "float32", "auto"] = Field("bfloat16", description="Rollout weight dtype.")
    gpu_memory_utilization: float = Field(0.5, gt=0, le=1, description="Share of device memory vLLM may use.")
    num_scheduler_steps: int = Field(1, ge=1, description="Sub-steps of one vLLM scheduling round.")
    sampling_config: SamplingConfig = Field(
        default_factory=SamplingConfig,
        description="Sampling parameters.",
    )


# -------------------------------------------------------------------------------------------- engine
class EngineConfig(Section):
    """grpo-sweep's own section for the embedded trainer (not MindSpeed's; never rendered)."""

    device: Literal["auto", "cpu", "cuda", "npu"] = Field(
        "auto", description="Where the embedded engine trains: auto = cuda or npu when present, else cpu."
    )
    num_threads: int = Field(1, ge=1, description="Torch threads per trial (also its Ray CPU request).")
    warm_start_steps: int = Field(200, ge=0, description="Supervised warm-start steps of a freshly built tiny policy.")
    cache_dir: str | None = Field(
        None, description="Cache of warm-started policies; null = $GRPO_CACHE_DIR or ~/.cache/grpo-sweep."
    )
    task: Literal["arithmetic", "dataset"] = Field(
        "arithmetic",
        description="Generated verifiable task the engine trains on; dataset = read megatron_training.data_path.",
    )
    task_size: int = Field(
        4096, ge=1, description="Number of generated training prompts (4096: a 150-iteration run sees each about once)."
    )
    task_seed: int = Field(
        1234,
        description=(
            "Seed of the generated task (prompts, held-out split) and of the warm start; fixed across a study's "
            "seeds, so every seed starts from the same base policy and is scored on the same held-out prompts."
        ),
    )
    eval_every: int | None = Field(None, ge=1, description="Evaluate every this many iterations (null = never).")
    eval_size: int = Field(
        256, ge=1, description="Held-out prompts of a generated task, scored greedily and sampled by eval."
    )
    recompute_old_logprobs: bool = Field(
        False, description="Recompute old log-probs by a forward pass (MindSpeed-RL) instead of the sampler's own."
    )
    keep_checkpoints: int | None = Field(
        None, ge=1, description="Newest checkpoints kept in actor_config.save (null = all); resuming needs the newest."
    )


# ------------------------------------------------------------------------------------------- the whole
class GRPOConfig(BaseModel):
    """One resolved grpo_trainer config: MindSpeed-RL's sections plus grpo-sweep's `engine` and `layout`."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    model: dict[str, ModelConfig] = Field(description="Architectures loaded by the defaults list, by name.")
    megatron_training: MegatronTrainingConfig
    actor_config: ActorConfig
    rl_config: RLConfig = Field(default_factory=RLConfig)
    generate_config: GenerateConfig = Field(default_factory=GenerateConfig)
    engine: EngineConfig = Field(
        default_factory=EngineConfig,
        description="grpo-sweep's embedded-engine settings.",
    )
    layout: str | None = Field(None, description="Name of the configs/layout entry applied (null = none).")

    # The file the config was composed from, as messages name it (set by load_config / config_from_dict).
    _source: str = PrivateAttr(default="config")

    @property
    def layout_name(self) -> str:
        """The layout entry applied, or the training split it amounts to (``tp2_pp2``)."""
        actor = self.actor_config
        return self.layout or f"tp{actor.tensor_model_parallel_size}_pp{actor.pipeline_model_parallel_size}"

    @property
    def model_arch(self) -> ModelConfig:
        """The architecture the actor trains: ``model[actor_config.model]``."""
        name = self.actor_config.model
        if name not in self.model:
            raise UserError(
                f"{self._source}: actor_config.model: '{name}' is not loaded by the defaults list "
                f"(loaded: {', '.join(sorted(self.model)) or 'none'})"
            )
        return self.model[name]

    def to_dict(self) -> dict[str, Any]:
        """Plain nested dict of every field; ``GRPOConfig.model_validate(cfg.to_dict())`` gives it back."""
        return self.model_dump(mode="json")
