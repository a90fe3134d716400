"""How MindSpeed-RL's ``acc`` rule changes the tiny task's rewards: the old rule against the new one.

    python benchmarks/reward_change.py [--prompts 32] [--samples 8] [--temperature 1.0]

Samples ``prompts x samples`` responses from the base (warm-started, cached) policy of
``configs/grpo_trainer_tiny_cpu.yaml`` with the engine's own rollout code (``Run``: the first training batch,
the config's sampling but the temperature given here) and scores each with

- the old rule (before issue 11): boxed answer, else a bare ``<answer>..</answer>`` counts; numbers compare as
  fractions, else trimmed strings; +1 / -0.5 / -1 (no answer);
- the new one: ``grpo.engine.rewards.acc`` (MindSpeed-RL's ``acc_worker``: -1 without "boxed").

Prints the share of responses whose ``acc`` score changes, by kind of change, and the mean reward both ways.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections import Counter
from pathlib import Path

from grpo.config import load_config
from grpo.engine import rewards
from grpo.engine.rollout import SamplingParams, generate
from grpo.engine.trainer import Run


def old_acc(text: str, label: str) -> float:
    """The engine's acc before issue 11 (its is_correct check, plus -1 when nothing is extracted)."""
    answer = rewards.extract_answer(text)
    if answer is None or answer == "":
        return -1.0
    return 1.0 if rewards.answers_equal(answer, label) else -0.5


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompts", type=int, default=32)
    parser.add_argument("--samples", type=int, default=8)
    parser.add_argument("--temperature", type=float, default=1.0)
    args = parser.parse_args()

    cfg = load_config("grpo_trainer_tiny_cpu", [f"megatron_training.global_batch_size={args.prompts}"])
    with tempfile.TemporaryDirectory() as tmp:
        run = Run(cfg, Path(tmp))
        examples = run.train_set[: args.prompts]
        s = run.sampling
        sampling = SamplingParams(args.temperature, s.top_p, s.top_k, s.min_p, s.max_tokens)
        t0 = time.perf_counter()
        batch = generate(
            run.policy,
            [run.prompt_ids[e.prompt] for e in examples],
            args.samples,
            sampling,
            run.tokenizer.stop_ids,
            run.tokenizer.pad_id,
            run.tokenizer.vocab_size,
            run.generator,
        )
        texts = run.tokenizer.decode_batch(batch.response_lists())
    labels = [e.label for e in examples for _ in range(args.samples)]
    old = [old_acc(t, label) for t, label in zip(texts, labels, strict=True)]
    new = [rewards.acc(t, label) for t, label in zip(texts, labels, strict=True)]
    changes = Counter((a, b) for a, b in zip(old, new, strict=True) if a != b)
    n = len(texts)
    print(
        f"{n} responses ({args.prompts} prompts x {args.samples}, temperature {args.temperature}), "
        f"{time.perf_counter() - t0:.1f} s"
    )
    print(f"acc changed for {sum(changes.values())} of {n} = {sum(changes.values()) / n:.1%}")
    for (a, b), count in sorted(changes.items()):
        example = next(t for t, x, y in zip(texts, old, new, strict=True) if (x, y) == (a, b))
        print(f"  {a:+.1f} -> {b:+.1f}: {count}, e.g. {example!r}")
    print(f"mean acc: old {sum(old) / n:+.4f}, new {sum(new) / n:+.4f}")
    correct = sum(rewards.is_correct(t, label) for t, label in zip(texts, labels, strict=True))
    print(f"is_correct (grpo/acc/mean, unchanged rule): {correct / n:.4f}")
    no_box = [t for t in texts if "boxed" not in t]
    print(f"responses without 'boxed': {len(no_box)}" + (f"; e.g. {no_box[0]!r}" if no_box else ""))


if __name__ == "__main__":
    main()
