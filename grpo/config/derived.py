"""Values that follow from a config: parallel sizes, batch arithmetic, token budget. Computed here only.

MindSpeed-RL counts ``global_batch_size`` and ``mini_batch_size`` in prompts and multiplies
``mini_batch_size`` by ``n_samples_per_prompt`` internally, so one optimizer step consumes
``mini_batch_size * n_samples_per_prompt`` responses, split over the train data-parallel ranks and
then into micro batches of ``micro_batch_size`` responses. Integer division is used throughout;
``rules.py`` makes sure every division here is exact before anything runs.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any

from grpo.config.schema import GRPOConfig


def _how(text: str) -> Any:
    """A field of ``Derived`` and how it is computed (``grpo-sweep validate`` prints it beside the value)."""
    return field(metadata={"how": text})


@dataclass(frozen=True)
class Derived:
    """The derived layout and batch figures of one config (see the module docstring)."""

    num_npus: int = _how("rl_config.actor_resource.num_npus")
    train_tp: int = _how("actor_config TP")
    train_pp: int = _how("actor_config PP")
    train_dp: int = _how("num_npus / (TP * PP * CP)")
    infer_tp: int = _how("generate_config infer TP")
    generation_dp: int = _how("num_npus / infer TP")  # vLLM replicas (infer PP is always 1)
    rollouts_per_iteration: int = _how("global_batch * n_samples")
    mini_batch_responses: int = _how("mini_batch * n_samples")  # MindSpeed's internal rescale
    optimizer_steps_per_iteration: int = _how("epochs * global_batch / mini_batch")
    micro_batches_per_step: int = _how("mini_batch_responses / DP / micro")  # per train DP rank
    prompts_per_generation_replica: int = _how("global_batch / generation DP")
    # max_prompt_length + max_tokens, at most max_model_len (responses are capped there)
    tokens_per_iteration_max: int = _how("rollouts * (prompt + response)")

    def as_dict(self) -> dict[str, int]:
        return asdict(self)

    @staticmethod
    def how() -> dict[str, str]:
        """How each value is computed, by field name."""
        return {f.name: f.metadata["how"] for f in fields(Derived)}


def _div(a: int, b: int) -> int:
    return a // b if b else 0


def sequence_length(cfg: GRPOConfig) -> int:
    """Longest sequence of a rollout: max_prompt_length + max_tokens, capped at max_model_len."""
    gen = cfg.generate_config
    return min(cfg.rl_config.max_prompt_length + gen.sampling_config.max_tokens, gen.max_model_len)


def trained_prompts(cfg: GRPOConfig) -> int:
    """Prompts the update trains on per iteration: ``filter_groups_train_batch_size`` under DAPO's dynamic
    sampling (when set to a positive number; other values are refused before a run), else global_batch_size."""
    rl = cfg.rl_config
    kept = getattr(rl, "filter_groups_train_batch_size", None)  # long-tail keys are typed by the manifest
    if getattr(rl, "filter_groups_enable", None) and isinstance(kept, int) and kept > 0:
        return kept
    return cfg.megatron_training.global_batch_size


def fully_on_policy(cfg: GRPOConfig) -> bool:
    """One optimizer step per iteration (epochs 1, one mini batch): every importance ratio is 1, and
    MindSpeed-RL skips the old log-prob pass (``set_actor_log_prob_skip_flag``)."""
    return cfg.rl_config.epochs == 1 and cfg.rl_config.mini_batch_size >= trained_prompts(cfg)


def derive(cfg: GRPOConfig) -> Derived:
    """Compute the derived values of ``cfg`` (exact when ``check_rules(cfg)`` is empty)."""
    actor, rl, gen = cfg.actor_config, cfg.rl_config, cfg.generate_config
    num_npus = rl.actor_resource.num_npus
    tp, pp = actor.tensor_model_parallel_size, actor.pipeline_model_parallel_size
    train_dp = _div(num_npus, tp * pp * actor.context_parallel_size)
    generation_dp = _div(num_npus, gen.infer_tensor_parallel_size * gen.infer_pipeline_parallel_size)
    gbs, n = cfg.megatron_training.global_batch_size, rl.n_samples_per_prompt
    rollouts = gbs * n
    mini_responses = rl.mini_batch_size * n
    return Derived(
        num_npus=num_npus,
        train_tp=tp,
        train_pp=pp,
        train_dp=train_dp,
        infer_tp=gen.infer_tensor_parallel_size,
        generation_dp=generation_dp,
        rollouts_per_iteration=rollouts,
        mini_batch_responses=mini_responses,
        optimizer_steps_per_iteration=rl.epochs * _div(gbs, rl.mini_batch_size),
        micro_batches_per_step=_div(_div(mini_responses, train_dp), actor.micro_batch_size),
        prompts_per_generation_replica=_div(gbs, generation_dp),
        tokens_per_iteration_max=rollouts * sequence_length(cfg),
    )
