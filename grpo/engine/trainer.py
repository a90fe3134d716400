"""The GRPO loop: rollout, rule rewards, group-normalised advantages, clipped mini-batch updates.

One iteration (MindSpeed-RL's ``grpo_trainer_hybrid``):

1. take ``global_batch_size`` prompts from the seeded data order;
2. sample ``n_samples_per_prompt`` responses each (``rollout.generate``, KV cache, no autograd);
3. score them with the verifiers (plus the overlong penalty, ``overlong_buffer_enable``); with dynamic
   sampling (``filter_groups_enable``) repeat 1-3 until enough groups vary (``draw.py``, ``dapo.py``);
4. reference log-probs (skipped when the KL term can never matter: init_kl_coef 0 and fixed control), then
   group-normalised advantages of the scores (minus the KL, with ``use_kl_in_reward``);
5. old log-probs: those of the policy that sampled, which the rollout already returned (the same model,
   temperature and vocabulary; equal to a recomputation up to float error), so no forward pass is
   spent on them. ``engine.recompute_old_logprobs`` recomputes them as MindSpeed-RL does instead: the
   first mini batch of the first epoch is updated from exactly the sampling policy, so its old log-probs
   are the current ones (ratio 1, no extra pass); every other mini batch gets them from one forward
   pass before the first optimizer step;
6. for each of ``epochs``: split the responses (shuffled when ``shuffle_mini_batch``) into mini batches of
   ``mini_batch_size * n_samples_per_prompt`` responses (MindSpeed-RL's rescaling), accumulate gradients
   over micro batches of ``actor_config.micro_batch_size`` (each trimmed of the padding its rows share,
   which changes no gradient; see the loss aggregation below), clip to ``clip_grad``, one AdamW step each;
7. adapt the KL coefficient, write the metrics line, call the callback, checkpoint every
   ``save_interval`` and at the end (and stop early at an ``engine.exit_interval``, with a checkpoint).

A ``schedule`` (``grpo/config/schedule.py``) is applied when the run is built, for the iteration it starts at, and
before each iteration whose number of completed iterations is one of its starts: ``Run.cfg`` is then the config
with those values set, and what holds one (sampling parameters, KL controller, the optimizer's weight decay) is
refreshed, so the run trains as one resumed there with the values set would.

Loss aggregation (``engine.loss_agg_mode``, see ``loss.py``): ``token-mean`` (MindSpeed-RL's GRPO loss) is a
token mean per micro batch, each micro batch weighing 1 / the mini batch's micro batches, so which rows share
a micro batch changes the gradient. There, micro batches are consecutive rows of the mini batch, as
MindSpeed-RL's ``_split_batches`` (``torch.split``) makes them; our mini batches are themselves taken from
the (optionally shuffled) response order, not from MindSpeed-RL's dispatch order. The ``seq-mean-*`` modes
do not depend on the split, so their micro batches group rows by length (less padding). The policy loss,
the clip range (clip-higher) and the advantage estimator come from the registries of ``loss.py``.

Learning rate (Megatron's schedule, per optimizer step): linear warmup over ``lr_warmup_fraction`` of all
steps (step s of the warmup uses lr * (s + 1) / warmup, so no step is wasted at lr 0), then constant,
linear or cosine decay from ``lr`` to ``min_lr`` at the last step. Weight decay skips biases and norms.
"""

from __future__ import annotations

import contextlib
import functools
import math
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch

from grpo._fs import SAMPLES_FILE, truncate_jsonl_after
from grpo.config import GRPOConfig
from grpo.config import schedule as schedule_mod
from grpo.config.derived import fully_on_policy
from grpo.engine import build, dapo, rewards, variants
from grpo.engine import checkpoint as ckpt
from grpo.engine import lora as lora_mod
from grpo.engine import update as update_mod
from grpo.engine.check import check_config
from grpo.engine.draw import Drawer
from grpo.engine.evaluate import HeldOut
from grpo.engine.loss import ADVANTAGE_ESTIMATORS, FixedKLController, kl_controller
from grpo.engine.metrics import MetricsSink, close_logger, run_logger
from grpo.engine.model import ModelArgs, Qwen2, set_dropout
from grpo.engine.rollout import Rollout, SamplingParams
from grpo.errors import UserError

Callback = Callable[[int, dict], "bool | None"]


