"""What a ``Run`` (trainer.py) is built from: the device, the tokenizer, the prompts, the policy and its frozen
reference (full fine-tuning or LoRA; fresh, resumed, or fine-tuned from a checkpoint) and the optimizer."""

from __future__ import annotations

import copy
import logging
from pathlib import Path
from typing import Any, cast

import torch

from grpo.config import GRPOConfig
from grpo.config.hf_model import find_model_folder
from grpo.engine import checkpoint as ckpt
from grpo.engine import data as data_mod
from grpo.engine import lora as lora_mod
from grpo.engine.hf_checkpoint import check_arch, load_weights, read_model_args
from grpo.engine.model import ModelArgs, Qwen2
from grpo.engine.prompt import build_prompt
from grpo.engine.tokenizer import Tokenizer, build_task_tokenizer, load_tokenizer
from grpo.engine.warm_start import default_cache_dir, warm_started_policy
from grpo.errors import UserError


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


def tokenizer_for(cfg: GRPOConfig) -> Tokenizer:
    """``tokenizer_name_or_path``, else the one beside ``actor_config.load``, else the task's own."""
    mt, actor = cfg.megatron_training, cfg.actor_config
    if mt.tokenizer_name_or_path:
        return load_tokenizer(mt.tokenizer_name_or_path)
    if actor.load and Path(actor.load).expanduser().is_dir():
        folder = Path(actor.load).expanduser()
        # a save folder resumes with its latest checkpoint's tokenizer (the engine's iter_N or TRL's checkpoint-N)
        folder = (find_model_folder(str(folder), None) or (folder, ""))[0]
        if (folder / "tokenizer.json").is_file():
            return load_tokenizer(folder, key="actor_config.load")
    return build_task_tokenizer()


def prompts(
    cfg: GRPOConfig, tokenizer: Tokenizer, run_dir: Path, log: logging.Logger
) -> tuple[list[data_mod.Example], list[data_mod.Example], dict[str, list[int]], int]:
    """Training and held-out examples (those within ``max_prompt_length``), every prompt's token ids, and the
    longest kept prompt's length."""
    mt, eng = cfg.megatron_training, cfg.engine
    train, held_out = data_mod.train_and_eval_examples(cfg, run_dir)
    if eng.task != "dataset":
        log.info(
            f"task {eng.task}: {len(train)} prompts written to {data_mod.generated_data_file(mt.data_path, run_dir)}"
        )
    else:
        log.info(f"dataset {mt.data_path}: {len(train)} training prompts, {len(held_out)} held out")
    limit = cfg.rl_config.max_prompt_length
    prompt_ids = {e.prompt: tokenizer.encode(build_prompt(tokenizer, e)) for e in train + held_out}
    kept = [e for e in train if len(prompt_ids[e.prompt]) <= limit]
    if len(kept) < len(train):
        log.warning(f"{len(train) - len(kept)} prompts longer than rl_config.max_prompt_length={limit} dropped")
    if not kept:
        raise UserError(f"{mt.data_path}: rl_config.max_prompt_length: every prompt is longer than {limit} tokens")
    held_out = [e for e in held_out if len(prompt_ids[e.prompt]) <= limit]
    max_prompt_tokens = max(len(prompt_ids[e.prompt]) for e in kept + held_out)
    return kept, held_out, prompt_ids, max_prompt_tokens


def optimizer(policy: Qwen2, cfg: GRPOConfig) -> torch.optim.Optimizer:
    """AdamW over the trainable parameters (LoRA: the adapters only); biases and norms get no weight decay."""
    actor = cfg.actor_config
    params = [p for p in policy.parameters() if p.requires_grad]
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    return torch.optim.AdamW(
        [{"params": decay, "weight_decay": actor.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=actor.lr,
        betas=(actor.adam_beta1, actor.adam_beta2),
        eps=1e-8,
    )


def set_weight_decay(optimizer: torch.optim.Optimizer, weight_decay: float) -> None:
    """The weight decay of the decaying group (``optimizer()`` puts it first), as a scheduled value switches or a
    resumed run starts: ``load_state_dict`` brings back the checkpoint's, where Megatron's scheduler sets the
    config's every step."""
    optimizer.param_groups[0]["weight_decay"] = weight_decay


def _same_path(a: str | None, b: str | None) -> bool:
    return a is not None and b is not None and Path(a).expanduser().resolve() == Path(b).expanduser().resolve()


class Models:
    """The policy, its frozen reference, and what ``actor_config.load`` designated (``loaded``; None = fresh).

    With LoRA (``lora.py``) the policy carries peft adapters (``peft``) and the reference is the same model
    with its adapters off (``lora.BaseView``), not a copy. A resumed LoRA run rebuilds its base and loads its
    adapters; ``finetune`` starts from a LoRA checkpoint's merged weights. ``args`` are the model's, those of
    the checkpoint when one is loaded."""

    def __init__(
        self, cfg: GRPOConfig, args: ModelArgs, tokenizer: Tokenizer, device: torch.device, log: logging.Logger
    ):
        self.cfg, self.args, self.tokenizer, self.device, self.log = cfg, args, tokenizer, device, log
        self.seed = cfg.megatron_training.seed
        self.lora_settings = lora_mod.settings(cfg)
        self.peft: Any = None
        self.lora_base: dict[str, Any] = {}  # LoRA: the base the adapters train on (base_load, fingerprint)
        self.policy, self.reference, self.loaded = self._build()

    def _build(self) -> tuple[Qwen2, Qwen2, ckpt.Loaded | None]:
        actor = self.cfg.actor_config
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
