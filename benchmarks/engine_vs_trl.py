"""Generated tokens per second of a full GRPO iteration: this engine vs TRL's GRPOTrainer, on the CPU.

    python benchmarks/engine_vs_trl.py [--iters 3] [--threads 1] [--device cpu] [--skip-trl] [OVERRIDE ...]

``--device cuda`` or ``npu`` runs both trainers there (benchmarks/accelerator_check.sh does); the default is the
CPU, for both.

Both trainers get the same things: the tiny Qwen2 architecture of ``grpo_trainer_tiny_cpu`` with the same
warm-started weights (TRL gets them as a ``transformers.Qwen2ForCausalLM`` saved from the engine), the same
character-level tokenizer (built in code with ``tokenizers``, handed to TRL as a PreTrainedTokenizerFast),
the same prompts, group size, completion length, sampling, batch, mini batches and epochs, the same rule
rewards (acc + 0.1 strict_format), KL coefficient and clip ratio, and ``loss_type="grpo"`` (TRL's name for
the per-response token mean; the engine is run with ``engine.loss_agg_mode=seq-mean-token-mean`` to match, its
default being MindSpeed-RL's token mean). One untimed warm-up iteration each, then ``--iters`` timed.

An iteration is everything between two rollouts: sampling, rewards, reference/old log-probs and every
optimizer step. The script prints, for each trainer, generated tokens / iteration wall time and the iteration's
phases side by side, so a regression shows where it is:

- rollout: sampling only (the engine's ``timing/rollout``; TRL's ``_generate``);
- reward: decoding and scoring (``timing/reward``, which also decodes and checks ``is_correct``; TRL's
  ``_calculate_rewards`` calling the same ``rewards.score``);
- reference: the no-grad log-prob passes (``timing/ref``; TRL's ``_get_per_token_logps_and_entropies`` under
  ``torch.no_grad``: the reference model and, when TRL needs them, old log-probs);
- update: everything else (``timing/update``: old log-probs and every optimizer step; TRL: the rest of the
  iteration).

then engine / TRL tokens per second and the reward's share of the engine's iteration. Both run in one process,
one after the other, so a loaded machine slows both; say so when quoting the figures.
The ``bench`` extra is needed only here (``pip install -e .[bench]``: trl, datasets, accelerate).
"""

from __future__ import annotations

import argparse
import itertools
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
from grpo.engine.prompt import build_prompt  # noqa: E402
from grpo.engine.tokenizer import build_task_tokenizer  # noqa: E402
from grpo.engine.trainer import train  # noqa: E402
from grpo.engine.warm_start import default_cache_dir, warm_started_policy  # noqa: E402

CONFIG = "grpo_trainer_tiny_cpu"
PHASES = ("rollout", "reward", "reference", "update")
ENGINE_PHASES = {"rollout": "rollout", "reward": "reward", "reference": "ref", "update": "update"}


def run_engine(overrides: list[str], iters: int, work: Path) -> dict:
    summary_dir = work / "engine"
    train(load_config(CONFIG, [*overrides, f"megatron_training.train_iters={iters + 1}"]), summary_dir)
    rows = [r for r in read_jsonl(summary_dir / "metrics.jsonl") if "timing/all" in r]  # not the eval rows
    rows = rows[1:]  # drop the warm-up iteration
    total = sum(r["timing/all"] for r in rows)
    phases = {p: sum(r[f"timing/{key}"] for r in rows) for p, key in ENGINE_PHASES.items()}
    return {
        "tokens": sum(r["generated_tokens"] for r in rows),
        "wall": total,
        **phases,
        "rest": total - phases["rollout"],
        "per_iter": [r["timing/all"] for r in rows],
        "resp_len": statistics.mean(r["response_length/mean"] for r in rows),
        "acc": statistics.mean(r["grpo/acc/mean"] for r in rows),
    }


