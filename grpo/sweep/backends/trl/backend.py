"""The trl backend: each trial is one real TRL ``GRPOTrainer`` run in the trial's Ray worker.

The trial's config is rendered into ``trl.GRPOConfig`` (``render``: keys.py's one-to-one keys plus the batch,
optimizer and checkpoint keys), the model is the same warm-started Qwen2 the embedded engine starts from (saved
as a HF folder, ``model.py``), the rewards are the project's verifiers, and ``SweepCallback`` streams each
iteration's metrics under the project's names, evaluates on the engine's held-out prompts and stops when the
driver says so.

Batch units: MindSpeed-RL's ``global_batch_size`` and ``mini_batch_size`` count prompts (each sampled
``n_samples_per_prompt`` times); TRL's ``per_device_train_batch_size`` counts completions. One iteration (one
generation of ``global_batch_size * n`` completions) is ``global_batch_size / mini_batch_size * epochs``
optimizer steps, as on MindSpeed-RL: ``steps_per_generation = global_batch_size * n / (micro * P)``,
``gradient_accumulation_steps = mini_batch_size * n / (micro * P)``, ``num_iterations = epochs``, on P training
processes (``trl.num_processes``; TRL 1.16 multiplies both by its world size), so the batch sizes mean the same
prompts on any number of processes.

What TRL resolves from this is read back by tests/test_trl_resolved.py (``build_trainer``: the constructed
``GRPOTrainer``), and tests/test_trl_probe.py moves every applied key in a real run (coverage.py's ``PROBES``).

Checkpoints: TRL's ``checkpoint-<optimizer step>`` folders in ``actor_config.save``, with the driver's
``latest_checkpointed_iteration.txt`` beside them. A retry or a pbt branch (``actor_config.load`` naming such a
folder, ``finetune`` false) resumes through ``resume_from_checkpoint``; the reference model is always the
starting weights. What a branch keeps: model, optimizer moments, rng and TRL's step; the learning rate is the
branch's own (the callback puts it back after TRL restores the parent's scheduler). See ``branch_problems``.

    TrlBackend().run(cfg, Path("studies/s/trials/0/runs/seed0"), report=lambda i, m: False, resume=False)
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grpo._fs import checkpoint_iteration, tail_lines, truncate_jsonl_after
from grpo.config import GRPOConfig, schedule
from grpo.engine import lora
from grpo.errors import UserError
from grpo.sweep.backends._base import RayOptions, ReportFn, TrialBackend, TrialFailed
from grpo.sweep.backends.trl import coverage
from grpo.sweep.backends.trl.folder import folder_problems
from grpo.sweep.backends.trl.keys import NATIVE_VALUES, RENDERED, grpo_config_kwargs
from grpo.sweep.spec.models import TrlSpec


def batch_plan(cfg: GRPOConfig, processes: int = 1) -> dict[str, int]:
    """TRL's batch settings for MindSpeed-RL's on ``processes`` training processes (the module docstring's
    conversion); UserError if they do not divide. TRL 1.16 takes a generation as ``per_device_train_batch_size *
    num_processes * steps_per_generation`` completions and an optimizer step as ``per_device_train_batch_size *
    num_processes * gradient_accumulation_steps``, so both are divided by the processes: ``global_batch_size``
    and ``mini_batch_size`` stay the same prompts on any number of processes."""
    mt, rl, src = cfg.megatron_training, cfg.rl_config, cfg._source
    n = int(rl.n_samples_per_prompt)
    responses, mini = int(mt.global_batch_size) * n, int(rl.mini_batch_size) * n
    micro = min(int(cfg.actor_config.micro_batch_size), mini // processes or 1)
    if responses % mini or mini % (micro * processes):
        raise UserError(
            f"{src}: rl_config.mini_batch_size: backend trl needs global_batch_size * n_samples_per_prompt "
            f"({responses}) divisible by mini_batch_size * n ({mini}), and that by micro_batch_size ({micro}) x "
            f"trl.num_processes ({processes})"
        )
    return {
        "per_device_train_batch_size": micro,
        "gradient_accumulation_steps": mini // (micro * processes),
        "steps_per_generation": responses // (micro * processes),
        "steps_per_iter": responses // mini * int(rl.epochs),
    }


def schedule_kwargs(cfg: GRPOConfig, max_steps: int) -> dict[str, Any]:
    """transformers' scheduler for Megatron's (the engine's ``update.lr_at``): warmup over ``round(fraction *
    steps)`` optimizer steps, then constant, linear or cosine decay to ``min_lr``. transformers' ``constant``
    ignores warmup (``get_constant_schedule``), hence ``constant_with_warmup``; a decay to ``min_lr`` > 0 is
    ``cosine_with_min_lr`` or, for linear, ``polynomial`` with power 1 and ``lr_end``."""
    actor = cfg.actor_config
    warmup, style, min_lr = round(float(actor.lr_warmup_fraction) * max_steps), actor.lr_decay_style, actor.min_lr
    out: dict[str, Any] = {"warmup_steps": warmup, "lr_scheduler_type": style}
    if style == "constant" and warmup:
        out["lr_scheduler_type"] = "constant_with_warmup"
    elif style == "cosine" and min_lr:
        out.update(lr_scheduler_type="cosine_with_min_lr", lr_scheduler_kwargs={"min_lr": float(min_lr)})
    elif style == "linear" and min_lr:
        if min_lr >= actor.lr:  # transformers' polynomial decay refuses lr_end >= lr
            raise UserError(f"{cfg._source}: actor_config.min_lr: {min_lr:g} is not below actor_config.lr "
                            f"({actor.lr:g}); backend trl decays linearly from lr to min_lr")  # fmt: skip
        out.update(lr_scheduler_type="polynomial", lr_scheduler_kwargs={"lr_end": float(min_lr), "power": 1.0})
    return out


def render(cfg: GRPOConfig, output_dir: Path, processes: int = 1) -> tuple[dict[str, Any], int]:
    """(GRPOConfig kwargs, optimizer steps per iteration) for one trial config on ``processes`` processes."""
    plan = batch_plan(cfg, processes)
    steps = plan.pop("steps_per_iter")
    mt, actor = cfg.megatron_training, cfg.actor_config
    kwargs = grpo_config_kwargs(cfg)
    if not kwargs["min_p"]:
        kwargs["min_p"] = None  # TRL: None is off
    device = cfg.engine.device
    if device == "auto":
        import torch

        device = "cuda" if torch.cuda.is_available() else "cpu"
    max_steps = steps * int(mt.train_iters)
    kwargs.update(
        plan,
        **schedule_kwargs(cfg, max_steps),
        output_dir=str(output_dir),
        use_cpu=device == "cpu",
        bf16=False,
        report_to="none",
        disable_tqdm=True,
        dataloader_num_workers=0,
        seed=int(mt.seed),  # the prompt order (RepeatSampler); the sampling seed: SweepCallback.on_train_begin
        shuffle_dataset=not mt.no_shuffle,
        max_steps=max_steps,
        logging_steps=steps,  # one log row per iteration (SweepCallback)
        save_strategy="steps",
        save_steps=steps * int(mt.save_interval),
        save_total_limit=cfg.engine.keep_checkpoints,
        weight_decay=float(actor.weight_decay),
        adam_beta1=float(actor.adam_beta1),
        adam_beta2=float(actor.adam_beta2),
        max_grad_norm=float(actor.clip_grad) if actor.clip_grad > 0 else 1e12,
        reward_weights=[float(w) for w in cfg.rl_config.verifier_weight],
    )
    return kwargs, steps


def resume_folder(cfg: GRPOConfig, steps_per_iter: int) -> Path | None:
    """The ``checkpoint-N`` folder a retry or branch resumes from, or None for a fresh start."""
    load = cfg.actor_config.load
    if not load or cfg.actor_config.finetune:
        return None
    iteration = checkpoint_iteration(Path(load))
    if iteration is None:
        return None
    folder = Path(load) / f"checkpoint-{iteration * steps_per_iter}"
    if not folder.is_dir():
        raise TrialFailed(f"actor_config.load: {load} names iteration {iteration} but has no {folder.name}")
    return folder


class TrlBackend(TrialBackend):
    """Runs each trial as a TRL GRPOTrainer run in the worker, or under ``accelerate launch`` (spec ``trl:``,
    ``launch.py``); see the module docstring."""

    def __init__(self, settings: TrlSpec | None = None, *, source: str = "spec"):
        self.settings = settings or TrlSpec()
        self.source = source

    @classmethod
    def from_spec(cls, spec: Any) -> TrlBackend:
        settings = spec.trl.anchored(spec.path.parent) if spec.path is not None else spec.trl
        return cls(settings, source=spec.source)

    @property
    def processes(self) -> int:
        """Training processes of one trial: ``trl.num_processes`` under accelerate, else the worker alone."""
        return self.settings.num_processes if self.settings.launcher == "accelerate" else 1

    def resources(self, cfg: GRPOConfig) -> RayOptions:
        """One CPU slot per torch thread of each process; on cuda one GPU per process (Ray's CUDA_VISIBLE_DEVICES
        reaches the accelerate subprocess, which runs one process per visible GPU)."""
        options: RayOptions = {"num_cpus": max(1, int(cfg.engine.num_threads)) * self.processes}
        if cfg.engine.device == "cuda":
            options["num_gpus"] = self.processes
        return options

    def check(self, cfg: GRPOConfig) -> list[str]:
        problems = coverage.KEYS.refusals(cfg, cfg._source)
        try:
            grpo_config_kwargs(cfg)
            batch_plan(cfg, self.processes)
            schedule_kwargs(cfg, 1)
        except UserError as err:
            problems.append(str(err))
        problems += self.semantics_problems(cfg) + self.schedule_problems(cfg) + self.launcher_problems(cfg)
        problems += folder_problems(cfg)  # a model folder not Qwen2: transformers must load it as it is
        problems += self.native_problems(cfg) if not problems else []  # TRL checks the rendered fields too
        return problems + self.branch_problems(cfg) * bool(cfg.engine.exit_interval)

    def native(self, cfg: GRPOConfig) -> dict[str, Any]:
        """TRL GRPOConfig fields beyond the rendered ones: the spec's ``trl.args`` and the config's ``trl.args.*``
        (fixed as overrides or searched; they travel in the trial's config, so they export and show in reports)."""
        return {**self.settings.args, **((cfg.trl or {}).get("args") or {})}

    def native_problems(self, cfg: GRPOConfig) -> list[str]:
        """``trl.args``: a field the render sets is refused naming the key that sets it; the others are checked by
        constructing TRL's own ``GRPOConfig`` with the rendered fields (an unknown field, a bad value: one line)."""
        own = cfg.trl or {}
        other = [k for k in own if k != "args"]
        if other or not isinstance(own.get("args", {}), dict):
            return [f"{cfg._source}: trl.{(other or ['args'])[0]}: backend trl's own settings are trl.args.<field> "
                    "(a TRL GRPOConfig field)"]  # fmt: skip
        twice = sorted(set(self.settings.args) & set(own.get("args") or {}))
        if twice:
            return [f"{self.source}: trl.args.{twice[0]}: fixed in the spec's trl.args and set in the config "
                    "(an override or the search); set it in one place"]  # fmt: skip
        native = self.native(cfg)
        owned = [f for f in native if f in RENDERED and native[f] not in NATIVE_VALUES.get(f, ())]
        mapped = (
            "engine.loss_agg_mode"
            if cfg.engine.loss_agg_mode is not None
            else "rl_config.token_level_loss"
            if "token_level_loss" in cfg.rl_config.model_fields_set
            else None
        )
        if "loss_type" in native and not owned and mapped:  # the mapped key would be silently replaced
            # token_level_loss is a long-tail key, typed by the manifest rather than declared on the model
            value = (
                cfg.engine.loss_agg_mode
                if mapped.startswith("engine")
                else getattr(cfg.rl_config, "token_level_loss", None)
            )
            return [f"{self.source}: trl.args.loss_type: {native['loss_type']} replaces {mapped} ({value}); "
                    "set only one"]  # fmt: skip
        if owned:
            return [f"{self.source}: trl.args.{f}: set from {RENDERED[f]} by backend trl; set that key instead"
                    for f in owned]  # fmt: skip
        if not native:
            return []
        import trl

        kwargs = {**render(cfg, Path("trl-args-check"), self.processes)[0], **native}
        kwargs["use_cpu"] = True  # validation only: no device is touched on the driver
        try:
            trl.GRPOConfig(**kwargs)
        except TypeError as err:  # an unknown keyword: name the field
            bad = next((f for f in native if f"'{f}'" in str(err)), next(iter(native)))
            return [f"{self.source}: trl.args.{bad}: not a field of TRL {trl.__version__}'s GRPOConfig"]
        except Exception as err:  # TRL's own validation (ValueError and the like): its first line
            first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            return [f"{self.source}: trl.args: TRL's GRPOConfig refuses them: {first}"]
        return []

    def semantics_problems(self, cfg: GRPOConfig) -> list[str]:
        """Values a TRL run would not carry out as the engine does: the mini batches' order (TRL 1.16 always
        shuffles a generation before splitting it, ``shuffle_sequence_dict`` in ``_prepare_inputs``) and LoRA
        settings (the engine's rules, grpo/engine/lora.py)."""
        src, problems = cfg._source, lora.config_problems(cfg)
        mt, rl = cfg.megatron_training, cfg.rl_config
        if not rl.shuffle_mini_batch and mt.global_batch_size != rl.mini_batch_size:
            problems.append(
                f"{src}: rl_config.shuffle_mini_batch: false: backend trl always shuffles a generation's responses "
                f"before splitting them into mini batches; set it true (or mini_batch_size = global_batch_size)"
            )
        if lora.settings(cfg) is not None and not lora.peft_installed():
            problems.append(f"{src}: megatron_training.lora_target_modules: LoRA needs peft ({lora.INSTALL})")
        return problems

    def launcher_problems(self, cfg: GRPOConfig) -> list[str]:
        """What ``trl:`` cannot do with this config (the spec-only rules are TrlSpec.problems, at load)."""
        settings = self.settings
        if settings.launcher == "accelerate" and settings.num_processes > 1 and cfg.engine.device == "cpu":
            # accelerate launch --cpu runs its simple launcher: one process, whatever --num_processes says
            return [
                f"{self.source}: trl.num_processes: {settings.num_processes}: with engine.device cpu accelerate "
                f"launch starts one process (--cpu); use 1, or engine.device cuda"
            ]
        return []

    def check_search(self, keys: list[str], source: str) -> list[str]:
        fields = [(k, k.removeprefix("trl.args.")) for k in keys if k.startswith("trl.args.")]
        owned = [(k, f) for k, f in fields if f in RENDERED and f not in NATIVE_VALUES]  # values: check()
        return coverage.KEYS.searched_problems(keys, source) + [
            f"{source}: search.{k}: set from {RENDERED[f]} by backend trl; search that key instead" for k, f in owned
        ]

    def branch_problems(self, cfg: GRPOConfig) -> list[str]:
        """A pbt branch resumes from its parent's checkpoint-N with the parent's scheduler state, so only a
        constant learning rate without warmup is the branch's own (the callback resets it)."""
        actor, problems = cfg.actor_config, []
        if actor.lr_decay_style != "constant" or actor.lr_warmup_fraction > 0:
            problems.append(
                f"{self.source}: actor_config.lr_decay_style: pbt segments on backend trl resume the parent's "
                f"scheduler ({actor.lr_decay_style}, warmup {actor.lr_warmup_fraction:g}), which would keep its "
                f"learning rate; use lr_decay_style: constant with no warmup"
            )
        return problems

    def schedule_problems(self, cfg: GRPOConfig) -> list[str]:
        """A TRL run trains with one value of each key (its config at the iteration it starts from); a schedule
        may change a value only where a run starts: at a pbt segment's start (a multiple of exit_interval)."""
        interval, problems = cfg.engine.exit_interval, []
        for key, points in sorted((cfg.schedule or {}).items()):
            inside = sorted(int(at) for at in points if int(at) > 0 and (not interval or int(at) % interval))
            if inside:
                problems.append(
                    f"{self.source}: schedule.{key}: backend trl cannot change a value during a run (iteration "
                    f"{inside[0]}); a schedule runs there only as pbt segments that start where it changes"
                )
        return problems

    def run(self, cfg: GRPOConfig, trial_dir: Path, report: ReportFn, resume: bool) -> dict[str, Any]:
        try:
            import trl  # noqa: F401
        except ImportError as err:
            raise TrialFailed(
                f"backend trl: trl is not installed here (pip install 'grpo-sweep[trl]'): {err}"
            ) from None
        if self.settings.launcher == "accelerate":
            from grpo.sweep.backends.trl.launch import run_accelerate

            run_dir = Path(trial_dir).resolve()
            steps = render(cfg, Path(str(cfg.actor_config.save or run_dir / "ckpt")), self.processes)[1]
            start = resume_folder(cfg, steps)
            start_iteration = (checkpoint_iteration(Path(str(cfg.actor_config.load))) or 0) if start else 0
            return run_accelerate(self.settings, cfg, run_dir, report, start_iteration)
        return self.run_here(cfg, trial_dir, report)

    def run_here(
        self,
        cfg: GRPOConfig,
        trial_dir: Path,
        report: ReportFn,
        should_stop: Callable[[], bool] | None = None,
        processes: int = 1,
        native: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """The TRL run in this process (the worker, or each of the ``processes`` ``accelerate launch`` starts)."""
        import torch

        from grpo.engine.metrics import close_logger, run_logger
        from grpo.engine.rollout import SamplingParams

        run_dir = Path(trial_dir).resolve()
        run_dir.mkdir(parents=True, exist_ok=True)
        log = run_logger(run_dir)
        previous = torch.get_num_threads()
        torch.set_num_threads(max(1, int(cfg.engine.num_threads)))
        try:
            native = native if native is not None else self.native(cfg)
            return self._train(cfg, run_dir, report, log, SamplingParams, should_stop, processes, native)
        except UserError as err:
            raise TrialFailed(f"bad trial config: {err}", tail_lines(run_dir / "train.log")) from None
        finally:
            torch.set_num_threads(previous)
            close_logger(log)

    def _train(
        self, cfg: GRPOConfig, run_dir: Path, report: ReportFn, log: logging.Logger, sp: Any, should_stop: Any,
        processes: int, native: dict[str, Any],
    ) -> dict:  # fmt: skip
        import trl

        built = build_trainer(cfg, run_dir, report, log, sp, should_stop, processes, native)
        trainer, callback, start = built.trainer, built.callback, built.start
        log.info(f"TRL {trl.__version__}: {built.steps} optimizer steps per iteration; resume from {start or 'none'}")
        trainer.train(resume_from_checkpoint=str(start) if start else None)
        last = callback.last
        diverged = [k for k in ("actor/pg_loss", "actor/kl_loss", "actor/entropy") if not math.isfinite(last.get(k, 0))]
        if diverged:
            raise TrialFailed(
                f"training diverged: {diverged[0]} is {last[diverged[0]]}", tail_lines(run_dir / "train.log")
            )
        return {
            "run_dir": str(run_dir),
            "iterations": callback.iteration,
            "stopped_early": callback.stopped,
            "exited_at": callback.exited_at,
            "start_iteration": built.start_iteration,
            "checkpoint": str(built.save_dir),
            "metrics": last,
        }


@dataclass
class Built:
    trainer: Any  # trl.GRPOTrainer, constructed, not trained
    callback: Any  # SweepCallback
    steps: int  # optimizer steps per iteration
    start: Path | None  # the checkpoint-N it resumes from
    start_iteration: int
    save_dir: Path


def build_trainer(
    cfg: GRPOConfig, run_dir: Path, report: ReportFn, log: logging.Logger, sp: Any, should_stop: Any = None,
    processes: int = 1, native: dict[str, Any] | None = None,
) -> Built:  # fmt: skip
    """The trial's ``GRPOTrainer`` as TRL constructs it (its args, model, reward functions, callback), before
    ``train``: the run trains exactly this object, and the tests read what TRL resolved from it. ``native``: the
    spec's ``trl.args`` (fields the render does not set; ``TrlBackend.native_problems`` checked them)."""
    import datasets
    import trl

    from grpo.sweep.backends.trl.callback import SweepCallback
    from grpo.sweep.backends.trl.model import build_base, dataset_rows, load_hf, peft_config, reward_functions

    save_dir = Path(str(cfg.actor_config.save or run_dir / "ckpt")).expanduser()
    kwargs, steps = render(cfg, save_dir, processes)
    start = resume_folder(cfg, steps)
    start_iteration = (checkpoint_iteration(Path(str(cfg.actor_config.load))) or 0) if start else 0
    if cfg.schedule:  # a pbt segment: its lineage's values; this run trains with those at its start
        cfg = schedule.apply(cfg, start_iteration)
        kwargs, steps = render(cfg, save_dir, processes)
    truncate_jsonl_after(run_dir / "metrics.jsonl", start_iteration)
    truncate_jsonl_after(run_dir / "samples.jsonl", start_iteration)
    base = build_base(cfg, run_dir, log)
    model, fast = load_hf(base)
    sampling = cfg.generate_config.sampling_config
    max_prompt = max(len(base.held_out.prompt_ids[e.prompt]) for e in base.train_set)
    kwargs["max_completion_length"] = min(
        kwargs["max_completion_length"], cfg.generate_config.max_model_len - max_prompt
    )  # the engine's max_tokens (grpo/engine/trainer.py), so dr_grpo divides by the same constant
    dataset = datasets.Dataset.from_list(dataset_rows(base))  # the record's columns reach user rewards (issue 41)
    funcs: list[Any] = list(reward_functions(cfg)[0])  # weights: GRPOConfig's reward_weights (render)
    args = trl.GRPOConfig(**{**kwargs, **(native or {})})
    if args.world_size != processes:  # the batch plan divides by the processes the backend was told
        raise TrialFailed(f"backend trl: {args.world_size} training processes, the batch plan is for {processes}")
    rl = cfg.rl_config
    callback = SweepCallback(
        base=base, report=report, steps_per_iter=steps, train_iters=int(cfg.megatron_training.train_iters),
        eval_every=cfg.engine.eval_every, exit_interval=cfg.engine.exit_interval,
        sampling=sp(sampling.temperature, sampling.top_p, sampling.top_k, sampling.min_p,
                    kwargs["max_completion_length"]),
        sampling_seed=sampling.seed, scoring=([str(v) for v in rl.verifier_function], list(rl.verifier_weight)),
        beta=float(rl.init_kl_coef), run_dir=run_dir, save_dir=save_dir, should_stop=should_stop,
    )  # fmt: skip
    trainer = trl.GRPOTrainer(
        model=model, reward_funcs=funcs, args=args, train_dataset=dataset, processing_class=fast,
        callbacks=[callback], peft_config=peft_config(cfg),
    )  # fmt: skip
    return Built(trainer, callback, steps, start, start_iteration, save_dir)
