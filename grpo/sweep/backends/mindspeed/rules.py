"""What MindSpeed-RL refuses at launch that only concerns the mindspeed backend, checked before launch.

MindSpeed-RL checks its config when a run starts (``cli/train_grpo.py``: ``parse_training_config``, then
``mindspeed_rl/config_cls/validate_config.py``: ``validate_rl_args``; then ``get_tokenizer``, the
trainer's loggers). A config it refuses would launch, die in seconds and be retried; each rule here
refuses it in preflight instead, with one ``<file>: <key>: <why>`` line. Rules that hold for every
backend (batch and layout divisibility, ``max_model_len >= seq_length``, verifier lengths, W&B names)
live in ``grpo/config/rules.py``; these apply to MindSpeed-RL runs only (the embedded engine trains in
float32 on a CPU, has its own tokenizer, and has no separate reference worker).

Known from the cluster, not the config: ``global_batch_size`` must be divisible by the number of alive
Ray nodes (``validate_rl_args``: rule rewards run one process per node), see ``ray_node_problems``.

Example::

    problems = launch_rule_problems(load_config("grpo_trainer_qwen25_7b_A3", ["megatron_training.bf16=false"]))
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from grpo.config import GRPOConfig
from grpo.sweep.spec.models import MindSpeedSpec

LaunchRule = Callable[[GRPOConfig], "str | None"]


def bf16_training_and_generation(cfg: GRPOConfig) -> str | None:
    """bf16 training and ``generate_config.dtype: bfloat16`` (``validate_rl_args``: both, or ValueError)."""
    if not cfg.megatron_training.bf16:
        return (
            f"{cfg._source}: megatron_training.bf16: MindSpeed-RL trains in bf16 only (validate_rl_args); "
            f"set megatron_training.bf16=true"
        )
    if cfg.generate_config.dtype != "bfloat16":
        return (
            f"{cfg._source}: generate_config.dtype: {cfg.generate_config.dtype}: MindSpeed-RL generates in "
            f"bfloat16 only (validate_rl_args)"
        )
    return None


def integrated_worker(cfg: GRPOConfig) -> str | None:
    """``reference_resource`` set exactly when ``use_integrated_worker`` is false (``validate_rl_args``).

    Integrated, MindSpeed-RL raises when ``reference_resource`` is set (the reference shares the actor's
    NPUs); separate workers, it divides by ``reference_resource.num_npus``, so a missing one crashes at
    launch. The ``ref_config``/``reward_config`` sections themselves are a config rule
    (``integrated_worker_sections``).
    """
    rl = cfg.rl_config
    resource = getattr(rl, "reference_resource", None)  # a long-tail key: a field built from the manifest
    if not rl.use_integrated_worker and resource is None:
        return (
            f"{cfg._source}: rl_config.reference_resource: use_integrated_worker false needs the reference "
            f"worker's resources, e.g. {{num_npus: 8}} (validate_rl_args divides by its num_npus)"
        )
    if rl.use_integrated_worker and resource is not None:
        return (
            f"{cfg._source}: rl_config.reference_resource: must not be set when use_integrated_worker is true "
            f"(the reference shares the actor's NPUs; validate_rl_args refuses it)"
        )
    return None


def tokenizer_named(cfg: GRPOConfig) -> str | None:
    """A tokenizer folder: ``get_tokenizer`` loads ``tokenizer_name_or_path`` (a Hugging Face folder)."""
    if not cfg.megatron_training.tokenizer_name_or_path:
        return (
            f"{cfg._source}: megatron_training.tokenizer_name_or_path: not set; MindSpeed-RL loads its "
            f"tokenizer from a Hugging Face folder (get_tokenizer), e.g. ./Qwen2.5-7B in the checkout"
        )
    return None


# ---------------------------------------------------------------------------- long-tail keys
# The rules below mirror the rest of ``validate_rl_args`` (mindspeed_rl/config_cls/validate_config.py,
# 05a90d7): checks on keys the schema takes from the manifest, read here as MindSpeed-RL reads them.


def actor_key(cfg: GRPOConfig, key: str) -> Any:
    """A Megatron key as the actor's MindSpeed-RL config has it (``GRPOConfig.megatron_value``)."""
    return cfg.megatron_value(key)


