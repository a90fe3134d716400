"""``generate_config``: the rollout, its vLLM engine and its sampling parameters."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import Field, field_validator

from grpo.config.schema._base import Section, with_long_tail


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
