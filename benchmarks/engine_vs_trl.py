"""Generated tokens per second of a full GRPO iteration: this engine vs TRL's GRPOTrainer, on the CPU.

    python benchmarks/engine_vs_trl.py [--iters 3] [--threads 1] [--skip-trl] [OVERRIDE ...]

Both trainers get the same things: the tiny Qwen2 architecture of ``grpo_trainer_tiny_cpu`` with the same
warm-started weights (TRL gets them as a ``transformers.Qwen2ForCausalLM`` saved from the engine), the same
character-level tokenizer (built in code with ``tokenizers``, handed to TRL as a PreTrainedTokenizerFast),
the same prompts, group size, completion length, sampling, batch, mini batches and epochs, the same rule
rewards (acc + 0.1 strict_format), KL coefficient and clip ratio, and ``loss_type="grpo"`` (TRL's name for
the per-response token mean; the engine is run with ``engine.loss_agg_mode=seq-mean-token-mean`` to match, its
default being MindSpeed-RL's token mean). One untimed warm-up iteration each, then ``--iters`` timed.

An iteration is everything between two rollouts: sampling, rewards, reference/old log-probs and every
optimizer step. The script prints, for each trainer, generated tokens / iteration wall time, and the split
between rollout (sampling only) and the rest (scoring, log-prob passes, updates), then the ratio.
TRL is needed only here (``pip install trl``); it is not a dependency of the project.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from grpo._fs import read_jsonl  # noqa: E402
from grpo.config import load_config  # noqa: E402
from grpo.engine import rewards  # noqa: E402
from grpo.engine.data import get_task  # noqa: E402
from grpo.engine.hf_checkpoint import save_weights  # noqa: E402
from grpo.engine.model import ModelArgs  # noqa: E402
from grpo.engine.tokenizer import build_task_tokenizer  # noqa: E402
from grpo.engine.trainer import train  # noqa: E402
from grpo.engine.warm_start import default_cache_dir, warm_started_policy  # noqa: E402

CONFIG = "grpo_trainer_tiny_cpu"


def run_engine(overrides: list[str], iters: int, work: Path) -> dict:
    summary_dir = work / "engine"
    train(load_config(CONFIG, [*overrides, f"megatron_training.train_iters={iters + 1}"]), summary_dir)
    rows = read_jsonl(summary_dir / "metrics.jsonl")[1:]  # drop the warm-up iteration
    total = sum(r["timing/all"] for r in rows)
    return {
        "tokens": sum(r["generated_tokens"] for r in rows),
        "wall": total,
        "rollout": sum(r["timing/rollout"] for r in rows),
        "rest": total - sum(r["timing/rollout"] for r in rows),
        "per_iter": [r["timing/all"] for r in rows],
        "resp_len": statistics.mean(r["response_length/mean"] for r in rows),
        "acc": statistics.mean(r["grpo/acc/mean"] for r in rows),
    }


def run_trl(cfg, iters: int, work: Path) -> dict:
    import datasets
    import transformers
    import trl

    mt, rl, actor, sc = cfg.megatron_training, cfg.rl_config, cfg.actor_config, cfg.generate_config.sampling_config
    tok = build_task_tokenizer()
    args = ModelArgs.from_model_config(cfg.model_arch)
    policy, _ = warm_started_policy(args, tok, get_task(cfg.engine.task), mt.seed, cfg.engine.warm_start_steps,
                                    mt.init_method_std, default_cache_dir(cfg.engine.cache_dir))
    folder = work / "hf_policy"
    folder.mkdir(parents=True)
    save_weights(policy, folder, eos_token_id=tok.eos_id, pad_token_id=tok.pad_id)
    tok.save(folder)
    model = transformers.Qwen2ForCausalLM.from_pretrained(folder, dtype=torch.float32)
    model.generation_config.eos_token_id = tok.stop_ids
    model.generation_config.pad_token_id = tok.pad_id
    fast = transformers.PreTrainedTokenizerFast.from_pretrained(str(folder))
    fast.padding_side = "left"

    train_set, _ = get_task(cfg.engine.task).split(cfg.engine.task_size, 0, mt.seed)
    ds = datasets.Dataset.from_list([{"prompt": tok.chat_prompt(e.prompt), "label": e.label} for e in train_set])
    lengths: list[int] = []

    def reward(prompts, completions, completion_ids, label, **kwargs):
        lengths.extend(len(c) for c in completion_ids)
        totals, _ = rewards.score(list(completions), list(label), list(rl.verifier_function),
                                  list(rl.verifier_weight))
        return totals

    n = rl.n_samples_per_prompt
    responses, mini, micro = mt.global_batch_size * n, rl.mini_batch_size * n, actor.micro_batch_size
    steps_per_iter = (responses // mini) * rl.epochs
    targs = trl.GRPOConfig(
        output_dir=str(work / "trl"), use_cpu=True, bf16=False, report_to="none", save_strategy="no",
        logging_steps=10_000, disable_tqdm=True, seed=mt.seed, dataloader_num_workers=0,
        per_device_train_batch_size=micro, gradient_accumulation_steps=mini // micro,
        steps_per_generation=responses // micro, num_generations=n, num_iterations=rl.epochs,
        max_completion_length=sc.max_tokens, temperature=sc.temperature, top_p=sc.top_p,
        top_k=0 if sc.top_k == -1 else sc.top_k, min_p=sc.min_p or None,
        beta=rl.init_kl_coef, epsilon=rl.clip_ratio, loss_type="grpo", scale_rewards="group",
        learning_rate=actor.lr, lr_scheduler_type="constant", weight_decay=actor.weight_decay,
        adam_beta1=actor.adam_beta1, adam_beta2=actor.adam_beta2, max_grad_norm=actor.clip_grad,
        max_steps=steps_per_iter * (iters + 1))
    trainer = trl.GRPOTrainer(model=model, reward_funcs=[reward], args=targs, train_dataset=ds,
                              processing_class=fast)

    gen_times: list[float] = []
    original = trainer._generate

    def timed_generate(*a, **k):
        t = time.perf_counter()
        out = original(*a, **k)
        gen_times.append(time.perf_counter() - t)
        return out

    trainer._generate = timed_generate
    step_ends: list[float] = []

    class Clock(transformers.TrainerCallback):
        def on_step_end(self, *a, **k):
            step_ends.append(time.perf_counter())

    trainer.add_callback(Clock())
    start = time.perf_counter()
    trainer.train()
    bounds = [start] + step_ends[steps_per_iter - 1::steps_per_iter]  # end of each iteration
    per_iter = [b - a for a, b in zip(bounds[:-1], bounds[1:])][1:]
    per_gen_tokens = len(lengths) // (iters + 1)
    tokens = sum(lengths[per_gen_tokens:])
    wall = sum(per_iter)
    rollout = sum(gen_times[1:])
    return {"tokens": tokens, "wall": wall, "rollout": rollout, "rest": wall - rollout, "per_iter": per_iter,
            "resp_len": statistics.mean(lengths[per_gen_tokens:]), "trl": trl.__version__,
            "transformers": transformers.__version__}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--iters", type=int, default=3, help="timed iterations (after one warm-up)")
    p.add_argument("--threads", type=int, default=1, help="torch threads for both")
    p.add_argument("--skip-trl", action="store_true")
    p.add_argument("overrides", nargs="*", help="config overrides, e.g. megatron_training.global_batch_size=16")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    # The same loss as TRL's loss_type="grpo": the per-response token mean (the engine's default is token-mean).
    overrides = [f"engine.num_threads={a.threads}", "engine.loss_agg_mode=seq-mean-token-mean", *a.overrides]
    cfg = load_config(CONFIG, overrides)
    mt, rl = cfg.megatron_training, cfg.rl_config
    print(f"config: {mt.global_batch_size} prompts x {rl.n_samples_per_prompt} samples, max "
          f"{cfg.generate_config.sampling_config.max_tokens} tokens, mini batch {rl.mini_batch_size} prompts, "
          f"{rl.epochs} epoch(s), micro batch {cfg.actor_config.micro_batch_size}, {a.threads} thread(s)")
    work = Path(tempfile.mkdtemp(prefix="grpo-bench-"))
    try:
        results = {"engine": run_engine(overrides, a.iters, work)}
        if not a.skip_trl:
            results["trl"] = run_trl(cfg, a.iters, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"\n{'':8} {'gen tok/s':>10} {'iter s':>8} {'rollout s':>10} {'rest s':>8} {'rollout %':>10} {'resp len':>9}")
    for name, r in results.items():
        tps = r["tokens"] / r["wall"]
        print(f"{name:8} {tps:10.1f} {r['wall'] / a.iters:8.2f} {r['rollout'] / a.iters:10.2f} "
              f"{r['rest'] / a.iters:8.2f} {100 * r['rollout'] / r['wall']:9.0f}% {r['resp_len']:9.1f}")
    if "trl" in results:
        e, t = results["engine"], results["trl"]
        print(f"\nTRL {t['trl']} (transformers {t['transformers']})")
        print(f"engine / TRL generated tokens per second: {(e['tokens'] / e['wall']) / (t['tokens'] / t['wall']):.1f}x"
              f"  (rollout alone {(e['tokens'] / e['rollout']) / (t['tokens'] / t['rollout']):.1f}x, "
              f"rest {t['rest'] / e['rest']:.1f}x faster)")


if __name__ == "__main__":
    main()