def truncated_fraction(batch: Rollout, stop_ids: list[int]) -> float:
    """Share of responses that ended at max_tokens without a stop token (cut off, not finished)."""
    rows = torch.arange(batch.input_ids.shape[0], device=batch.input_ids.device)
    last = batch.responses[rows, (batch.response_lengths - 1).clamp(min=0)]
    stops = torch.tensor(stop_ids, device=last.device)
    return float((~torch.isin(last, stops)).float().mean())


@contextlib.contextmanager
def torch_threads(n: int) -> Iterator[None]:
    previous = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


class Run:
    """Everything one training run holds; built (and fully checked) before the first iteration.

    Built by ``build.py`` (device, tokenizer, prompts, models, optimizer); an iteration draws scored responses
    (``draw.py``), computes the advantages and updates the policy (``update.py``)."""

    def __init__(self, cfg: GRPOConfig, run_dir: Path):
        problems = check_config(cfg)
        if problems:
            raise UserError(problems[0], problems)
        # config: as written (its schedule included); cfg: the values in effect for the next iteration
        self.config, self.cfg, self.run_dir = cfg, cfg, Path(run_dir)
        self.log = run_logger(self.run_dir)
        rl, actor = cfg.rl_config, cfg.actor_config
        self.device = build.pick_device(cfg.engine.device)
        self.seed = cfg.megatron_training.seed
        sampling = cfg.generate_config.sampling_config
        self.temperature = sampling.temperature
        self.generator = torch.Generator(device=self.device)
        self.generator.manual_seed(sampling.seed if sampling.seed is not None else self.seed)

        self.tokenizer = build.tokenizer_for(cfg)
        self.train_set, self.eval_set, self.prompt_ids, self.max_prompt_tokens = build.prompts(
            cfg, self.tokenizer, self.run_dir, self.log
        )
        self.held_out = HeldOut(self.eval_set, self.prompt_ids, self.tokenizer, self.device, cfg.engine.task_seed)
        args = ModelArgs.from_model_config(cfg.model_arch)
        self.tokenizer.check_fits(args.padded_vocab_size, actor.model)
        # check_config made sure max_model_len leaves room after the longest prompt (<= max_prompt_length).
        self.max_tokens = min(sampling.max_tokens, cfg.generate_config.max_model_len - self.max_prompt_tokens)
        self.sampling = SamplingParams(
            sampling.temperature, sampling.top_p, sampling.top_k, sampling.min_p, self.max_tokens
        )

        self.state = ckpt.TrainerState(kl_coef=rl.init_kl_coef)
        models = build.Models(cfg, args, self.tokenizer, self.device, self.log)
        self.policy, self.reference, self.args = models.policy, models.reference, models.args
        self.peft, self.lora_settings, self.lora_base = models.peft, models.lora_settings, models.lora_base
        self.variants = variants.read(cfg)  # check_config refused what the engine cannot carry out
        set_dropout(self.policy, self.variants.hidden_dropout, self.variants.attention_dropout)
        if self.variants.dropout:  # masks come from torch's global generator: seeded as Megatron's _set_random_seed
            torch.manual_seed(self.seed)  # (a resumed run then loads its checkpointed state)
        self.optimizer = build.optimizer(self.policy, cfg)
        self.kl_ctrl = kl_controller(rl.kl_ctrl_type, rl.init_kl_coef, rl.kl_target, rl.kl_horizon)
        loaded = models.loaded
        if loaded is not None and loaded.state is not None and not actor.finetune:
            self._resume(loaded)
        train_prompts = self.variants.filter_train_prompts  # global_batch_size unless dynamic sampling is on
        self.steps_per_iter = rl.epochs * math.ceil(train_prompts / rl.mini_batch_size)
        # With dropout, fully on-policy, MindSpeed-RL's old log-probs are the update's own (dropout) forward
        # (skip_actor_log_prob), not the dropout-free sampler's: the recompute path gives exactly that.
        self.recompute_old_logprobs = cfg.engine.recompute_old_logprobs or (
            self.variants.dropout and fully_on_policy(cfg)
        )
        self.total_steps = self.steps_per_iter * cfg.megatron_training.train_iters
        self.drawer = Drawer(
            cfg,
            self.variants,
            self.train_set,
            self.prompt_ids,
            self.policy,
            self.tokenizer,
            self.sampling,
            self.generator,
            self.device,
            self.total_steps,
        )
        self.log.info(
            f"policy: {self.policy.num_parameters():,} parameters on {self.device}; "
            f"{len(self.train_set)} training prompts; {self.steps_per_iter} optimizer steps per iteration"
        )
        self.switches = set(schedule_mod.starts(cfg)) - {self.state.iteration}  # later switches
        self._apply_schedule()  # the values of the iteration it starts at (fresh or resumed)

    def _apply_schedule(self) -> None:
        """``cfg`` with the schedule's values for the next iteration, and whatever holds one refreshed. Also the
        resume rule: a fixed KL controller's coefficient and the optimizer's weight decay are the config's, not
        the checkpoint's (the same in a plain resume; a branch that changes them applies them)."""
        it = self.state.iteration
        if self.config.schedule:
            self.cfg = schedule_mod.apply(self.config, it)
            values = ", ".join(f"{k}={v}" for k, v in schedule_mod.values_at(self.config, it).items())
            self.log.info(f"schedule: from iteration {it}: {values}")
        rl, sampling = self.cfg.rl_config, self.cfg.generate_config.sampling_config
        self.temperature = sampling.temperature
        self.sampling = SamplingParams(
            sampling.temperature, sampling.top_p, sampling.top_k, sampling.min_p, self.max_tokens
        )
        self.drawer.cfg, self.drawer.sampling = self.cfg, self.sampling
        if isinstance(self.kl_ctrl, FixedKLController):  # adaptive: the checkpoint's (or initial) coefficient
            self.kl_ctrl.value = float(rl.init_kl_coef)
        self.use_reference = self.kl_ctrl.value > 0 or not isinstance(self.kl_ctrl, FixedKLController)
        build.set_weight_decay(self.optimizer, self.cfg.actor_config.weight_decay)

    def _resume(self, loaded: ckpt.Loaded) -> None:
        actor = self.cfg.actor_config
        assert loaded.state is not None  # resumed only from an engine checkpoint (the caller checks)
        self.state = loaded.state
        self.kl_ctrl.value = loaded.state.kl_coef  # fixed control: the config's, set by _apply_schedule
        if not actor.no_load_optim:
            ckpt.load_optimizer(self.optimizer, loaded)
        if not actor.no_load_rng:
            ckpt.load_rng(self.generator, loaded)
        else:  # still reproducible, but a different stream than the uninterrupted run
            self.generator.manual_seed(self.seed * 1_000_003 + self.state.iteration)
        self.log.info(f"resumed from {loaded.folder} at iteration {self.state.iteration}")

    # ------------------------------------------------------------------ one iteration
    def _forward_logprobs(
        self, model: Qwen2, batch: Rollout, rows: torch.Tensor, micro: int, out: torch.Tensor
    ) -> torch.Tensor:
        """Log-probs of ``rows`` under ``model`` without autograd, written into ``out`` (N, R)."""
        return update_mod.forward_logprobs(model, batch, rows, micro, out, self.temperature, self.tokenizer.vocab_size)

    def _update(self, batch: Rollout, advantages: torch.Tensor, ref_logp: torch.Tensor | None) -> dict:
        """The clipped mini-batch updates of one rollout batch (``update.py``)."""
        return update_mod.update(
            self.cfg,
            self.policy,
            self.optimizer,
            self.generator,
            self.state,
            batch,
            advantages,
            ref_logp,
            kl_coef=self.kl_ctrl.value,
            temperature=self.temperature,
            vocab_size=self.tokenizer.vocab_size,
            max_tokens=self.max_tokens,
            total_steps=self.total_steps,
            recompute_old_logprobs=self.recompute_old_logprobs,
        )

    def iteration(self) -> dict[str, float]:
        if self.state.iteration in self.switches:
            self._apply_schedule()
        rl, v = self.cfg.rl_config, self.variants
        t_start = time.perf_counter()
        n = rl.n_samples_per_prompt
        timing = {"timing/rollout": 0.0, "timing/reward": 0.0}
        drawn: dict[str, float] = {}
        all_tokens: float | None = None  # prompt + response tokens of every generation batch (dynamic sampling)
        if v.filter_groups:
            scored, drawn, all_tokens = self.drawer.dynamic_sampling(self.state, timing)
        else:
            scored = self.drawer.draw(self.state, timing)
        batch, texts, score_t, correct = scored.batch, scored.texts, scored.scores, scored.correct
        grouped = score_t.view(-1, n)
        flat_groups = float((grouped.max(dim=1).values == grouped.min(dim=1).values).float().mean())
        t_reward = time.perf_counter()

        ref_logp = None
        if self.use_reference:
            ref_logp = self._forward_logprobs(
                self.reference,
                batch,
                torch.arange(len(texts), device=self.device),
                self.cfg.forward_micro_batch_size("ref"),
                torch.zeros_like(batch.logprobs),
            )
        t_ref = time.perf_counter()
        kl_coef = self.kl_ctrl.value
        reward_t, extra = score_t, {}
        if v.kl_in_reward and ref_logp is not None:  # apply_kl_penalty: old = the sampler's log-probs
            _, reward_t, current_kl = dapo.kl_in_reward(
                score_t, batch.logprobs, ref_logp, batch.response_mask, batch.response_lengths, rl.kl_penalty, kl_coef
            )
            self.kl_ctrl.update(current_kl, n_steps=len(texts))
            extra = {"actor/reward_kl_penalty": current_kl, "actor/reward_kl_penalty_coeff": kl_coef}
            ref_logp = None  # the KL is in the reward, not in the loss (MindSpeed-RL's PPO actor loss has none)
        advantages = ADVANTAGE_ESTIMATORS.get(self.cfg.engine.advantage_estimator)(reward_t, n)
        update = self._update(batch, advantages, ref_logp)
        t_end = time.perf_counter()

        if "actor/kl_loss" in update:
            self.kl_ctrl.update(update["actor/kl_loss"], n_steps=len(texts))
        self.state.iteration += 1
        self.state.kl_coef = self.kl_ctrl.value

        resp = batch.response_lengths.float()
        prompt = batch.prompt_lengths.float()
        metrics = {
            "grpo/score/mean": float(score_t.mean()),
            "grpo/score/max": float(score_t.max()),
            "grpo/score/min": float(score_t.min()),
            **rewards.reward_means(scored.per_verifier),  # a user function's None (NaN) is left out of its mean
            "grpo/acc/mean": sum(correct) / len(correct),
            **update,
            "actor/kl_coef": kl_coef,
            **extra,
            "response_length/mean": float(resp.mean()),
            "response_length/max": float(resp.max()),
            "response_length/min": float(resp.min()),
            "response_length/truncated": truncated_fraction(batch, self.tokenizer.stop_ids),
            "grpo/zero_variance_groups": flat_groups,  # groups whose advantages are all 0: no gradient
            "prompt_length/mean": float(prompt.mean()),
            "prompt_length/max": float(prompt.max()),
            "prompt_length/min": float(prompt.min()),
            "timing/all": t_end - t_start,
            **timing,
            "timing/ref": t_ref - t_reward,
            "timing/update": t_end - t_ref,
            "generated_tokens": float(resp.sum()),
        }
        if v.overlong:
            lengths = batch.response_lengths
            penalty = dapo.overlong_penalty(lengths, v.rollout_max_tokens, v.overlong_buffer, v.overlong_factor)
            metrics["overlong_penalty/mean"] = float(penalty.mean())
        metrics.update(drawn)  # with dynamic sampling: every generated response's verifier means and tokens
        tokens = float(resp.sum() + prompt.sum())
        generated = tokens if all_tokens is None else all_tokens  # the rollout's cost counts dropped groups too
        metrics["e2e_tps"] = generated / metrics["timing/all"]
        metrics["rollout_tps"] = generated / max(metrics["timing/rollout"], 1e-9)
        metrics["update_tps"] = tokens / max(metrics["timing/update"], 1e-9)
        return metrics

    def evaluate(self, iteration: int, samples: int = 4) -> dict[str, float]:
        """Held-out accuracy of the policy as it is now (``grpo.engine.evaluate.held_out``)."""
        rl = self.cfg.rl_config
        scoring = ([str(v) for v in rl.verifier_function], list(rl.verifier_weight))
        return self.held_out.evaluate(
            self.policy, self.sampling, iteration, samples, scoring, self.run_dir / SAMPLES_FILE
        )

    def save(self) -> Path | None:
        actor = self.cfg.actor_config
        if not actor.save:
            return None
        write = None
        if self.peft is not None:  # the adapters (and, unless lora_ckpt_filter, the merged and base weights)
            assert self.lora_settings is not None
            write = functools.partial(
                lora_mod.save_lora,
                peft_model=self.peft,
                policy=self.policy,
                lora=self.lora_settings,
                base=self.lora_base,
                eos_token_id=self.tokenizer.eos_id,
                pad_token_id=self.tokenizer.pad_id,
            )
        folder = ckpt.save_checkpoint(
            Path(actor.save).expanduser(),
            self.state,
            self.policy,
            None if self.peft is not None else self.reference,
            self.tokenizer,
            self.optimizer,
            self.generator,
            save_optim=not actor.no_save_optim,
            save_rng=not actor.no_save_rng,
            keep=self.cfg.engine.keep_checkpoints,
            write_weights=write,
        )
        self.log.info(f"saved checkpoint {folder}")
        return folder


