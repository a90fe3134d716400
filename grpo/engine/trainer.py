"""The GRPO loop: rollout, rule rewards, group-normalised advantages, clipped mini-batch updates.

One iteration (MindSpeed-RL's ``grpo_trainer_hybrid``):

1. take ``global_batch_size`` prompts from the seeded data order;
2. sample ``n_samples_per_prompt`` responses each (``rollout.generate``, KV cache, no autograd);
3. score them with the verifiers (plus the overlong penalty, ``overlong_buffer_enable``); with dynamic
   sampling (``filter_groups_enable``) repeat 1-3 until enough groups vary (``Run._dynamic_sampling``,
   ``dapo.py``);
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
   ``save_interval`` and at the end.

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
import copy
import functools
import json
import math
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, cast

import torch

from grpo._fs import truncate_jsonl_after
from grpo.config import GRPOConfig
from grpo.engine import checkpoint as ckpt
from grpo.engine import dapo, rewards, variants
from grpo.engine import data as data_mod
from grpo.engine import lora as lora_mod
from grpo.engine.check import check_config
from grpo.engine.hf_checkpoint import check_arch, load_weights, read_model_args
from grpo.engine.loss import (
    ADVANTAGE_ESTIMATORS,
    STATS,
    TrainingDiverged,
    clip_range,
    grpo_loss,
    kl_controller,
    loss_agg_mode,
    micro_batch_weight,
)
from grpo.engine.metrics import MetricsSink, close_logger, run_logger
from grpo.engine.model import ModelArgs, Qwen2, set_dropout
from grpo.engine.rollout import Rollout, SamplingParams, generate, response_logprobs
from grpo.engine.tokenizer import Tokenizer, build_task_tokenizer, load_tokenizer
from grpo.engine.warm_start import default_cache_dir, warm_started_policy
from grpo.errors import UserError

Callback = Callable[[int, dict], "bool | None"]
SAMPLES_FILE = "samples.jsonl"  # a few held-out prompts and responses per evaluation, for people to read
SAMPLE_PROMPTS = 4


def truncated_fraction(batch: Rollout, stop_ids: list[int]) -> float:
    """Share of responses that ended at max_tokens without a stop token (cut off, not finished)."""
    rows = torch.arange(batch.input_ids.shape[0], device=batch.input_ids.device)
    last = batch.responses[rows, (batch.response_lengths - 1).clamp(min=0)]
    stops = torch.tensor(stop_ids, device=last.device)
    return float((~torch.isin(last, stops)).float().mean())


def pick_device(name: str) -> torch.device:
    """``auto``: cuda when available, else npu when torch_npu imports, else cpu."""
    if name in ("cuda", "auto") and torch.cuda.is_available():
        return torch.device("cuda")
    if name in ("npu", "auto"):
        try:
            import torch_npu  # noqa: F401  (registers the npu device)

            if torch.npu.is_available():  # type: ignore[attr-defined]  # torch_npu adds torch.npu
                return torch.device("npu")
        except ImportError:
            pass
    if name in ("cuda", "npu"):
        raise UserError(f"engine.device: {name} was asked for but is not available here")
    return torch.device("cpu")


@contextlib.contextmanager
def torch_threads(n: int) -> Iterator[None]:
    previous = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def lr_at(step: int, total_steps: int, lr: float, min_lr: float, warmup_fraction: float, style: str) -> float:
    """Learning rate of optimizer step ``step`` (0-based) of ``total_steps`` (see the module docstring)."""
    warmup = round(warmup_fraction * total_steps)
    if step < warmup:
        return lr * (step + 1) / warmup
    if style == "constant":
        return lr
    span = max(1, total_steps - 1 - warmup)
    progress = min(1.0, (step - warmup) / span)
    coeff = 1.0 - progress if style == "linear" else 0.5 * (1.0 + math.cos(math.pi * progress))
    return min_lr + coeff * (lr - min_lr)


def _same_path(a: str | None, b: str | None) -> bool:
    return a is not None and b is not None and Path(a).expanduser().resolve() == Path(b).expanduser().resolve()


class Run:
    """Everything one training run holds; built (and fully checked) before the first iteration."""

    def __init__(self, cfg: GRPOConfig, run_dir: Path):
        problems = check_config(cfg)
        if problems:
            raise UserError(problems[0], problems)
        self.cfg, self.run_dir = cfg, Path(run_dir)
        self.source = cfg._source
        self.log = run_logger(self.run_dir)
        rl, actor = cfg.rl_config, cfg.actor_config
        self.device = pick_device(cfg.engine.device)
        self.seed = cfg.megatron_training.seed
        sampling = cfg.generate_config.sampling_config
        self.temperature = sampling.temperature
        self.generator = torch.Generator(device=self.device)
        self.generator.manual_seed(sampling.seed if sampling.seed is not None else self.seed)

        self.tokenizer = self._tokenizer()
        self.train_set, self.eval_set = self._data()
        self.args = self._model_args()
        self.tokenizer.check_fits(self.args.padded_vocab_size, actor.model)
        # check_config made sure max_model_len leaves room after the longest prompt (<= max_prompt_length).
        self.max_tokens = min(sampling.max_tokens, cfg.generate_config.max_model_len - self.max_prompt_tokens)
        self.sampling = SamplingParams(
            sampling.temperature, sampling.top_p, sampling.top_k, sampling.min_p, self.max_tokens
        )

        self.state = ckpt.TrainerState(kl_coef=rl.init_kl_coef)
        self.policy, self.reference, loaded = self._models()
        self.variants = variants.read(cfg)  # check_config refused what the engine cannot carry out
        set_dropout(self.policy, self.variants.hidden_dropout, self.variants.attention_dropout)
        if self.variants.dropout:  # masks come from torch's global generator: seeded as Megatron's _set_random_seed
            torch.manual_seed(self.seed)  # (a resumed run then loads its checkpointed state)
        self.optimizer = self._optimizer()
        self.kl_ctrl = kl_controller(rl.kl_ctrl_type, rl.init_kl_coef, rl.kl_target, rl.kl_horizon)
        if loaded is not None and loaded.state is not None and not actor.finetune:
            self._resume(loaded)
        self.use_reference = rl.init_kl_coef > 0 or rl.kl_ctrl_type == "adaptive"
        n = rl.n_samples_per_prompt
        train_prompts = self.variants.filter_train_prompts  # global_batch_size unless dynamic sampling is on
        self.steps_per_iter = rl.epochs * math.ceil(train_prompts / rl.mini_batch_size)
        # With dropout, fully on-policy, MindSpeed-RL's old log-probs are the update's own (dropout) forward
        # (skip_actor_log_prob), not the dropout-free sampler's: the recompute path gives exactly that.
        self.recompute_old_logprobs = cfg.engine.recompute_old_logprobs or (
            self.variants.dropout and variants.fully_on_policy(cfg, train_prompts)
        )
        self.total_steps = self.steps_per_iter * cfg.megatron_training.train_iters
        self.mini_batch_responses = rl.mini_batch_size * n
        self.log.info(
            f"policy: {self.policy.num_parameters():,} parameters on {self.device}; "
            f"{len(self.train_set)} training prompts; {self.steps_per_iter} optimizer steps per iteration"
        )

    # ------------------------------------------------------------------ setup
    def _tokenizer(self) -> Tokenizer:
        mt, actor = self.cfg.megatron_training, self.cfg.actor_config
        if mt.tokenizer_name_or_path:
            return load_tokenizer(mt.tokenizer_name_or_path)
        if actor.load and (Path(actor.load).expanduser() / "tokenizer.json").is_file():
            return load_tokenizer(actor.load, key="actor_config.load")
        return build_task_tokenizer()

    def _data(self) -> tuple[list[data_mod.Example], list[data_mod.Example]]:
        mt, eng = self.cfg.megatron_training, self.cfg.engine
        if eng.task == "dataset":
            examples = data_mod.read_dataset(mt.data_path)
            train, held_out = data_mod.split_by_percent(examples, mt.split)
        else:
            task = data_mod.get_task(eng.task)
            train, held_out = task.split(eng.task_size, eng.eval_size if eng.eval_every else 0, eng.task_seed)
            path = data_mod.generated_data_file(mt.data_path, self.run_dir)
            data_mod.write_jsonl(train, path)
            self.log.info(f"task {eng.task}: {len(train)} prompts written to {path}")
        limit = self.cfg.rl_config.max_prompt_length
        self.prompt_ids = {
            e.prompt: self.tokenizer.encode(self.tokenizer.chat_prompt(e.prompt)) for e in train + held_out
        }
        kept = [e for e in train if len(self.prompt_ids[e.prompt]) <= limit]
        if len(kept) < len(train):
            self.log.warning(
                f"{len(train) - len(kept)} prompts longer than rl_config.max_prompt_length={limit} dropped"
            )
        if not kept:
            raise UserError(f"{mt.data_path}: rl_config.max_prompt_length: every prompt is longer than {limit} tokens")
        held_out = [e for e in held_out if len(self.prompt_ids[e.prompt]) <= limit]
        self.max_prompt_tokens = max(len(self.prompt_ids[e.prompt]) for e in kept + held_out)
        return kept, held_out

    def _model_args(self) -> ModelArgs:
        return ModelArgs.from_model_config(self.cfg.model_arch)

    def _models(self) -> tuple[Qwen2, Qwen2, ckpt.Loaded | None]:
        """Policy, frozen reference, and what ``actor_config.load`` designated (None = fresh start).

        With LoRA (``lora.py``) the policy carries peft adapters (``self.peft``) and the reference is the same
        model with its adapters off (``lora.BaseView``), not a copy. A resumed LoRA run rebuilds its base and
        loads its adapters; ``finetune`` starts from a LoRA checkpoint's merged weights."""
        actor = self.cfg.actor_config
        self.lora_settings = lora_mod.settings(self.cfg)
        self.peft: Any = None
        loaded = None
        if actor.load and not (_same_path(actor.load, actor.save) and not ckpt.has_checkpoint(Path(actor.load))):
            loaded = ckpt.describe_load(Path(actor.load))
        resume = loaded is not None and loaded.state is not None and not actor.finetune
        if loaded is not None and resume:
            self._check_resumable(loaded)
        if loaded is not None and resume and loaded.lora is not None:
            policy = self._lora_base(loaded)
            base_load = loaded.lora.get("base_load")
        else:
            policy = self._starting_policy(loaded)
            base_load = str(loaded.folder.resolve()) if loaded is not None else None
        if self.lora_settings is None:
            policy.to(self.device)
            reference = copy.deepcopy(policy)
            if loaded is not None and loaded.has_reference and not actor.finetune:
                ckpt.load_reference(reference, loaded)
            reference.requires_grad_(False).eval()
            return policy, reference, loaded
        lora = self.lora_settings
        self.lora_base = {"base_load": base_load, "fingerprint": lora_mod.fingerprint(policy)}
        self.peft = lora_mod.attach(policy, lora, self.seed)
        if loaded is not None and resume:
            lora_mod.load_adapter(self.peft, loaded.folder)
        policy.to(self.device)
        trainable = sum(p.numel() for p in policy.parameters() if p.requires_grad)
        self.log.info(
            f"LoRA (peft): r={lora.r}, alpha={lora.alpha:g} on {', '.join(lora.modules)}; {trainable:,} trainable "
            f"parameters; the reference is the base with the adapters off"
        )
        # Duck-typed: the reference is only read through hidden() and lm_head (rollout.response_logprobs).
        return policy, cast(Qwen2, lora_mod.BaseView(policy, self.peft)), loaded

    def _check_resumable(self, loaded: ckpt.Loaded) -> None:
        """A resume continues the same kind of training: LoRA with the same adapter, or full fine-tuning."""
        lora, where = self.lora_settings, f"{loaded.folder}: actor_config.load"
        if loaded.lora is not None and lora is None:
            raise UserError(
                f"{where}: a LoRA checkpoint cannot resume as full fine-tuning; set its lora_target_modules "
                f"{loaded.lora.get('lora_target_modules')}, or actor_config.finetune=true to start from its merged "
                f"weights"
            )
        if loaded.lora is None and lora is not None:
            raise UserError(
                f"{where}: a full fine-tuning checkpoint cannot resume as LoRA; set actor_config.finetune=true to "
                f"start LoRA from its weights"
            )
        differs = lora.same_adapter(loaded.lora) if lora is not None and loaded.lora is not None else None
        if differs:
            raise UserError(f"{where}: {differs}; resume with the same LoRA keys, or set actor_config.finetune=true")

    def _starting_policy(self, loaded: ckpt.Loaded | None) -> Qwen2:
        """The weights a run starts from: the warm start (or a seeded random init), a HF folder, an engine
        checkpoint's policy, or a LoRA checkpoint's base with its adapters merged."""
        actor, eng = self.cfg.actor_config, self.cfg.engine
        init_std = self.cfg.megatron_training.init_method_std
        if loaded is None:  # fresh: the (cached) warm-started tiny policy
            if eng.task == "dataset":
                with torch.random.fork_rng():
                    torch.manual_seed(self.seed)
                    policy = Qwen2(self.args, init_std=init_std)
                self.log.warning("actor_config.load is null and engine.task=dataset: starting from random weights")
                return policy
            task = data_mod.get_task(eng.task)
            policy, _ = warm_started_policy(
                self.args,
                self.tokenizer,
                task,
                eng.task_seed,  # the base policy does not change with the run's seed, as a pretrained model
                eng.warm_start_steps,
                init_std,
                default_cache_dir(eng.cache_dir),
                log=self.log.info,
            )
            return policy
        if loaded.lora is not None and not (loaded.folder / "model.safetensors").is_file():
            policy = lora_mod.merge_adapter(self._lora_base(loaded), loaded.folder)  # lora_ckpt_filter: no merged copy
            self.log.info(f"loaded the base and merged the adapters of {loaded.folder}")
            return policy
        found = read_model_args(loaded.folder)
        check_arch(found, self.args, str(loaded.folder), actor.model)
        self.args = found  # rope base, eps, bias and tying come from the checkpoint itself
        policy = Qwen2(self.args)
        load_weights(policy, loaded.folder)
        self.log.info(f"loaded weights from {loaded.folder}")
        return policy

    def _lora_base(self, loaded: ckpt.Loaded) -> Qwen2:
        """The base weights a LoRA checkpoint's adapters were trained on: its ``reference.safetensors``, else
        rebuilt as that run's start was (``base_load`` in ``lora.json``) and checked against its fingerprint."""
        assert loaded.lora is not None
        if loaded.has_reference:
            found = read_model_args(loaded.folder)
            check_arch(found, self.args, str(loaded.folder), self.cfg.actor_config.model)
            self.args = found
            policy = Qwen2(self.args)
            load_weights(policy, loaded.folder, "reference.safetensors")
            return policy
        base_load = loaded.lora.get("base_load")
        policy = self._starting_policy(ckpt.describe_load(Path(base_load)) if base_load else None)
        if lora_mod.fingerprint(policy) != loaded.lora.get("fingerprint"):
            raise UserError(
                f"{loaded.folder / lora_mod.LORA_FILE}: actor_config.load: the base weights rebuilt from "
                f"{base_load or 'the warm start'} differ from those its adapters were trained on"
            )
        return policy

    def _optimizer(self) -> torch.optim.Optimizer:
        actor = self.cfg.actor_config
        params = [p for p in self.policy.parameters() if p.requires_grad]  # LoRA: the adapters only
        decay = [p for p in params if p.dim() >= 2]
        no_decay = [p for p in params if p.dim() < 2]
        return torch.optim.AdamW(
            [{"params": decay, "weight_decay": actor.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
            lr=actor.lr,
            betas=(actor.adam_beta1, actor.adam_beta2),
            eps=1e-8,
        )

    def _resume(self, loaded: ckpt.Loaded) -> None:
        actor = self.cfg.actor_config
        assert loaded.state is not None  # resumed only from an engine checkpoint (the caller checks)
        self.state = loaded.state
        self.kl_ctrl.value = loaded.state.kl_coef
        if not actor.no_load_optim:
            ckpt.load_optimizer(self.optimizer, loaded)
        if not actor.no_load_rng:
            ckpt.load_rng(self.generator, loaded)
        else:  # still reproducible, but a different stream than the uninterrupted run
            self.generator.manual_seed(self.seed * 1_000_003 + self.state.iteration)
        self.log.info(f"resumed from {loaded.folder} at iteration {self.state.iteration}")

    # ------------------------------------------------------------------ one iteration
    @staticmethod
    def _micro_batches(
        batch: Rollout, rows: torch.Tensor, micro: int, by_length: bool = True
    ) -> Iterator[tuple[torch.Tensor, Rollout]]:
        """Split ``rows`` into micro batches, each trimmed of the padding its rows share.

        ``by_length``: rows are ordered by prompt (so a micro batch holds whole groups, whose shared prompt
        is computed once), groups by their longest response (so groups of similar length share a micro batch
        and little padding), rows by length within a group. That only regroups the rows of one mini batch,
        which is free where the loss is a sum over responses (no-grad passes, ``seq-mean-token-mean``).
        Otherwise micro batches are consecutive ``rows``, as MindSpeed-RL splits a mini batch: a
        ``token-mean`` loss depends on which rows share a micro batch.
        """
        if not by_length:
            for m in rows.split(micro):
                yield m, batch.select(m).trimmed()
            return
        assert batch.groups is not None  # generate() always sets it
        groups, lengths = batch.groups[rows], batch.response_lengths[rows]
        longest = torch.zeros(int(batch.groups.max()) + 1, dtype=lengths.dtype, device=lengths.device)
        longest = longest.scatter_reduce(0, groups, lengths, reduce="amax")[groups]
        width = batch.input_ids.shape[1] + 1
        key = (longest * (int(groups.max()) + 1) + groups) * width + lengths
        order = rows[torch.argsort(key, stable=True)]
        for m in order.split(micro):
            yield m, batch.select(m).trimmed()

    def _forward_logprobs(
        self, model: Qwen2, batch: Rollout, rows: torch.Tensor, micro: int, out: torch.Tensor
    ) -> torch.Tensor:
        """Log-probs of ``rows`` under ``model`` without autograd, written into ``out`` (N, R)."""
        with torch.no_grad():
            for m, sub in self._micro_batches(batch, rows, micro):
                logp, _ = response_logprobs(model, sub, self.temperature, self.tokenizer.vocab_size)
                out[m, : logp.shape[1]] = logp
        return out

    def _update(self, batch: Rollout, advantages: torch.Tensor, ref_logp: torch.Tensor | None) -> dict:
        rl, actor, eng = self.cfg.rl_config, self.cfg.actor_config, self.cfg.engine
        N = batch.input_ids.shape[0]
        mb, micro = self.mini_batch_responses, actor.micro_batch_size
        orders = [
            torch.randperm(N, generator=self.generator, device=self.device)
            if rl.shuffle_mini_batch
            else torch.arange(N, device=self.device)
            for _ in range(rl.epochs)
        ]
        if self.recompute_old_logprobs:
            old = torch.zeros_like(batch.logprobs)
            rest = orders[0][mb:]
            if len(rest):  # mini batches after the first see an updated policy: their old log-probs come first
                self._forward_logprobs(self.policy, batch, rest, self.cfg.forward_micro_batch_size("actor"), old)
        else:  # the sampler's own log-probs: the same policy and temperature, no extra forward pass
            old = batch.logprobs
        params = [p for p in self.policy.parameters() if p.requires_grad]
        # read per call: tests change cfg.engine between two updates of one Run
        agg = loss_agg_mode(eng.loss_agg_mode, getattr(rl, "token_level_loss", None))
        low, high = clip_range(
            rl.clip_ratio,
            getattr(rl, "clip_higher_enable", None),  # long-tail keys: typed by the manifest
            getattr(rl, "clip_ratio_low", None),
            getattr(rl, "clip_ratio_high", None),
        )
        sums: dict[str, float] = defaultdict(float)  # MindSpeed-RL's stats, summed over all micro batches
        count = 0
        norms, lr = [], 0.0
        self.policy.train()
        for epoch, order in enumerate(orders):
            for k, idx in enumerate(order.split(mb)):
                self.optimizer.zero_grad(set_to_none=True)
                n_micro = math.ceil(len(idx) / micro)
                for m, sub in self._micro_batches(batch, idx, micro, by_length=agg != "token-mean"):
                    logp, entropy = response_logprobs(
                        self.policy,
                        sub,
                        self.temperature,
                        self.tokenizer.vocab_size,
                        with_entropy=True,
                        entropy_grad=rl.entropy_coeff > 0,
                    )
                    width = logp.shape[1]
                    if self.recompute_old_logprobs and epoch == 0 and k == 0:
                        old[m, :width] = logp.detach()
                    parts = grpo_loss(
                        logp,
                        old[m, :width],
                        advantages[m],
                        sub.response_mask,
                        low,
                        ref_logp[m, :width] if ref_logp is not None else None,
                        self.kl_ctrl.value,
                        rl.kl_penalty,
                        entropy,
                        rl.entropy_coeff,
                        agg,
                        clip_ratio_high=high,
                        policy_loss=eng.policy_loss,
                        norm=self.max_tokens,
                    )
                    if not torch.isfinite(parts.loss):
                        raise TrainingDiverged(f"iteration {self.state.iteration + 1}: loss is {parts.loss.item()}")
                    (parts.loss * micro_batch_weight(agg, len(m), len(idx), n_micro)).backward()
                    for name in STATS:
                        sums[name] += float(getattr(parts, name))
                    count += 1  # MindSpeed-RL logs the plain mean of its micro batches' stats
                norm = torch.nn.utils.clip_grad_norm_(params, actor.clip_grad if actor.clip_grad > 0 else math.inf)
                if not torch.isfinite(norm):
                    raise TrainingDiverged(f"iteration {self.state.iteration + 1}: gradient norm is {norm.item()}")
                norms.append(float(norm))
                lr = lr_at(
                    self.state.optimizer_steps,
                    self.total_steps,
                    actor.lr,
                    actor.min_lr,
                    actor.lr_warmup_fraction,
                    actor.lr_decay_style,
                )
                for group in self.optimizer.param_groups:
                    group["lr"] = lr
                self.optimizer.step()
                self.state.optimizer_steps += 1
        self.policy.eval()
        # The plain mean over every micro batch of every mini batch and epoch: MindSpeed-RL's update() appends
        # each micro batch's stats to one list per name, and metrics_post_processing averages those lists.
        out = {f"actor/{k}": v / count for k, v in sums.items()}
        if ref_logp is None:
            out.pop("actor/kl_loss")
        out["actor/grad_norm"] = sum(norms) / len(norms)
        out["actor/lr"] = lr
        return out

    def _draw(self, timing: dict[str, float]) -> dapo.Scored:
        """One generation batch: the next ``global_batch_size`` prompts of the data order, ``n`` responses each,
        scored (the rollout and reward stages; their seconds are added to ``timing``)."""
        cfg, rl, v = self.cfg, self.cfg.rl_config, self.variants
        t_start = time.perf_counter()
        gbs, n = cfg.megatron_training.global_batch_size, rl.n_samples_per_prompt
        idx = data_mod.batch_indices(
            len(self.train_set),
            gbs,
            self.state.consumed_prompts,
            self.seed,
            shuffle=not cfg.megatron_training.no_shuffle,
        )
        self.state.consumed_prompts += gbs
        examples = [self.train_set[i] for i in idx]
        batch = generate(
            self.policy,
            [self.prompt_ids[e.prompt] for e in examples],
            n,
            self.sampling,
            self.tokenizer.stop_ids,
            self.tokenizer.pad_id,
            self.tokenizer.vocab_size,
            self.generator,
        )
        t_rollout = time.perf_counter()

        texts = self.tokenizer.decode_batch(batch.response_lists())
        labels = [e.label for e in examples for _ in range(n)]
        scores, per_verifier = rewards.score(texts, labels, list(rl.verifier_function), list(rl.verifier_weight))
        if v.overlong:  # added to the total as MindSpeed-RL does, in float64 before its float32 tensor
            penalty = dapo.overlong_penalty(
                batch.response_lengths, v.rollout_max_tokens, v.overlong_buffer, v.overlong_factor
            )
            score_t = (torch.tensor(scores, dtype=torch.float64, device=self.device) + penalty).float()
        else:
            score_t = torch.tensor(scores, dtype=torch.float32, device=self.device)
        correct = [rewards.is_correct(text, label) for text, label in zip(texts, labels, strict=True)]
        timing["timing/rollout"] += t_rollout - t_start
        timing["timing/reward"] += time.perf_counter() - t_rollout
        return dapo.Scored(batch, texts, labels, score_t, per_verifier, correct)

    def _dynamic_sampling(self, timing: dict[str, float]) -> tuple[dapo.Scored, dict[str, float], float]:
        """DAPO's dynamic sampling (see ``dapo.py``): generation batches until ``filter_groups_train_batch_size``
        groups with a varying ``filter_groups_metric`` are kept. Returns the kept groups, the metrics of every
        generated response (verifier means as MindSpeed-RL accumulates them, counts) and all tokens generated."""
        v, n = self.variants, self.cfg.rl_config.n_samples_per_prompt
        kept: list[dapo.Scored] = []
        have = found = batches = groups = 0
        verifier_sums: dict[str, float] = defaultdict(float)
        responses = prompts = 0.0
        while have < v.filter_train_prompts:
            if 0 < v.filter_max_batches <= batches:  # RayDAPOTrainer.dynamic_sampling raises here
                raise UserError(
                    f"{self.source}: rl_config.filter_groups_max_batches: {batches} generation batches kept {have} "
                    f"groups whose {v.filter_metric} scores vary, fewer than filter_groups_train_batch_size="
                    f"{v.filter_train_prompts} (MindSpeed-RL: 'Generated too many. Please check your data.'); raise "
                    f"filter_groups_max_batches (0 = no limit) or lower filter_groups_train_batch_size"
                )
            scored = self._draw(timing)
            batches += 1
            groups += len(scored.texts) // n
            responses += float(scored.batch.response_lengths.sum())
            prompts += float(scored.batch.prompt_lengths.sum())
            for name, values in scored.per_verifier.items():
                verifier_sums[name] += sum(values)
            informative = dapo.kept_groups(scored.per_verifier[v.filter_metric], n).nonzero().flatten()
            found += len(informative)
            take = informative[: v.filter_train_prompts - have]  # the surplus of the last batch is dropped
            if len(take):
                kept.append(scored.groups(take, n))
                have += len(take)
        metrics = {
            **{f"{name}_rewards/mean": total / (groups * n) for name, total in verifier_sums.items()},
            "train/num_gen_batches": float(batches),
            "dynamic_sampling/kept_groups": float(found),
            "dynamic_sampling/kept_fraction": found / groups,
            "generated_tokens": responses,
        }
        return dapo.concat(kept, self.tokenizer.pad_id), metrics, responses + prompts

    def iteration(self) -> dict[str, float]:
        rl, v = self.cfg.rl_config, self.variants
        t_start = time.perf_counter()
        n = rl.n_samples_per_prompt
        timing = {"timing/rollout": 0.0, "timing/reward": 0.0}
        drawn: dict[str, float] = {}
        all_tokens: float | None = None  # prompt + response tokens of every generation batch (dynamic sampling)
        if v.filter_groups:
            scored, drawn, all_tokens = self._dynamic_sampling(timing)
        else:
            scored = self._draw(timing)
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
            **{f"{name}_rewards/mean": sum(values) / len(values) for name, values in scored.per_verifier.items()},
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
        """Accuracy (fraction correct) on the held-out prompts: ``eval/acc`` samples ``samples`` responses
        each with the rollout's sampling parameters (the policy as trained), ``eval/acc_greedy`` decodes
        greedily; ``eval/prompts`` is how many prompts were scored. The first ``SAMPLE_PROMPTS`` prompts'
        responses (greedy and one sampled) are appended to ``samples.jsonl`` with their rewards.

        Evaluation draws from its own generator, seeded the same way every time, so it neither perturbs
        the training's random stream nor adds sampling noise between two evaluations.
        """
        if not self.eval_set:
            return {}
        rl = self.cfg.rl_config
        prompts = [self.prompt_ids[e.prompt] for e in self.eval_set]
        out: dict[str, float] = {"eval/prompts": float(len(prompts))}
        shown: list[dict[str, Any]] = []
        for name, kind, params, n in (
            ("eval/acc", "sampled", self.sampling, samples),
            ("eval/acc_greedy", "greedy", SamplingParams(max_tokens=self.max_tokens, greedy=True), 1),
        ):
            gen = torch.Generator(device=self.device)
            gen.manual_seed(self.cfg.engine.task_seed + 1)  # the same draws for every seed and trial
            batch = generate(
                self.policy,
                prompts,
                n,
                params,
                self.tokenizer.stop_ids,
                self.tokenizer.pad_id,
                self.tokenizer.vocab_size,
                gen,
            )
            texts = self.tokenizer.decode_batch(batch.response_lists())
            labels = [e.label for e in self.eval_set for _ in range(n)]
            correct = [rewards.is_correct(text, label) for text, label in zip(texts, labels, strict=True)]
            out[name] = sum(correct) / len(texts)
            if n > 1:
                out["eval/strict_format"] = sum(rewards.strict_format(t) > 0 for t in texts) / len(texts)
            rows = [k * n for k in range(min(SAMPLE_PROMPTS, len(self.eval_set)))]  # each prompt's first response
            verifiers, weights = list(rl.verifier_function), list(rl.verifier_weight)
            scores, _ = rewards.score([texts[r] for r in rows], [labels[r] for r in rows], verifiers, weights)
            for r, reward in zip(rows, scores, strict=True):
                example = self.eval_set[r // n]
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
        with open(self.run_dir / SAMPLES_FILE, "a") as fh:
            fh.writelines(json.dumps(row) + "\n" for row in shown)
        return out

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
    (``summary["stopped_early"]``). Resumes when ``actor_config.load`` holds a checkpoint and ``finetune`` is
    false. Raises UserError for user mistakes (before anything is trained) and TrainingDiverged on NaN/inf.
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
    cfg = run.cfg
    mt = cfg.megatron_training
    every = cfg.engine.eval_every
    summary: dict = {
        "run_dir": str(run.run_dir),
        "stopped_early": False,
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
            if every and (it % every == 0 or it == mt.train_iters):
                metrics.update(run.evaluate(it))
            sink.write(it, metrics)
            summary["metrics"] = metrics
            if callback is not None and callback(it, metrics):
                summary["stopped_early"] = True
                break
            if it % mt.save_interval == 0 or it == mt.train_iters:
                folder = run.save()
                summary["checkpoint"] = str(folder) if folder else None
        state = "stopped" if summary["stopped_early"] else "finished"
    finally:
        sink.close(state)
    summary["iterations"] = run.state.iteration
    summary["wall_s"] = time.perf_counter() - t0
    if "eval/acc" in summary["metrics"]:
        summary["eval/acc_final"] = summary["metrics"]["eval/acc"]
        summary["eval/acc_greedy_final"] = summary["metrics"]["eval/acc_greedy"]
    return summary
