"""Held-out evaluation: the policy's accuracy (fraction correct) on prompts that never train.

``eval/acc`` samples ``samples`` responses per prompt with the rollout's sampling parameters (the policy as
trained), ``eval/acc_greedy`` decodes greedily, ``eval/strict_format`` is the sampled responses' format rate and
``eval/prompts`` how many prompts were scored. The first ``SAMPLE_PROMPTS`` prompts' responses (greedy and one
sampled) are appended to ``samples.jsonl`` with their rewards.

Evaluation draws from its own generator, seeded the same way every time (``task_seed + 1``), so it neither
perturbs the training's random stream nor adds sampling noise between two evaluations, and every seed and
trial of a study is judged on the same draws.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from grpo.engine import rewards
from grpo.engine.data import Example
from grpo.engine.model import Qwen2
from grpo.engine.rollout import SamplingParams, generate
from grpo.engine.tokenizer import Tokenizer

SAMPLE_PROMPTS = 4  # held-out prompts whose responses go to samples.jsonl at each evaluation


@dataclass(frozen=True)
class HeldOut:
    examples: Sequence[Example]
    prompt_ids: dict[str, list[int]]
    tokenizer: Tokenizer
    device: torch.device
    task_seed: int

    def evaluate(
        self,
        policy: Qwen2,
        sampling: SamplingParams,
        iteration: int,
        samples: int,
        scoring: tuple[list[str], list[float]],
        samples_file: Path,
    ) -> dict[str, float]:
        """The metrics above for ``policy`` now; ``scoring`` (verifiers, weights) gives the shown rewards."""
        if not self.examples:
            return {}
        prompts = [self.prompt_ids[e.prompt] for e in self.examples]
        out: dict[str, float] = {"eval/prompts": float(len(prompts))}
        shown: list[dict[str, Any]] = []
        greedy = SamplingParams(max_tokens=sampling.max_tokens, greedy=True)
        for name, kind, params, n in (
            ("eval/acc", "sampled", sampling, samples),
            ("eval/acc_greedy", "greedy", greedy, 1),
        ):
            gen = torch.Generator(device=self.device)
            gen.manual_seed(self.task_seed + 1)  # the same draws for every seed and trial
            tok = self.tokenizer
            batch = generate(policy, prompts, n, params, tok.stop_ids, tok.pad_id, tok.vocab_size, gen)
            ids = batch.response_lists()
            texts = tok.decode_batch(ids)
            labels = [e.label for e in self.examples for _ in range(n)]
            correct = [rewards.is_correct(text, label) for text, label in zip(texts, labels, strict=True)]
            out[name] = sum(correct) / len(texts)
            if n > 1:
                out["eval/strict_format"] = sum(rewards.strict_format(t) > 0 for t in texts) / len(texts)
            rows = [k * n for k in range(min(SAMPLE_PROMPTS, len(self.examples)))]  # each prompt's first response
            shown_rows = [self.examples[r // n] for r in rows]
            scores, _ = rewards.score(
                [texts[r] for r in rows], [labels[r] for r in rows], *scoring,
                prompts=[e.messages or e.prompt for e in shown_rows], extras=[e.extra for e in shown_rows],
                completion_ids=[ids[r] for r in rows],
            )  # fmt: skip
            for r, reward in zip(rows, scores, strict=True):
                example = self.examples[r // n]
                shown.append(
                    {
                        "iteration": iteration,
                        "kind": kind,
                        "prompt": example.prompt,
                        "label": example.label,
                        "response": texts[r],
                        "reward": reward,
                        "correct": correct[r],
                    }
                )
        with open(samples_file, "a") as fh:
            fh.writelines(json.dumps(row) + "\n" for row in shown)
        return out
