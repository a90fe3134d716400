"""What a TRL trial trains on, built the way the embedded engine builds it: the same warm-started tiny Qwen2
(saved as a Hugging Face folder TRL loads as ``transformers.Qwen2ForCausalLM``), the same character tokenizer
(as a ``PreTrainedTokenizerFast``), the same training prompts and held-out prompts, and the project's verifiers
as TRL reward functions.

    base = build_base(cfg, run_dir, log)     # base.folder, base.tokenizer, base.train_set, base.held_out
    funcs, weights = reward_functions(cfg)   # GRPOTrainer(reward_funcs=funcs), GRPOConfig(reward_weights=weights)
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from grpo.config import GRPOConfig
from grpo.engine import build, rewards
from grpo.engine.data import Example, get_task
from grpo.engine.evaluate import HeldOut
from grpo.engine.hf_checkpoint import is_hf_folder, load_weights, save_weights
from grpo.engine.model import ModelArgs, Qwen2
from grpo.engine.tokenizer import Tokenizer
from grpo.engine.warm_start import default_cache_dir, warm_started_policy
from grpo.errors import UserError

BASE_FOLDER = "hf_base"  # in the run dir: the starting weights and tokenizer, as a HF folder


@dataclass
class Base:
    folder: Path  # HF folder: config.json, model.safetensors, tokenizer.json (TRL's model and reference)
    tokenizer: Tokenizer
    train_set: list[Example]
    held_out: HeldOut
    evaluator: Qwen2  # an engine model the held-out evaluation copies TRL's weights into


def build_base(cfg: GRPOConfig, run_dir: Path, log: logging.Logger) -> Base:
    """The starting policy as a HF folder in ``run_dir`` and the prompts, as the embedded engine has them."""
    eng, mt = cfg.engine, cfg.megatron_training
    tok = build.tokenizer_for(cfg)
    train_set, eval_set, prompt_ids, _ = build.prompts(cfg, tok, run_dir, log)
    args = ModelArgs.from_model_config(cfg.model_arch)
    load = cfg.actor_config.load
    if load and is_hf_folder(Path(load).expanduser()):  # a user's HF starting point
        policy = Qwen2(args)
        load_weights(policy, Path(load).expanduser())
    elif eng.task == "dataset":
        raise UserError(f"{cfg._source}: actor_config.load: backend trl needs a HF folder with engine.task=dataset")
    else:  # the (shipped or cached) warm start, the same bytes the embedded engine starts from
        policy, _ = warm_started_policy(
            args, tok, get_task(eng.task), eng.task_seed, eng.warm_start_steps, mt.init_method_std,
            default_cache_dir(eng.cache_dir), log=log.info,
        )  # fmt: skip
    folder = run_dir / BASE_FOLDER
    folder.mkdir(parents=True, exist_ok=True)
    save_weights(policy, folder, eos_token_id=tok.eos_id, pad_token_id=tok.pad_id)
    tok.save(folder)
    device = torch.device("cpu")
    held_out = HeldOut(eval_set, prompt_ids, tok, device, eng.task_seed)
    return Base(folder, tok, train_set, held_out, policy)


def load_hf(base: Base) -> tuple[Any, Any]:
    """(Qwen2ForCausalLM, PreTrainedTokenizerFast) from the base folder; prompts left-padded, as TRL samples."""
    import transformers

    model = transformers.Qwen2ForCausalLM.from_pretrained(base.folder, dtype=torch.float32)
    model.generation_config.eos_token_id = base.tokenizer.stop_ids  # every stop token ends a response
    model.generation_config.pad_token_id = base.tokenizer.pad_id
    fast = transformers.PreTrainedTokenizerFast.from_pretrained(str(base.folder))
    fast.padding_side = "left"
    return model, fast


def copy_into(evaluator: Qwen2, hf_model: Any) -> Qwen2:
    """The engine model holding ``hf_model``'s weights now (the parameter names are the same, by design)."""
    state = {k: v for k, v in hf_model.state_dict().items() if k in evaluator.state_dict()}
    evaluator.load_state_dict(state, strict=False)
    return evaluator.eval()


def reward_functions(cfg: GRPOConfig) -> tuple[list[Callable[..., list[float | None]]], list[float]]:
    """One TRL reward function per ``rl_config.verifier_function`` (named ``verifier_<name>``, TRL's metric name
    ``rewards/verifier_<name>/mean``) and their ``verifier_weight``s as GRPOConfig's ``reward_weights``."""
    rl = cfg.rl_config
    names, weights = [str(v) for v in rl.verifier_function], [float(w) for w in rl.verifier_weight]
    funcs: list[Callable[..., list[float | None]]] = []
    for name in names:

        def func(
            prompts: list[str], completions: list[str], label: list[str], _name: str = name, **_: Any
        ) -> list[float | None]:
            scores, _ = rewards.score(list(completions), list(label), [_name], [1.0])
            out: list[float | None] = list(scores)
            return out

        func.__name__ = f"verifier_{name}"
        funcs.append(func)
    return funcs, weights
