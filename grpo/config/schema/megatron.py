"""The Megatron sections: ``model`` entries, ``megatron_training``, ``actor_config``, the role sections."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field

from grpo.config.manifest import manifest_keys
from grpo.config.schema._base import Section, with_long_tail


class _ModelConfigBase(Section):
    """Network architecture, one entry of `model:` (MindSpeed-RL's configs/model/<name>.yaml)."""

    num_layers: int = Field(gt=0, description="Number of transformer layers (with noop_layers: including them).")
    hidden_size: int = Field(gt=0, description="Hidden (model) dimension.")
    ffn_hidden_size: int = Field(gt=0, description="Inner dimension of the MLP (SwiGLU) block of dense layers.")
    num_attention_heads: int = Field(gt=0, description="Number of query attention heads.")
    kv_channels: int | None = Field(
        None, gt=0, description="Per-head dimension of Q, K and V; null = hidden_size / num_attention_heads."
    )
    group_query_attention: bool = Field(False, description="Use grouped-query attention (num_query_groups KV heads).")
    num_query_groups: int = Field(
        1, gt=0, description="Number of key/value head groups when group_query_attention is on."
    )
    qk_layernorm: bool | None = Field(
        None, description="Normalise queries and keys per head (Qwen3, DeepSeek-V3); null = off."
    )
    padded_vocab_size: int = Field(gt=0, description="Vocabulary size after padding (embedding rows).")
    make_vocab_size_divisible_by: int = Field(128, ge=1, description="Pad the vocabulary to a multiple of this.")
    max_position_embeddings: int = Field(gt=0, description="Longest sequence the position encoding supports.")
    position_embedding_type: Literal["rope", "learned_absolute"] = Field(
        "learned_absolute", description="Position encoding."
    )
    rotary_base: float = Field(10000.0, gt=0, description="RoPE base frequency (theta).")
    normalization: Literal["RMSNorm", "LayerNorm"] = Field("LayerNorm", description="Normalisation layer type.")
    norm_epsilon: float = Field(1e-5, gt=0, description="Epsilon of the normalisation layers.")
    swiglu: bool = Field(False, description="Use the SwiGLU activation in the MLP.")
    add_qkv_bias: bool = Field(False, description="Add a bias to the Q, K and V projections (Qwen2 does).")
    disable_bias_linear: bool = Field(False, description="No bias in the other linear layers.")
    untie_embeddings_and_output_weights: bool = Field(
        False, description="Separate input embedding and output projection weights."
    )
    # Mixture of experts (Qwen3-MoE, DeepSeek-V3); null = not set, so a dense model renders none of these.
    num_experts: int | None = Field(None, gt=0, description="Routed experts per MoE layer; null = a dense model.")
    moe_router_topk: int | None = Field(None, ge=1, description="Routed experts each token goes through; null = 2.")
    moe_ffn_hidden_size: int | None = Field(None, gt=0, description="Inner dimension of one expert's MLP.")
    n_shared_experts: int | None = Field(None, ge=0, description="Experts every token goes through (DeepSeek-V3).")
    first_k_dense_replace: int | None = Field(None, ge=0, description="The first k layers stay dense (DeepSeek-V3).")
    moe_layer_freq: int | None = Field(None, ge=1, description="Every n-th layer (after the dense ones) is MoE.")
    # Multi-head latent attention (DeepSeek-V3).
    multi_latent_attention: bool | None = Field(
        None, description="Multi-head latent attention (MLA) instead of GQA; null = off."
    )
    q_lora_rank: int | None = Field(None, gt=0, description="MLA: rank of the compressed query projection.")
    kv_lora_rank: int | None = Field(None, gt=0, description="MLA: rank of the compressed key/value projection.")
    qk_head_dim: int | None = Field(None, gt=0, description="MLA: per-head query/key dimension without RoPE.")
    qk_pos_emb_head_dim: int | None = Field(None, gt=0, description="MLA: per-head query/key RoPE dimension.")
    v_head_dim: int | None = Field(None, gt=0, description="MLA: per-head value dimension.")

    @property
    def effective_query_groups(self) -> int:
        """Key/value heads actually used: num_query_groups with GQA, else one per attention head."""
        return self.num_query_groups if self.group_query_attention else self.num_attention_heads

    @property
    def head_dim(self) -> int:
        """Per-head dimension of Q, K and V: kv_channels, else hidden_size / num_attention_heads."""
        return self.kv_channels or self.hidden_size // self.num_attention_heads

    @property
    def architecture(self) -> str:
        """``dense``, ``MoE (128 experts, top-8)``, ``MoE (256 experts, top-8) + MLA``: what kind of network."""
        kinds = []
        if self.num_experts:
            kinds.append(f"MoE ({self.num_experts} experts, top-{self.moe_router_topk or 2})")
        if self.multi_latent_attention:
            kinds.append("MLA")
        return " + ".join(kinds) or "dense"


# --------------------------------------------------------------------------------- megatron_training
class _MegatronTrainingConfigBase(Section):
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
    use_mcore_models: bool = Field(False, description="Use Megatron-core model implementations.")
    use_fused_rmsnorm: bool = Field(False, description="Use the fused RMSNorm kernel.")
    use_fused_swiglu: bool = Field(False, description="Use the fused SwiGLU kernel.")
    use_fused_rotary_pos_emb: bool = Field(False, description="Use the fused rotary embedding kernel.")
    use_flash_attn: bool = Field(False, description="Use flash attention.")
    sequence_parallel: bool = Field(False, description="Megatron sequence parallelism (needs TP > 1).")
    use_distributed_optimizer: bool = Field(False, description="Shard optimizer state across data-parallel ranks.")
    no_masked_softmax_fusion: bool = Field(False, description="Disable the fused masked softmax kernel.")
    attention_softmax_in_fp32: bool = Field(False, description="Compute the attention softmax in fp32.")
    no_gradient_accumulation_fusion: bool = Field(False, description="Disable fused gradient accumulation.")
    bf16: bool = Field(True, description="Train in bfloat16.")
    attention_dropout: float = Field(0.1, ge=0, lt=1, description="Dropout probability on attention weights.")
    hidden_dropout: float = Field(0.1, ge=0, lt=1, description="Dropout probability on hidden states.")
    init_method_std: float = Field(0.01, gt=0, description="Standard deviation of the weight initialisation.")
    distributed_backend: Literal["nccl", "hccl", "gloo"] = Field("nccl", description="torch.distributed backend.")
    no_shared_storage: bool = Field(False, description="Nodes do not share a file system.")
    dataset_additional_keys: list[str] = Field(
        default_factory=list, description="Extra dataset columns kept with each prompt (GRPO's rule rewards: labels)."
    )
    split: str = Field("100,0,0", description="Train,valid,test split of the dataset in percent.")
    no_shuffle: bool = Field(False, description="Do not shuffle the dataset.")
    full_shuffle_instruction_dataset: bool = Field(False, description="Shuffle the whole instruction dataset at once.")


# -------------------------------------------------------------------------------------- actor_config
class _ActorConfigBase(Section):
    """Training settings of the actor (and reference) model (MindSpeed-RL `actor_config`)."""

    model: str = Field(description="Name of the actor model (a key of `model`).")
    micro_batch_size: int = Field(
        1, gt=0, description="Responses per forward/backward pass (gradient accumulation unit)."
    )
    tensor_model_parallel_size: int = Field(1, ge=1, description="Training tensor-parallel size (TP).")
    pipeline_model_parallel_size: int = Field(1, ge=1, description="Training pipeline-parallel size (PP).")
    context_parallel_size: int = Field(1, ge=1, description="Training context-parallel size (CP): splits sequences.")
    num_layer_list: str | None = Field(
        None, description="Layers per pipeline stage, comma-separated (e.g. 16,17,16,15); null = num_layers / PP each."
    )
    lr: float = Field(1e-6, gt=0, description="Peak learning rate.")
    lr_decay_style: Literal["constant", "linear", "cosine"] = Field("linear", description="Learning-rate schedule.")
    min_lr: float = Field(0.0, ge=0, description="Learning rate at the end of the decay.")
    lr_warmup_fraction: float = Field(0.0, ge=0, le=1, description="Fraction of train_iters spent warming up the lr.")
    weight_decay: float = Field(0.01, ge=0, description="AdamW weight decay against overfitting.")
    clip_grad: float = Field(1.0, ge=0, description="Gradient-norm clipping threshold (0 = off).")
    adam_beta1: float = Field(0.9, ge=0, lt=1, description="Adam beta1.")
    adam_beta2: float = Field(0.999, ge=0, lt=1, description="Adam beta2.")
    finetune: bool = Field(
        False, description="Load weights only and restart the iteration count (false = resume a training run)."
    )
    load: str | None = Field(None, description="Checkpoint folder to load; null = a freshly built (cached) policy.")
    save: str | None = Field(None, description="Checkpoint folder to save into; null = no checkpoints.")
    no_load_optim: bool = Field(False, description="Do not load the optimizer state when loading.")
    no_load_rng: bool = Field(False, description="Do not load the random-generator state when loading.")
    no_save_optim: bool = Field(False, description="Do not save the optimizer state.")
    no_save_rng: bool = Field(False, description="Do not save the random-generator state.")


class _MegatronRoleConfigBase(Section):
    """A role's Megatron settings over megatron_training (MindSpeed-RL `ref_config`, `reward_config`).

    Only without the integrated worker (``rl_config.use_integrated_worker: false``), where MindSpeed-RL
    needs both. Every Megatron key is accepted and rendered as given.
    """

    model: str | None = Field(
        None, description="Name of the role's model (a key of `model`); null = megatron_training's."
    )


# Where each first-class Megatron key lives; a key written in another Megatron section is moved there
# (canonical.py), as MindSpeed-RL's merge of those sections would take it.
KEY_HOMES: dict[str, str] = {
    **dict.fromkeys(_ModelConfigBase.model_fields, "model"),
    **dict.fromkeys(set(_MegatronTrainingConfigBase.model_fields) - {"model"}, "megatron_training"),
    **dict.fromkeys(set(_ActorConfigBase.model_fields) - {"model"}, "actor_config"),
}
_FIRST_CLASS_MEGATRON = frozenset(KEY_HOMES) | {"model"}
MEGATRON_DEFAULTS: dict[str, Any] = {k: e.get("default") for k, e in manifest_keys("megatron").items()}

if TYPE_CHECKING:
    ModelConfig = _ModelConfigBase
    MegatronTrainingConfig = _MegatronTrainingConfigBase
    ActorConfig = _ActorConfigBase
    MegatronRoleConfig = _MegatronRoleConfigBase
else:
    ModelConfig = with_long_tail(_ModelConfigBase, "megatron")
    MegatronTrainingConfig = with_long_tail(_MegatronTrainingConfigBase, "megatron", skip=_FIRST_CLASS_MEGATRON)
    ActorConfig = with_long_tail(_ActorConfigBase, "megatron", skip=_FIRST_CLASS_MEGATRON)
    MegatronRoleConfig = with_long_tail(_MegatronRoleConfigBase, "megatron")
