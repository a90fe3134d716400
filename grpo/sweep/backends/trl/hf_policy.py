"""The held-out evaluation of a TRL trial's policy, with eval/* meaning what they mean on the embedded engine.

The engine's Qwen2 (no folder, or a Qwen2 folder): TRL's weights are copied into the engine's model
(``model.copy_into``) and evaluated as the engine evaluates, on the CPU. Any other causal LM: the Hugging Face
model itself, driven by the engine's own sampling loop (``grpo.engine.rollout.generate``: greedy argmax,
temperature then top_k/top_p/min_p, one draw per row from the evaluation's seeded generator, the same stop
tokens and lengths) over the model's forward with transformers' KV cache. transformers' ``generate`` would
sample with its own logits processors from torch's global generator: other draws, and another random stream
than the training's. tests/test_trl_any_causal_lm.py checks the two paths agree on a Qwen2.

    metrics = evaluate(base, trainer.model, sampling, iteration, 4, scoring, run_dir / "samples.jsonl")
"""

from __future__ import annotations

import dataclasses
import inspect
from pathlib import Path
from typing import Any

import torch

from grpo.engine.rollout import SamplingParams
from grpo.sweep.backends.trl.model import Base, copy_into


class _Cache:
    """The engine's cache interface (``repeat_rows``) over transformers' ``DynamicCache``."""

    def __init__(self, kv: Any):
        self.kv = kv

    def repeat_rows(self, n: int) -> _Cache:
        self.kv.batch_repeat_interleave(n)  # in place: the prefill is not used again
        return self


class HFPolicy:
    """A transformers causal LM (or its peft wrapper) behind the engine model's interface that ``generate``
    uses: ``lm_head``, ``new_cache``, and ``__call__`` giving logits at the engine's positions (each row's
    ``cumsum(attention_mask) - 1``, so left padding does not shift them)."""

    def __init__(self, model: Any):
        self.model = model
        self.lm_head = model.get_output_embeddings()
        own = model.get_base_model() if hasattr(model, "get_base_model") else model  # under peft's wrapper
        # transformers 5.25 renamed forward's past_key_values to cache (the old name goes in 5.40)
        self.cache_kw = "cache" if "cache" in inspect.signature(own.forward).parameters else "past_key_values"

    def new_cache(self, batch: int, max_len: int) -> _Cache:
        import transformers

        return _Cache(transformers.DynamicCache(config=self.model.config))

    def __call__(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        cache: _Cache | None = None,
        positions: torch.Tensor | None = None,
    ) -> torch.Tensor:
        if positions is None:  # the engine's default: over the whole key span, the new tokens' columns
            positions = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)[:, -input_ids.shape[1] :]
        kv = {self.cache_kw: cache.kv} if cache is not None else {}
        use = cache is not None
        out = self.model(
            input_ids=input_ids, attention_mask=attention_mask, position_ids=positions, use_cache=use, **kv
        )
        return out.logits


def evaluate(
    base: Base,
    model: Any,
    sampling: SamplingParams,
    iteration: int,
    samples: int,
    scoring: tuple[list[str], list[float]],
    samples_file: Path,
) -> dict[str, float]:
    """``HeldOut.evaluate`` of TRL's ``model`` now (module docstring); the model's train mode is kept."""
    if base.evaluator is not None:
        policy = copy_into(base.evaluator, model)
        return base.held_out.evaluate(policy, sampling, iteration, samples, scoring, samples_file)
    device = model.get_output_embeddings().weight.device
    held_out = dataclasses.replace(base.held_out, device=device)  # the draws' generator lives with the model
    training = model.training
    model.eval()  # no dropout, as the engine's evaluator
    try:
        hf: Any = HFPolicy(model)  # the engine model's interface (typed Qwen2 in rollout.py)
        return held_out.evaluate(hf, sampling, iteration, samples, scoring, samples_file)
    finally:
        model.train(training)
