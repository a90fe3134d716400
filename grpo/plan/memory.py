"""Per-NPU memory of a MindSpeed-RL GRPO layout, estimated before it burns NPU hours.

MindSpeed-RL's integrated worker runs three phases on the same NPUs (its sharding manager's
enter_*_mode docstrings say what is resident in each):

- **update**: training weights, gradients and optimizer state, plus the activations of the micro
  batches in flight and the logits of the loss;
- **log-prob forward** (actor and reference): training weights only, plus the logits of one forward
  micro batch;
- **generation**: vLLM's share (``gpu_memory_utilization`` of the device: weights at the inference TP
  plus the KV cache) plus whatever training state is not offloaded.

Formulas and sources are in docs/planner.md: 6 + 12/DP bytes per parameter for bf16 weights, fp32
gradients and the distributed optimizer (Megatron-Core's distributed-optimizer guide), activations per
layer from Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large Transformer Models"),
generalised to grouped-query attention and SwiGLU, and the KV-cache size of vLLM's paged attention.
Activations assume every sequence is ``max_prompt_length + max_tokens`` long, at most ``max_model_len``
(an upper bound: padding removal and shorter responses only help). Figures are GiB (2**30 bytes).

Dense decoders are modelled (Qwen2/2.5, Qwen3 dense with its ``kv_channels`` head size and QK norm, an
uneven ``num_layer_list`` split). Mixture-of-experts, multi-head latent attention and context parallelism
are not: their estimate says so (``estimated=False``, figures NaN, ``reason`` "not estimated: ...") and
counts as fitting, so such layouts are neither pruned nor vouched for.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

from grpo.config import GRPOConfig, ModelConfig
from grpo.config.derived import sequence_length
from grpo.config.rules import stage_layers

GIB = float(2**30)
# What the driver/runtime keeps of a device before PyTorch sees it: torch_npu reports 60.96 GiB
# "total capacity" on 64 GiB parts.
RUNTIME_RESERVED_GB = 3.0
# HCCL buffers (HCCL_BUFFSIZE, 256 MB per communicator in MindSpeed-RL's runtime env) and allocator
# fragmentation, a flat allowance.
WORKSPACE_GB = 1.0
# Logit bytes per element: the loss keeps fp32 logits (Korthikanti et al.: 4 bytes) and GRPO's
# log-prob/entropy adds an fp32 softmax; a forward-only pass keeps bf16 logits and fp32 log-probs.
LOGIT_BYTES_UPDATE = 8
LOGIT_BYTES_FORWARD = 6


@dataclass(frozen=True)
class Estimate:
    """Per-NPU memory of one config (GiB) and whether it fits ``device_gb``; ``reason`` says why not."""

    device_gb: float
    usable_gb: float  # device minus runtime reserve and workspace
    train_tp: int
    train_pp: int
    train_dp: int
    infer_tp: int
    params_per_npu: float  # parameters on the fullest NPU (billions)
    weights_gb: float
    grads_gb: float
    optimizer_gb: float
    activations_gb: float  # update phase, fullest stage
    logits_gb: float  # update phase, last stage
    update_peak_gb: float
    forward_peak_gb: float
    train_peak_gb: float  # max(update, forward)
    infer_weights_gb: float
    vllm_activation_gb: float
    kv_cache_gb: float
    kv_sequences: int  # full max_model_len sequences the KV cache holds
    generation_peak_gb: float
    feasible: bool
    reason: str
    notes: tuple[str, ...] = field(default_factory=tuple)
    estimated: bool = True  # False: an architecture or layout the planner does not model (see the module doc)

    def as_dict(self) -> dict:
        return asdict(self)


# ------------------------------------------------------------------------------------- parameters
def _head_dim(arch: ModelConfig) -> int:
    """Per-head size: kv_channels when set (Qwen3), else hidden_size / heads."""
    return getattr(arch, "kv_channels", None) or arch.hidden_size // arch.num_attention_heads


def layer_parameters(arch: ModelConfig) -> float:
    """Parameters of one transformer layer: attention (Q, K, V, output, QK norms), MLP, two norms."""
    h, f, d = arch.hidden_size, arch.ffn_hidden_size, _head_dim(arch)
    q, kv = arch.num_attention_heads * d, arch.effective_query_groups * d
    attention = 2 * h * q + 2 * h * kv + ((q + 2 * kv) if arch.add_qkv_bias else 0)
    attention += 2 * d if getattr(arch, "qk_layernorm", False) else 0
    mlp = (3 if arch.swiglu else 2) * h * f
    return float(attention + mlp + 2 * h)


def model_parameters(arch: ModelConfig) -> float:
    """All parameters: layers, input embedding, output layer (when untied), final norm."""
    embedding = float(arch.padded_vocab_size * arch.hidden_size)
    output = embedding if arch.untie_embeddings_and_output_weights else 0.0
    return arch.num_layers * layer_parameters(arch) + embedding + output + arch.hidden_size


def stage_parameters(arch: ModelConfig, tp: int, layers: list[int]) -> list[float]:
    """Parameters per NPU of each pipeline stage holding ``layers[i]`` layers; norms are replicated over TP.

    The first stage also holds the input embedding, the last the output layer and the final norm."""
    h, pp = arch.hidden_size, len(layers)
    per_layer = (layer_parameters(arch) - 2 * h) / tp + 2 * h
    embedding = arch.padded_vocab_size * h / tp
    output = embedding if (arch.untie_embeddings_and_output_weights or pp > 1) else 0.0
    return [n * per_layer + (embedding if i == 0 else 0.0) + (output + h if i == pp - 1 else 0.0)
            for i, n in enumerate(layers)]  # fmt: skip


# ------------------------------------------------------------------------------------ activations
def layer_activation_bytes(
    arch: ModelConfig,
    tokens: float,
    tp: int,
    seq: int,
    *,
    sequence_parallel: bool,
    flash_attention: bool,
    selective_recompute: bool,
    attention_dropout: float,
    hidden_dropout: float,
) -> float:
    """Bytes one layer stores for backward for ``tokens`` = micro batch x sequence length.

    Korthikanti et al. 2022, section 4: per layer ``s*b*h*(34 + 5*a*s/h)`` bytes without parallelism,
    of which ``10*s*b*h`` (norm inputs, QKV and fc1 inputs, dropout masks) is not split by tensor
    parallelism unless sequence parallelism is on, ``24*s*b*h`` is split by TP, and ``5*a*s^2*b`` is
    the attention scores (softmax, its dropout mask and output), which selective recompute and flash
    attention do not store. Generalised: K and V are ``kv = groups * head_dim`` wide (GQA), the MLP is
    ``f`` wide (SwiGLU keeps its 2f-wide input and f-wide output), dropout masks only with dropout.
    """
    h, f, a = arch.hidden_size, arch.ffn_hidden_size, arch.num_attention_heads
    d = _head_dim(arch)
    q, kv = a * d, arch.effective_query_groups * d
    unsplit = 8 * h + (2 * h if hidden_dropout > 0 else 0)  # 2 norm inputs, QKV input, fc1 input (+2 masks)
    split = 2 * q + 2 * kv + 2 * kv + 2 * q  # Q, K, V, attention output (input of the projection)
    split += (6 * f) if arch.swiglu else (4 * f)  # activation input (2f or f wide) and fc2 input
    scores = 0.0
    if not (flash_attention or selective_recompute):
        scores = a * seq * (2 + (3 if attention_dropout > 0 else 0))  # per token: softmax (+mask, +dropout out)
    per_token = (unsplit / tp if (sequence_parallel and tp > 1) else unsplit) + (split + scores) / tp
    return tokens * per_token


def stage_activation_bytes(
    layers: int,
    full_layer: float,
    layer_input: float,
    in_flight: int,
    *,
    granularity: str | None,
    method: str | None,
    num_layers: int | None,
) -> float:
    """Activation bytes of one pipeline stage holding ``in_flight`` micro batches.

    Full recompute keeps only layer (group) inputs (Korthikanti et al.: 2*s*b*h per layer, /TP with
    sequence parallelism) and rebuilds one group's activations at a time during backward; ``block``
    recomputes only the first ``recompute_num_layers`` layers.
    """
    if granularity != "full":
        return in_flight * layers * full_layer
    n = max(1, num_layers or 1)
    if method == "block":
        recomputed = min(n, layers)
        stored = recomputed * layer_input + (layers - recomputed) * full_layer
        return in_flight * stored + (full_layer if recomputed else 0.0)
    groups = math.ceil(layers / n)
    return in_flight * groups * layer_input + min(n, layers) * full_layer


# --------------------------------------------------------------------------------------- estimate
def not_modelled(cfg: GRPOConfig) -> str | None:
    """Why the planner cannot estimate ``cfg`` (None: it can)."""
    arch = cfg.model_arch
    if arch.architecture != "dense":
        return f"model.{cfg.actor_config.model} is {arch.architecture}, which the planner does not model"
    cp = cfg.actor_config.context_parallel_size
    if cp > 1:
        return f"actor_config.context_parallel_size={cp}: context parallelism is not modelled"
    return None


def _not_estimated(cfg: GRPOConfig, device_memory_gb: float, why: str) -> Estimate:
    actor, gen = cfg.actor_config, cfg.generate_config
    tp, pp = actor.tensor_model_parallel_size, actor.pipeline_model_parallel_size
    dp = max(1, cfg.rl_config.actor_resource.num_npus // (tp * pp * actor.context_parallel_size))
    nan = math.nan
    return Estimate(
        device_gb=device_memory_gb,
        usable_gb=device_memory_gb - RUNTIME_RESERVED_GB - WORKSPACE_GB,
        train_tp=tp, train_pp=pp, train_dp=dp, infer_tp=gen.infer_tensor_parallel_size,
        params_per_npu=nan, weights_gb=nan, grads_gb=nan, optimizer_gb=nan, activations_gb=nan, logits_gb=nan,
        update_peak_gb=nan, forward_peak_gb=nan, train_peak_gb=nan, infer_weights_gb=nan,
        vllm_activation_gb=nan, kv_cache_gb=nan, kv_sequences=0, generation_peak_gb=nan,
        feasible=True, reason=f"not estimated: {why}", notes=(f"not estimated: {why}",), estimated=False,
    )  # fmt: skip


def estimate(cfg: GRPOConfig, device_memory_gb: float = 64.0) -> Estimate:
    """Per-NPU memory of ``cfg`` on NPUs of ``device_memory_gb`` GiB, and whether it fits.

    Example::

        from grpo.config import load_config
        est = estimate(load_config("grpo_trainer_qwen25_7b_A3", ["layout=tp2_pp2"]), 64)
        est.feasible, est.train_peak_gb, est.kv_sequences, est.reason
    """
    why = not_modelled(cfg)
    if why is not None:
        return _not_estimated(cfg, device_memory_gb, why)
    arch = cfg.model_arch
    train, actor, rl, gen = cfg.megatron_training, cfg.actor_config, cfg.rl_config, cfg.generate_config
    tp, pp = actor.tensor_model_parallel_size, actor.pipeline_model_parallel_size
    npus = rl.actor_resource.num_npus
    dp = max(1, npus // (tp * pp))
    itp = gen.infer_tensor_parallel_size
    seq = sequence_length(cfg)
    usable = device_memory_gb - RUNTIME_RESERVED_GB - WORKSPACE_GB
    notes: list[str] = []

    # Training state (Megatron distributed-optimizer guide: bf16 param + fp32 grad + 12/DP optimizer).
    weight_b, grad_b, optim_b = (2.0, 4.0, 12.0) if train.bf16 else (4.0, 4.0, 8.0)
    if train.use_distributed_optimizer:
        optim_b /= dp
    # Layers per stage: num_layer_list, else an even split.
    counts = stage_layers(cfg) or [math.ceil(arch.num_layers / pp)] * pp
    params = stage_parameters(arch, tp, counts)
    fullest, last = max(params), params[-1]

    # Activations of the update phase.
    sp = train.sequence_parallel and tp > 1
    mbs = actor.micro_batch_size
    micro_batches = max(1, rl.mini_batch_size * rl.n_samples_per_prompt // dp // mbs)
    full_layer = layer_activation_bytes(
        arch,
        mbs * seq,
        tp,
        seq,
        sequence_parallel=sp,
        flash_attention=train.use_flash_attn,
        selective_recompute=train.recompute_granularity == "selective",
        attention_dropout=train.attention_dropout,
        hidden_dropout=train.hidden_dropout,
    )
    layer_input = 2 * mbs * seq * arch.hidden_size / (tp if sp else 1)

    # 1F1B: stage i holds the activations of up to pp - i micro batches; the last stage also the logits.
    acts = [
        stage_activation_bytes(
            n, full_layer, layer_input, min(pp - i, micro_batches),
            granularity=train.recompute_granularity, method=train.recompute_method,
            num_layers=train.recompute_num_layers,
        )
        for i, n in enumerate(counts)
    ]  # fmt: skip
    logits = mbs * seq * arch.padded_vocab_size / tp * LOGIT_BYTES_UPDATE
    state = weight_b + grad_b + optim_b
    updates = [
        p * state + a + (logits if i == pp - 1 else 0.0) for i, (p, a) in enumerate(zip(params, acts, strict=True))
    ]
    update_peak = max(updates) / GIB

    # Log-prob forward (actor and reference): weights only, one forward micro batch's logits, one layer live.
    forward_mbs = max(cfg.forward_micro_batch_size("actor"), cfg.forward_micro_batch_size("ref"))
    forward_resident = last * weight_b
    if not gen.offload_train_grad:
        forward_resident += last * grad_b
    if not gen.offload_train_optimizer:
        forward_resident += last * optim_b
    forward_peak = (
        forward_resident
        + forward_mbs * seq * arch.padded_vocab_size / tp * LOGIT_BYTES_FORWARD
        + full_layer * forward_mbs / mbs
    ) / GIB
    train_peak = max(update_peak, forward_peak)

    # Generation: vLLM's share of the device plus training state left on it.
    total_params = model_parameters(arch)
    infer_weights = total_params * 2 / itp / GIB
    head_dim = _head_dim(arch)
    kv_heads = max(1, arch.effective_query_groups // itp)
    kv_bytes_per_token = 2 * arch.num_layers * kv_heads * head_dim * 2
    tokens_step = gen.max_num_batched_tokens
    vllm_act = (
        tokens_step
        * 2
        * (
            2 * arch.hidden_size
            + (
                3 * arch.ffn_hidden_size
                + arch.num_attention_heads * head_dim
                + 2 * arch.effective_query_groups * head_dim
            )
            / itp
        )
        + min(gen.max_num_seqs, tokens_step) * arch.padded_vocab_size * 4
    ) / GIB
    vllm_pool = gen.gpu_memory_utilization * device_memory_gb
    kv_cache = vllm_pool - infer_weights - vllm_act
    kv_sequences = max(0, int(kv_cache * GIB // (kv_bytes_per_token * gen.max_model_len))) if kv_cache > 0 else 0
    resident = (
        fullest
        * (
            (0 if gen.offload_train_param else weight_b)
            + (0 if gen.offload_train_grad else grad_b)
            + (0 if gen.offload_train_optimizer else optim_b)
        )
        / GIB
    )
    generation_peak = resident + vllm_pool

    problems = []
    if train_peak > usable:
        phase = "update" if update_peak >= forward_peak else "log-prob forward"
        problems.append(
            f"training needs {train_peak:.1f} GiB per NPU ({phase}: weights {fullest * weight_b / GIB:.1f} "
            f"+ grads {fullest * grad_b / GIB:.1f} + optimizer {fullest * optim_b / GIB:.1f} + activations "
            f"{max(acts) / GIB:.1f} + logits {logits / GIB:.1f}) > {usable:.1f} GiB usable"
        )
    if generation_peak > usable:
        problems.append(
            f"generation needs {generation_peak:.1f} GiB per NPU (vLLM {vllm_pool:.1f} + resident training "
            f"state {resident:.1f}) > {usable:.1f} GiB usable"
        )
    if kv_sequences < 1:
        one_sequence = kv_bytes_per_token * gen.max_model_len / GIB
        problems.append(
            f"the KV cache ({max(kv_cache, 0):.1f} GiB = {gen.gpu_memory_utilization:g} x "
            f"{device_memory_gb:g} - weights {infer_weights:.1f} at infer TP{itp} - vLLM activations "
            f"{vllm_act:.1f}) cannot hold one {gen.max_model_len}-token sequence ({one_sequence:.2f} GiB)"
        )
    elif kv_sequences < gen.max_num_seqs:
        notes.append(f"KV cache holds {kv_sequences} of max_num_seqs={gen.max_num_seqs} full sequences")
    feasible = not problems
    if feasible:
        reason = (
            f"fits: training {train_peak:.1f} GiB, generation {generation_peak:.1f} GiB of {usable:.1f} GiB "
            f"usable; KV cache {kv_cache:.1f} GiB = {kv_sequences} x {gen.max_model_len}-token sequences"
        )
    else:
        reason = "; ".join(problems)
    return Estimate(
        device_gb=device_memory_gb,
        usable_gb=usable,
        train_tp=tp,
        train_pp=pp,
        train_dp=dp,
        infer_tp=itp,
        params_per_npu=fullest / 1e9,
        weights_gb=fullest * weight_b / GIB,
        grads_gb=fullest * grad_b / GIB,
        optimizer_gb=fullest * optim_b / GIB,
        activations_gb=max(acts) / GIB,
        logits_gb=logits / GIB,
        update_peak_gb=update_peak,
        forward_peak_gb=forward_peak,
        train_peak_gb=train_peak,
        infer_weights_gb=infer_weights,
        vllm_activation_gb=vllm_act,
        kv_cache_gb=kv_cache,
        kv_sequences=kv_sequences,
        generation_peak_gb=generation_peak,
        feasible=feasible,
        reason=reason,
        notes=tuple(notes),
    )