def _rl(cfg: GRPOConfig, key: str) -> Any:
    return getattr(cfg.rl_config, key, None)


def ai_framework_known(cfg: GRPOConfig) -> str | None:
    """``ai_framework``: null (PyTorch) or ``mindspore`` (``validate_rl_args``)."""
    framework = actor_key(cfg, "ai_framework")
    if framework is not None and framework != "mindspore":
        return (
            f"{cfg._source}: actor_config.ai_framework: {framework!r}: MindSpeed-RL takes only null (PyTorch) or "
            f"mindspore (validate_rl_args)"
        )
    return None


def integrated_worker_roles(cfg: GRPOConfig) -> str | None:
    """Integrated: no ``reward_resource`` (no reward model); separate workers: no ``integrated_mode_config``."""
    rl = cfg.rl_config
    if rl.use_integrated_worker and _rl(cfg, "reward_resource") is not None:
        return (
            f"{cfg._source}: rl_config.reward_resource: a reward model is not supported with use_integrated_worker "
            f"true (validate_rl_args); use rule rewards or use_integrated_worker false"
        )
    if not rl.use_integrated_worker and _rl(cfg, "integrated_mode_config") is not None:
        return (
            f"{cfg._source}: rl_config.integrated_mode_config: must not be set when use_integrated_worker is false "
            f"(validate_rl_args)"
        )
    return None


CP_ALGORITHMS = ("ulysses_cp_algo", "megatron_cp_algo")


def context_parallel_algorithm(cfg: GRPOConfig) -> str | None:
    """With CP > 1, ``context_parallel_algo`` is Ulysses or Megatron's ring (``validate_rl_args``)."""
    algo = actor_key(cfg, "context_parallel_algo")
    if cfg.actor_config.context_parallel_size > 1 and algo is not None and algo not in CP_ALGORITHMS:
        return (
            f"{cfg._source}: actor_config.context_parallel_algo: {algo!r}: MindSpeed-RL supports "
            f"{' or '.join(CP_ALGORITHMS)} (validate_rl_args)"
        )
    return None


def remove_padding_needs(cfg: GRPOConfig) -> str | None:
    """``use_remove_padding`` (packed sequences) needs ``reset_attention_mask``, with PP > 1 also
    ``no_pad_to_seq_lengths``, and no multimodal model (``validate_rl_args``)."""
    if not _rl(cfg, "use_remove_padding"):
        return None
    why = "rl_config.use_remove_padding (packed sequences) needs it (validate_rl_args)"
    if cfg.actor_config.pipeline_model_parallel_size > 1 and not actor_key(cfg, "no_pad_to_seq_lengths"):
        return f"{cfg._source}: megatron_training.no_pad_to_seq_lengths: must be true with PP > 1; {why}"
    if not actor_key(cfg, "reset_attention_mask"):
        return f"{cfg._source}: megatron_training.reset_attention_mask: must be true; {why}"
    if _rl(cfg, "is_multimodal"):
        return f"{cfg._source}: rl_config.use_remove_padding: multimodal models cannot use it (validate_rl_args)"
    return None


def share_backbone_needs_lora(cfg: GRPOConfig) -> str | None:
    """``share_backbone`` (the reference is the LoRA model's frozen base) needs ``lora_target_modules``."""
    if _rl(cfg, "share_backbone") and not actor_key(cfg, "lora_target_modules"):
        return (
            f"{cfg._source}: rl_config.share_backbone: the shared backbone works with LoRA only; set "
            f"actor_config.lora_target_modules (validate_rl_args)"
        )
    return None


