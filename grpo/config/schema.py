"""The typed schema of a grpo_trainer config: one pydantic model per MindSpeed-RL section.

Every parameter of the MindSpeed-RL GRPO reference (shared/seed) and of MindSpeed-RL's own
`grpo_trainer_qwen25_7b_A3.yaml` is a field with a default, a one-line description, its range and
its allowed values. Unknown keys are errors everywhere (``extra="forbid"``). Checks that involve
more than one field live in ``rules.py``; single-field ranges live here so the message names the
field and the offending value.

Defaults are MindSpeed-RL's own (its config classes at the commit of ``mindspeed_keys.json``), except the
few listed with their reason in tests/test_config_manifest.py. Fields whose default is ``None`` mean "not
set: MindSpeed-RL's own default applies"; the renderer leaves them out so versions of MindSpeed-RL that
do not know the key still accept the YAML.

Every other key MindSpeed-RL accepts (the long tail: ``reuse_fp32_param``, ``moe_grouped_gemm``,
``use_remove_padding``, ...) is a field too, typed and defaulted from the key manifest (``manifest.py``).
Long-tail fields are kept, dumped and rendered only when the config sets them, exactly as given.

MindSpeed-RL builds one Megatron config per role from a model file, ``megatron_training`` and the role's
section (``actor_config``; ``ref_config``/``reward_config`` without the integrated worker), later ones
winning, so any Megatron key is legal in any of them. ``canonical.py`` moves the first-class keys to the
one section that holds them here (``num_layers`` to the model, ``lr`` to ``actor_config``...) before
validation, with the same effect.
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any, ClassVar, Literal, TypeVar

from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    create_model,
    field_validator,
    model_validator,
)
from pydantic.fields import FieldInfo
from pydantic_core import to_jsonable_python

from grpo.config.canonical import canonicalize
from grpo.config.manifest import KeyEntry, ManifestSection, manifest_keys
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
    # The long-tail fields of this section (from the key manifest); see the module docstring.
    long_tail: ClassVar[frozenset[str]] = frozenset()

    def dump(self, *, render: bool = False) -> dict[str, Any]:
        """Plain dict: every first-class field, long-tail fields only when set, as given.

        ``render=True`` also leaves out first-class fields that are null (not set: MindSpeed-RL's default).
        """
        out: dict[str, Any] = {}
        for name in type(self).model_fields:
            value = getattr(self, name)
            if name in self.long_tail:
                if name in self.model_fields_set:
                    out[name] = to_jsonable_python(value)
                continue
            value = value.dump(render=render) if isinstance(value, Section) else to_jsonable_python(value)
            if not (render and value is None):
                out[name] = value
        return out


_S = TypeVar("_S", bound=Section)
# Where MindSpeed-RL's own files use another type than its docstring names (the manifest's type for a
# null default): its model files give `spec` as a [module, function] list.
TYPE_CORRECTIONS: dict[tuple[str, str], Any] = {("megatron", "spec"): list[str] | str | None}
_FAMILY: dict[str, Any] = {
    "bool": bool | None,
    "int": int | None,
    "float": int | float | None,  # an int stays an int (rendered back as given)
    "str": str | None,
    "list": list[Any] | None,
    "dict": dict[str, Any] | None,
}


def long_tail_annotation(section: ManifestSection, key: str, entry: KeyEntry) -> Any:
    """The type of a long-tail field: the manifest's type family, or null (MindSpeed-RL accepts null)."""
    return TYPE_CORRECTIONS.get((section, key)) or _FAMILY.get(entry.get("type", "any"), Any)


def _long_tail_field(section: ManifestSection, entry: KeyEntry) -> FieldInfo:
    default = entry.get("default")
    text = f"MindSpeed-RL {section} key (long tail)."
    if isinstance(default, list | dict):
        return FieldInfo(default_factory=lambda d=default: copy.deepcopy(d), description=text)
    return FieldInfo(default=default, description=text)


def with_long_tail(base: type[_S], section: ManifestSection, *, skip: frozenset[str] = frozenset()) -> type[_S]:
    """``base`` plus a field for every key of the manifest section it lacks (and not in ``skip``)."""
    keys = {k: e for k, e in manifest_keys(section).items() if k not in base.model_fields and k not in skip}
    fields: dict[str, Any] = {
        key: (long_tail_annotation(section, key, entry), _long_tail_field(section, entry))
        for key, entry in keys.items()
    }
    name = base.__name__.lstrip("_").removesuffix("Base")
    model = create_model(name, __base__=base, __module__=__name__, __doc__=base.__doc__, **fields)
    model.__qualname__ = name  # pickled by reference as grpo.config.schema.<name>
    model.long_tail = frozenset(keys)
    return model


# --------------------------------------------------------------------------------------------- model
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


# ----------------------------------------------------------------------------------------- rl_config
class ResourceConfig(Section):
    """Devices given to one role."""

    num_npus: int = Field(1, ge=1, description="NPUs (or CPU slots) for the actor and reference models.")


class _RLConfigBase(Section):
    """GRPO-specific parameters and resources (MindSpeed-RL `rl_config`).

    MindSpeed-RL multiplies mini_batch_size by n_samples_per_prompt internally: the YAML counts
    prompts, one optimizer step consumes mini_batch_size * n_samples_per_prompt responses.
    """

    use_integrated_worker: bool = Field(True, description="Colocate actor, reference and rollout on the same devices.")
    blocking: bool = Field(True, description="Run the stages synchronously (false = asynchronous).")
    guarantee_order: bool = Field(False, description="Keep sample order in the TransferDock.")
    gamma: float = Field(1.0, ge=0, le=1, description="Reward discount factor.")
    lam: float = Field(0.95, ge=0, le=1, description="GAE lambda.")
    actor_forward_micro_batch_size: int | None = Field(
        None,
        gt=0,
        description="Micro batch of the actor's log-prob forward pass; null = actor_config.micro_batch_size.",
    )
    ref_forward_micro_batch_size: int | None = Field(
        None,
        gt=0,
        description="Micro batch of the reference log-prob forward pass; null = actor_config.micro_batch_size.",
    )
    adv_estimator: Literal["group_norm", "gae"] = Field("group_norm", description="Advantage estimator.")
    kl_penalty: Literal["kl", "abs", "mse", "low_var_kl"] = Field(
        "low_var_kl", description="KL estimator of the KL term."
    )
    kl_ctrl_type: Literal["fixed", "adaptive"] = Field("fixed", description="KL coefficient control.")
    init_kl_coef: float = Field(0.01, ge=0, description="(Initial) weight of the KL loss.")
    kl_target: float = Field(100.0, gt=0, description="Target KL of the adaptive controller (kl_ctrl_type=adaptive).")
    kl_horizon: int = Field(1000, gt=0, description="Horizon (responses) of the adaptive KL controller.")
    mini_batch_size: int = Field(
        1, gt=0, description="Prompts per actor update (times n_samples_per_prompt responses)."
    )
    max_prompt_length: int = Field(512, gt=0, description="Longest prompt in tokens.")
    epochs: int = Field(1, ge=1, description="Passes over each iteration's rollouts.")
    clip_ratio: float = Field(0.2, ge=0, le=1, description="PPO clip ratio of the policy loss; usually 0.1-0.3.")
    entropy_coeff: float = Field(0.0, ge=0, description="Weight of the entropy bonus.")
    n_samples_per_prompt: int = Field(1, ge=1, description="Responses generated per prompt (the GRPO group size).")
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


if TYPE_CHECKING:
    RLConfig = _RLConfigBase
else:
    RLConfig = with_long_tail(_RLConfigBase, "rl")


# ----------------------------------------------------------------------------------- generate_config
class _SamplingConfigBase(Section):
    """vLLM sampling parameters of the rollout."""

    logprobs: int = Field(1, ge=0, description="Top log-probabilities returned per token.")
    max_tokens: int = Field(128, gt=0, description="Longest response in tokens.")
    top_p: float = Field(
        1.0, gt=0, le=1, description="Nucleus sampling: smallest token set with this total probability."
    )
    top_k: int = Field(
        50,
        json_schema_extra={"allowed": "-1 or >= 1"},
        description="Sample among the top_k most likely tokens (-1 = all).",
    )
    min_p: float = Field(0.0, ge=0, lt=1, description="Drop tokens less likely than min_p times the top token.")
    temperature: float = Field(0.2, gt=0, description="Sampling temperature.")
    seed: int | None = Field(None, ge=0, description="Sampling seed (null = random).")
    detokenize: bool = Field(False, description="Turn output tokens back into text.")

    @field_validator("top_k")
    @classmethod
    def _top_k_all_or_positive(cls, value: int) -> int:
        if value != -1 and value < 1:
            raise ValueError(f"must be -1 (all tokens) or >= 1 (got {value})")
        return value


if TYPE_CHECKING:
    SamplingConfig = _SamplingConfigBase
else:
    SamplingConfig = with_long_tail(_SamplingConfigBase, "sampling")


class _GenerateConfigBase(Section):
    """Rollout (inference) settings: parallelism, weight resharding, vLLM engine, sampling."""

    trust_remote_code: bool = Field(False, description="Trust remote code of the tokenizer/model.")
    offload_train_optimizer: bool = Field(False, description="Offload the training optimizer during rollout.")
    offload_train_grad: bool = Field(False, description="Offload training gradients during rollout.")
    offload_train_param: bool = Field(False, description="Offload training weights during rollout.")
    infer_tensor_parallel_size: int = Field(8, ge=1, description="Rollout tensor-parallel size.")
    infer_pipeline_parallel_size: int = Field(
        1, ge=1, description="Rollout pipeline-parallel size (only 1 is supported)."
    )
    infer_expert_parallel_size: int = Field(1, ge=1, description="Rollout expert-parallel size (MoE models).")
    max_num_seqs: int = Field(1, gt=0, description="Most sequences vLLM runs at once.")
    max_model_len: int = Field(2048, gt=0, description="Longest prompt + response vLLM handles.")
    max_num_batched_tokens: int = Field(2048, gt=0, description="Most tokens in one vLLM scheduler step.")
    enforce_eager: bool = Field(
        True, description="Run PyTorch eagerly (turn off only for DeepSeek V3 torchair graphs)."
    )
    torchair_graph: bool | None = Field(None, description="Torchair graph mode (DeepSeek V3).")
    enable_expert_parallel: bool | None = Field(None, description="Split MoE experts across devices.")
    dtype: Literal["bfloat16", "float16", "float32", "auto"] = Field("bfloat16", description="Rollout weight dtype.")
    gpu_memory_utilization: float = Field(0.5, gt=0, le=1, description="Share of device memory vLLM may use.")
    num_scheduler_steps: int = Field(
        1,
        ge=1,
        description=(
            "vLLM multi-step scheduling; accepted and rendered, but MindSpeed-RL 05a90d7 does not pass it on to "
            "vLLM 0.11 (whose V1 engine has no multi-step scheduling), so it changes nothing there."
        ),
    )
    sampling_config: SamplingConfig = Field(
        default_factory=SamplingConfig,
        description="Sampling parameters.",
    )


if TYPE_CHECKING:
    GenerateConfig = _GenerateConfigBase
else:
    GenerateConfig = with_long_tail(_GenerateConfigBase, "generate")


# ------------------------------------------------------------------------ profiler_config, msprobe_config
class ProfilerRoleConfig(Section):
    """MindSpeed-RL's ``ProfilerConfig`` of one role (mindspeed_rl/config_cls/mindstudio_config.py): the
    torch_npu profiler around chosen iterations. Defaults are MindSpeed-RL's."""

    profile: bool = Field(False, description="Profile this role.")
    mstx: bool = Field(False, description="Lightweight mstx range markers instead of a full profile.")
    stage: str = Field("all", description="Which stage to profile (all, or one stage's name).")
    profile_save_path: str = Field("", description="Folder of the profiling output.")
    profile_export_type: Literal["text", "db"] = Field("text", description="Export format of the profile.")
    profile_level: Literal["level_none", "level0", "level1", "level2"] = Field(
        "level0", description="Profiler level (more detail, more overhead)."
    )
    profile_with_memory: bool = Field(False, description="Record memory.")
    profile_record_shapes: bool = Field(False, description="Record tensor shapes.")
    profile_with_cpu: bool = Field(True, description="Profile CPU activity.")
    profile_with_npu: bool = Field(True, description="Profile NPU activity.")
    profile_with_module: bool = Field(False, description="Record Python module call stacks.")
    profile_step_start: int = Field(1, ge=0, description="First profiled iteration.")
    profile_step_end: int = Field(2, ge=0, description="Iteration the profile stops at (exclusive).")
    profile_analysis: bool = Field(False, description="Analyse the profile after collecting it.")
    profile_ranks: str | list[int] = Field("all", description="Ranks profiled: all, or a list of ranks.")


class ProfilerSectionConfig(Section):
    """``profiler_config``: MindSpeed-RL's GRPO entry point reads the ``integrated`` role only."""

    integrated: ProfilerRoleConfig | None = Field(
        None, description="Profiler of the integrated worker (actor, reference and rollout)."
    )


class MsprobeConfig(Section):
    """MindSpeed-RL's ``MsprobeConfig`` (mindspeed_rl/config_cls/mindstudio_config.py): msprobe data dumps
    for precision debugging. Defaults are MindSpeed-RL's."""

    msprobe: bool = Field(False, description="Turn msprobe on.")
    dump_path: str = Field("./msprobe_dump", description="Folder of the dumps.")
    key_data_dump: bool = Field(False, description="Dump key data (prompts, responses, rewards, advantages).")
    configurations_dump: bool = Field(False, description="Dump the configurations.")
    actor_train_dump: bool = Field(False, description="Dump the actor's training forward/backward.")
    actor_infer_dump: bool = Field(False, description="Dump the actor's rollout.")
    token_range_start: int = Field(0, ge=0, description="First generated token dumped (actor_infer_dump).")
    token_range_end: int = Field(0, ge=0, description="Last generated token dumped (actor_infer_dump).")
    reference_dump: bool = Field(False, description="Dump the reference forward.")
    critic_train_dump: bool = Field(False, description="Dump the critic's training (PPO).")
    step_start: int = Field(0, ge=0, description="First dumped iteration.")
    step_end: int = Field(0, ge=0, description="Last dumped iteration.")


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
    loss_agg_mode: (
        Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"] | None
    ) = Field(
        None,
        description=(
            "How the embedded engine averages the GRPO loss (verl's names); null = rl_config.token_level_loss "
            "decides (true: token-mean, false: seq-mean-token-mean), as MindSpeed-RL does. token-mean is "
            "MindSpeed-RL's GRPO loss: the mean over every response token of the micro batch, each micro batch's "
            "loss divided by the number of micro batches, as Megatron does (so it depends on micro_batch_size). "
            "The seq-mean modes average responses: of their token mean (the GRPO paper), token sum, or token sum "
            "/ max_tokens (Dr. GRPO). Backend mindspeed: token-mean only."
        ),
    )
    policy_loss: Literal["vanilla", "gspo"] = Field(
        "vanilla",
        description=(
            "Policy loss of the embedded engine: vanilla = PPO's clipped token ratio (MindSpeed-RL's), gspo = GSPO's "
            "sequence-level ratio and clip (use tiny clip ratios, e.g. clip_ratio_low 3e-4, clip_ratio_high 4e-4). "
            "Backend mindspeed: vanilla only."
        ),
    )
    advantage_estimator: Literal["group_norm", "group_norm_no_std"] = Field(
        "group_norm",
        description=(
            "Advantages of the embedded engine: group_norm = (r - group mean) / group std (MindSpeed-RL's), "
            "group_norm_no_std = r - group mean (Dr. GRPO). Backend mindspeed: group_norm only."
        ),
    )
    keep_checkpoints: int | None = Field(
        None, ge=1, description="Newest checkpoints kept in actor_config.save (null = all); resuming needs the newest."
    )
    wandb_mode: Literal["online", "offline"] | None = Field(
        None,
        description=(
            "W&B mode when rl_config.use_wandb; null = MindSpeed-RL's rule (online when WANDB_API_KEY is set). "
            "offline stays offline whatever the environment says."
        ),
    )
    wandb_group: str | None = Field(
        None, description="W&B run group (a sweep sets its study name, so a study's runs are grouped)."
    )
    swanlab_group: str | None = Field(
        None,
        description="SwanLab experiment group when rl_config.use_swanlab (a sweep sets its study name); also a tag.",
    )
    trial_params: dict[str, Any] | None = Field(
        None,
        description=(
            "The searched parameters of the sweep trial this run is a seed of (key -> value), written as the "
            "run's TensorBoard HParams; a sweep sets them, null outside one."
        ),
    )


# ------------------------------------------------------------------------------------------- the whole
# Top-level sections present only when a config gives them.
OPTIONAL_SECTIONS = ("ref_config", "reward_config", "profiler_config", "msprobe_config")


class GRPOConfig(BaseModel):
    """One resolved grpo_trainer config: MindSpeed-RL's sections plus grpo-sweep's `engine` and `layout`."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    model: dict[str, ModelConfig] = Field(description="Architectures loaded by the defaults list, by name.")
    megatron_training: MegatronTrainingConfig
    actor_config: ActorConfig
    ref_config: MegatronRoleConfig | None = Field(
        None, description="Reference model's settings over megatron_training (use_integrated_worker: false only)."
    )
    reward_config: MegatronRoleConfig | None = Field(
        None, description="Reward model's settings over megatron_training (use_integrated_worker: false only)."
    )
    rl_config: RLConfig = Field(default_factory=RLConfig)
    generate_config: GenerateConfig = Field(default_factory=GenerateConfig)
    profiler_config: ProfilerSectionConfig | None = Field(
        None, description="MindSpeed-RL's profiler settings (rendered when given; the embedded engine ignores them)."
    )
    msprobe_config: MsprobeConfig | None = Field(
        None, description="MindSpeed-RL's msprobe settings (rendered when given; the embedded engine ignores them)."
    )
    engine: EngineConfig = Field(
        default_factory=EngineConfig,
        description="grpo-sweep's embedded-engine settings.",
    )
    layout: str | None = Field(None, description="Name of the configs/layout entry applied (null = none).")
    algorithm: str | None = Field(
        None, description="Name of the configs/algorithm preset applied (grpo, dapo, dr_grpo, gspo; null = none)."
    )

    # The file the config was composed from, as messages name it (set by load_config / config_from_dict).
    _source: str = PrivateAttr(default="config")

    @model_validator(mode="before")
    @classmethod
    def _merge_megatron_sections(cls, data: Any) -> Any:
        """First-class Megatron keys written in another Megatron section move to their own (canonical.py)."""
        return canonicalize(data, KEY_HOMES, MEGATRON_DEFAULTS)[0]

    @property
    def layout_name(self) -> str:
        """The layout entry applied, or the training split it amounts to (``tp2_pp2``)."""
        actor = self.actor_config
        return self.layout or f"tp{actor.tensor_model_parallel_size}_pp{actor.pipeline_model_parallel_size}"

    def megatron_value(self, key: str) -> Any:
        """A Megatron key as the actor's MindSpeed-RL config holds it: the model file, then
        ``megatron_training``, then ``actor_config``, later winning (``parse_training_config``); MindSpeed-RL's
        default when none sets it."""
        for section in (self.actor_config, self.megatron_training, self.model.get(self.actor_config.model)):
            if section is not None and key in section.model_fields_set:
                return getattr(section, key)
        return getattr(self.actor_config, key, None)

    def forward_micro_batch_size(self, role: Literal["actor", "ref"]) -> int:
        """The micro batch of a role's log-prob forward pass: ``rl_config.<role>_forward_micro_batch_size``,
        else ``actor_config.micro_batch_size``, as MindSpeed-RL's IntegratedWorker does (a null keeps the
        training micro batch; a value swaps it in around the forward pass only)."""
        value = getattr(self.rl_config, f"{role}_forward_micro_batch_size")
        return int(value) if value is not None else self.actor_config.micro_batch_size

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
        """Plain nested dict: every first-class field, the long-tail keys the config sets, and ref_config /
        reward_config when present; ``GRPOConfig.model_validate(cfg.to_dict())`` gives it back."""
        out: dict[str, Any] = {"model": {name: arch.dump() for name, arch in self.model.items()}}
        for name in type(self).model_fields:
            value = getattr(self, name)
            if isinstance(value, Section):
                out[name] = value.dump()
            elif name not in out and not (name in OPTIONAL_SECTIONS and value is None):
                out[name] = to_jsonable_python(value)
        return out
