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

from grpo.config import GRPOConfig
from grpo.sweep.spec import MindSpeedSpec

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


LAUNCH_RULES: tuple[LaunchRule, ...] = (bf16_training_and_generation, integrated_worker, tokenizer_named)


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