def run_trl(cfg, iters: int, work: Path, device: str) -> dict:
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
    ds = datasets.Dataset.from_list([{"prompt": build_prompt(tok, e), "label": e.label} for e in train_set])
    lengths: list[int] = []

    def reward(prompts, completions, completion_ids, label, **kwargs):
        lengths.extend(len(c) for c in completion_ids)
        totals, _ = rewards.score(list(completions), list(label), list(rl.verifier_function),
                                  list(rl.verifier_weight))
        return totals

    spent: dict[str, list[float]] = {"rollout": [], "reward": [], "reference": []}

    def timed(phase: str, fn, when=lambda: True):
        def wrapper(*a, **k):
            if not when():
                return fn(*a, **k)
            t = time.perf_counter()
            out = fn(*a, **k)
            spent[phase].append(time.perf_counter() - t)
            return out

        return wrapper

    n = rl.n_samples_per_prompt
    responses, mini, micro = mt.global_batch_size * n, rl.mini_batch_size * n, actor.micro_batch_size
    steps_per_iter = (responses // mini) * rl.epochs
    targs = trl.GRPOConfig(
        output_dir=str(work / "trl"), use_cpu=device == "cpu", bf16=False, report_to="none", save_strategy="no",
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

    trainer._generate = timed("rollout", trainer._generate)
    trainer._calculate_rewards = timed("reward", trainer._calculate_rewards)
    # the no-grad passes (reference, old log-probs) run once per generation; the loss's pass has grad
    trainer._get_per_token_logps_and_entropies = timed(
        "reference", trainer._get_per_token_logps_and_entropies, lambda: not torch.is_grad_enabled())
    step_ends: list[float] = []

    class Clock(transformers.TrainerCallback):
        def on_step_end(self, *a, **k):
            step_ends.append(time.perf_counter())

    trainer.add_callback(Clock())
    start = time.perf_counter()
    trainer.train()
    bounds = [start, *step_ends[steps_per_iter - 1::steps_per_iter]]  # end of each iteration
    per_iter = [b - a for a, b in itertools.pairwise(bounds)][1:]
    per_gen_tokens = len(lengths) // (iters + 1)
    tokens = sum(lengths[per_gen_tokens:])
    wall = sum(per_iter)
    # one generation per iteration; drop the warm-up's calls (the same share of each phase's list)
    phases = {p: sum(v[len(v) // (iters + 1):]) for p, v in spent.items()}
    phases["update"] = wall - sum(phases.values())
    return {"tokens": tokens, "wall": wall, **phases, "rest": wall - phases["rollout"], "per_iter": per_iter,
            "resp_len": statistics.mean(lengths[per_gen_tokens:]), "trl": trl.__version__,
            "transformers": transformers.__version__}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--iters", type=int, default=3, help="timed iterations (after one warm-up)")
    p.add_argument("--threads", type=int, default=1, help="torch threads for both")
    p.add_argument("--device", choices=("cpu", "cuda", "npu"), default="cpu", help="where both trainers run")
    p.add_argument("--skip-trl", action="store_true")
    p.add_argument("overrides", nargs="*", help="config overrides, e.g. megatron_training.global_batch_size=16")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    # The same loss as TRL's loss_type="grpo": the per-response token mean (the engine's default is token-mean).
    overrides = [f"engine.num_threads={a.threads}", "engine.loss_agg_mode=seq-mean-token-mean",
                 f"engine.device={a.device}", *a.overrides]
    cfg = load_config(CONFIG, overrides)
    mt, rl = cfg.megatron_training, cfg.rl_config
    print(f"device: {a.device}; config: {mt.global_batch_size} prompts x {rl.n_samples_per_prompt} samples, max "
          f"{cfg.generate_config.sampling_config.max_tokens} tokens, mini batch {rl.mini_batch_size} prompts, "
          f"{rl.epochs} epoch(s), micro batch {cfg.actor_config.micro_batch_size}, {a.threads} thread(s)")
    work = Path(tempfile.mkdtemp(prefix="grpo-bench-"))
    try:
        results = {"engine": run_engine(overrides, a.iters, work)}
        if not a.skip_trl:
            results["trl"] = run_trl(cfg, a.iters, work, a.device)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"\n{'seconds per iteration':24}" + "".join(f"{name:>10}" for name in results)
          + ("  TRL/engine" if "trl" in results else ""))
    for phase in (*PHASES, "wall"):
        cells = [r[phase] / a.iters for r in results.values()]
        ratio = f"{cells[1] / cells[0]:11.1f}x" if len(cells) == 2 and cells[0] > 0 else ""
        print(f"{'iteration' if phase == 'wall' else phase:24}" + "".join(f"{c:10.3f}" for c in cells) + ratio)
    print(f"{'generated tokens / s':24}" + "".join(f"{r['tokens'] / r['wall']:10.1f}" for r in results.values()))
    print(f"{'response length':24}" + "".join(f"{r['resp_len']:10.1f}" for r in results.values()))
    e = results["engine"]
    print(f"\nengine reward: {100 * e['reward'] / e['wall']:.1f} % of its iteration time "
          f"(per iteration: {', '.join(f'{x:.2f}' for x in e['per_iter'])} s)")
    if "trl" in results:
        t = results["trl"]
        print(f"TRL {t['trl']} (transformers {t['transformers']})")
        print(f"engine / TRL generated tokens per second: {(e['tokens'] / e['wall']) / (t['tokens'] / t['wall']):.1f}x"
              f"  (rollout alone {(e['tokens'] / e['rollout']) / (t['tokens'] / t['rollout']):.1f}x, "
              f"rest {t['rest'] / e['rest']:.1f}x faster)")

if __name__ == "__main__":
    main()