def train(cfg: GRPOConfig, run_dir: Path, callback: Callback | None = None) -> dict[str, Any]:
    """Run GRPO as ``cfg`` says; write ``run_dir/metrics.jsonl`` and ``run_dir/train.log``; return a summary.

    ``callback(iteration, metrics)`` runs after each metrics line; returning True stops at once
    (``summary["stopped_early"]``). ``engine.exit_interval`` stops normally after an iteration divisible by
    it, evaluated and checkpointed (``summary["exited_at"]``). Resumes when ``actor_config.load`` holds a
    checkpoint and ``finetune`` is false. Raises UserError for user mistakes (before anything is trained) and
    TrainingDiverged on NaN/inf.
    """
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    with torch_threads(cfg.engine.num_threads):
        run = Run(cfg, run_dir)
        try:
            return _loop(run, callback, t0)
        except Exception as err:
            run.log.error(f"{type(err).__name__}: {err}")
            raise
        finally:
            close_logger(run.log)


def _loop(run: Run, callback: Callback | None, t0: float) -> dict:
    cfg = run.config
    mt = cfg.megatron_training
    every, exit_every = cfg.engine.eval_every, cfg.engine.exit_interval
    summary: dict = {
        "run_dir": str(run.run_dir),
        "stopped_early": False,
        "exited_at": None,  # engine.exit_interval: the iteration it stopped at, checkpointed
        "start_iteration": run.state.iteration,
        "checkpoint": None,
        "metrics": {},
    }
    truncate_jsonl_after(run.run_dir / SAMPLES_FILE, run.state.iteration)  # a resumed run redoes the rest
    sink = MetricsSink(run.run_dir, cfg, mt.train_iters, resume_from=run.state.iteration, log=run.log)
    state = "failed"  # until the loop ends normally
    try:
        if every and run.state.iteration == 0:  # the base policy, as iteration 0 of the held-out curves
            base = run.evaluate(0)
            if base:
                summary["eval/acc_base"] = base["eval/acc"]
                summary["eval/acc_greedy_base"] = base["eval/acc_greedy"]
                sink.write(0, base)
                if callback is not None and callback(0, base):
                    summary["stopped_early"] = True
        while not summary["stopped_early"] and run.state.iteration < mt.train_iters:
            metrics = run.iteration()
            it = run.state.iteration
            exiting = exit_every is not None and it % exit_every == 0 and it < mt.train_iters
            if every and (it % every == 0 or it == mt.train_iters or exiting):
                metrics.update(run.evaluate(it))
            sink.write(it, metrics)
            summary["metrics"] = metrics
            if callback is not None and callback(it, metrics):
                summary["stopped_early"] = True
                break
            if it % mt.save_interval == 0 or it == mt.train_iters or exiting:
                folder = run.save()
                summary["checkpoint"] = str(folder) if folder else None
            if exiting:
                summary["exited_at"] = it
                run.log.info(f"exit at iteration {it} (engine.exit_interval {exit_every})")
                break
        state = "stopped" if summary["stopped_early"] else "finished"
    finally:
        sink.close(state)
    summary["iterations"] = run.state.iteration
    summary["wall_s"] = time.perf_counter() - t0
    if "eval/acc" in summary["metrics"]:
        summary["eval/acc_final"] = summary["metrics"]["eval/acc"]
        summary["eval/acc_greedy_final"] = summary["metrics"]["eval/acc_greedy"]
    return summary