def dispatch_sizes_fit(cfg: GRPOConfig) -> str | None:
    """Explicit ``*_dispatch_size`` keys: each divides the responses of its stage and fits one DP rank's share.

    ``validate_rl_args`` computes the defaults so that they always hold; a value set by hand is checked
    against ``global_batch_size * n_samples_per_prompt`` (``_validate_experience_ratio``), against one data
    parallel rank's responses (``_validate_dispatch_size``), and the rollout one against a generation rank's
    share (``_validate_data_parallel``, Generation). With DAPO's ``filter_groups_enable`` the log-prob,
    advantage and update stages see ``filter_groups_train_batch_size`` prompts instead.
    """
    rl, actor, gen = cfg.rl_config, cfg.actor_config, cfg.generate_config
    tp, pp, cp = actor.tensor_model_parallel_size, actor.pipeline_model_parallel_size, actor.context_parallel_size
    npus, n = rl.actor_resource.num_npus, rl.n_samples_per_prompt
    gbs = cfg.megatron_training.global_batch_size
    actor_dp = npus // (tp * pp * cp)
    gen_dp = npus // (gen.infer_tensor_parallel_size * gen.infer_pipeline_parallel_size)
    if not actor_dp or not gen_dp:
        return None  # a layout rule says why
    filtered = _rl(cfg, "filter_groups_train_batch_size") if _rl(cfg, "filter_groups_enable") else None
    stage_gbs = filtered or gbs
    # key -> (prompts of its stage, data-parallel ranks sharing them)
    stages = {
        "actor_rollout_dispatch_size": (gbs, gen_dp),
        "actor_logprob_dispatch_size": (stage_gbs, actor_dp),
        "ref_dispatch_size": (gbs, actor_dp),
        "adv_dispatch_size": (stage_gbs, 1),
        "actor_update_dispatch_size": (stage_gbs, actor_dp),
    }
    for key, (prompts, dp) in stages.items():
        size = _rl(cfg, key)
        if not size:
            continue
        responses, share = prompts * n, prompts * n // dp
        where = f"{cfg._source}: rl_config.{key}: {size}"
        if key == "actor_rollout_dispatch_size" and (prompts // dp * n) % size:
            return f"{where} does not divide a generation rank's {prompts // dp * n} responses (validate_rl_args)"
        if key != "adv_dispatch_size" and size > share:
            return f"{where} is more than one DP rank's {share} responses ({prompts}*{n}/{dp}; validate_rl_args)"
        if responses % size:
            return (
                f"{where} does not divide the {responses} responses of an iteration ({prompts}*{n}; validate_rl_args)"
            )
        if key == "actor_update_dispatch_size" and size < rl.mini_batch_size / actor_dp:
            return f"{where} is less than mini_batch_size / DP = {rl.mini_batch_size}/{actor_dp} (validate_rl_args)"
    return None


def dapo_options(cfg: GRPOConfig) -> str | None:
    """DAPO's switches: overlong buffer, group filtering (``validate_rl_args``)."""
    src, max_tokens = cfg._source, cfg.generate_config.sampling_config.max_tokens
    if _rl(cfg, "overlong_buffer_enable"):
        buffer, rollout = _rl(cfg, "overlong_buffer"), _rl(cfg, "rollout_max_tokens")
        if buffer is not None and buffer >= max_tokens:
            return (
                f"{src}: rl_config.overlong_buffer: {buffer} must be less than sampling_config.max_tokens {max_tokens}"
            )
        if rollout != max_tokens:
            return (
                f"{src}: rl_config.rollout_max_tokens: {rollout} must equal generate_config.sampling_config."
                f"max_tokens {max_tokens} with overlong_buffer_enable (validate_rl_args)"
            )
    # clip-higher's low <= high is a config rule (grpo/config/rules.py): the embedded engine applies it too
    metric = _rl(cfg, "filter_groups_metric")
    if _rl(cfg, "filter_groups_enable") and metric not in cfg.rl_config.verifier_function:
        return (
            f"{src}: rl_config.filter_groups_metric: {metric!r} is not one of verifier_function "
            f"{list(cfg.rl_config.verifier_function)} (validate_rl_args)"
        )
    return None


def rollout_options(cfg: GRPOConfig) -> str | None:
    """Partial rollout refuses ``guarantee_order``; multi-turn needs a long enough budget and the async
    engine (``validate_rl_args``)."""
    src, rl = cfg._source, cfg.rl_config
    if (_rl(cfg, "partial_rollout_max_split") or 1) > 1 and rl.guarantee_order:
        return f"{src}: rl_config.guarantee_order: must be false when partial_rollout_max_split > 1 (validate_rl_args)"
    if _rl(cfg, "multi_turn_enable"):
        max_tokens = cfg.generate_config.sampling_config.max_tokens
        total = _rl(cfg, "max_total_response_length")
        if total is not None and total < max_tokens:
            return (
                f"{src}: rl_config.max_total_response_length: {total} must be at least sampling_config.max_tokens "
                f"{max_tokens} with multi_turn_enable (validate_rl_args)"
            )
        if not _rl(cfg, "async_engine"):
            return f"{src}: rl_config.async_engine: must be true with multi_turn_enable (validate_rl_args)"
    return None


LAUNCH_RULES: tuple[LaunchRule, ...] = (
    bf16_training_and_generation,
    integrated_worker,
    tokenizer_named,
    ai_framework_known,
    integrated_worker_roles,
    context_parallel_algorithm,
    remove_padding_needs,
    share_backbone_needs_lora,
    dispatch_sizes_fit,
    dapo_options,
    rollout_options,
)


def launch_rule_problems(cfg: GRPOConfig) -> list[str]:
    """Every MindSpeed-only launch rule ``cfg`` breaks (empty: MindSpeed-RL's own checks will pass)."""
    return [msg for rule in LAUNCH_RULES if (msg := rule(cfg)) is not None]


def global_batch_divisible_by_nodes(cfg: GRPOConfig, nodes: int) -> str | None:
    """``global_batch_size % nodes == 0`` for a cluster of ``nodes`` alive Ray nodes (``validate_rl_args``:
    rule rewards run as one process per node, each scoring ``global_batch_size / nodes`` prompts)."""
    gbs = cfg.megatron_training.global_batch_size
    if nodes > 0 and gbs % nodes:
        return (
            f"{cfg._source}: megatron_training.global_batch_size: {gbs} is not divisible by the {nodes} alive "
            f"nodes of the Ray cluster MindSpeed-RL joins (validate_rl_args: one rule-reward process per node)"
        )
    return None


def alive_ray_nodes() -> int | None:
    """Alive nodes of the Ray cluster this process is connected to (None outside Ray)."""
    if "ray" not in sys.modules:
        return None
    import ray

    if not ray.is_initialized():
        return None
    try:
        return sum(1 for node in ray.nodes() if node.get("Alive", False))
    except Exception:  # a half-initialised Ray: the check is skipped, MindSpeed-RL still checks
        return None


def ray_node_problems(cfg: GRPOConfig, settings: MindSpeedSpec) -> list[str]:
    """The node-count rule, where the cluster can be counted: the trial's worker's own cluster.

    It holds whenever there is no reward model (``reward_resource``), rule rewards or not.

    MindSpeed-RL joins the worker's cluster unless ``mindspeed.env`` names another one
    (``RAY_ADDRESS``, the two-cluster set-up of docs/npu.md); that one is not counted here.
    """
    if "RAY_ADDRESS" in settings.env:
        return []
    nodes = alive_ray_nodes()
    problem = global_batch_divisible_by_nodes(cfg, nodes) if nodes else None
    return [problem] if problem else []
