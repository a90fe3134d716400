"""What a TRL trial trains on, built the way the embedded engine builds it: the same warm-started tiny Qwen2
(saved as a Hugging Face folder TRL loads as ``transformers.Qwen2ForCausalLM``), the same character tokenizer
(as a ``PreTrainedTokenizerFast``), the same training prompts and held-out prompts, and the project's verifiers
as TRL reward functions. A model folder of another architecture (``actor_config.load``: Llama, Mistral, ...; the
engine builds Qwen2 only) is loaded by transformers as it is and evaluated as itself (folder.py, hf_policy.py).

    base = build_base(cfg, run_dir, log)     # base.folder, base.tokenizer, base.train_set, base.held_out
    funcs, weights = reward_functions(cfg)   # GRPOTrainer(reward_funcs=funcs), GRPOConfig(reward_weights=weights)
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from grpo._fs import checkpoint_iteration
from grpo.config import GRPOConfig
from grpo.engine import build, lora, rewards
from grpo.engine.data import Example, get_task
from grpo.engine.evaluate import HeldOut
from grpo.engine.hf_checkpoint import is_hf_folder, load_weights, save_weights
from grpo.engine.model import ModelArgs, Qwen2
from grpo.engine.prompt import build_prompt
from grpo.engine.tokenizer import Tokenizer
from grpo.engine.warm_start import default_cache_dir, warm_started_policy
from grpo.errors import UserError
from grpo.sweep.backends.trl.folder import engine_builds, load_causal_lm

BASE_FOLDER = "hf_base"  # in the run dir: the starting weights and tokenizer, as a HF folder
START_FILE = "start_folder.txt"  # in the save dir: the HF folder a run started from (its retries' reference)
# TRL dataset columns of the project's own (dataset_rows); never passed to a user's function
PROMPT_COLUMN, LABEL_COLUMN = "_grpo_prompt_as_given", "_grpo_label"


@dataclass
class Base:
    folder: Path  # HF folder: config.json and weights (TRL's model and reference)
    tokenizer_folder: Path  # the run's tokenizer.json (TRL's processing_class): run_dir / BASE_FOLDER
    tokenizer: Tokenizer
    train_set: list[Example]
    held_out: HeldOut
    evaluator: Qwen2 | None  # an engine model the held-out evaluation copies TRL's weights into; None: not Qwen2


def build_base(cfg: GRPOConfig, run_dir: Path, log: logging.Logger) -> Base:
    """The starting policy as a HF folder (in ``run_dir``, or the user's folder of another architecture than
    Qwen2) and the prompts, as the embedded engine has them."""
    eng, mt = cfg.engine, cfg.megatron_training
    tok = build.tokenizer_for(cfg)
    train_set, eval_set, prompt_ids, _ = build.prompts(cfg, tok, run_dir, log)
    folder = run_dir / BASE_FOLDER
    folder.mkdir(parents=True, exist_ok=True)
    held_out = HeldOut(eval_set, prompt_ids, tok, torch.device("cpu"), eng.task_seed)
    load = start_weights(cfg)
    if load is not None:  # a retry or branch finds it in the save dir: its reference is these weights too
        save_dir = Path(str(cfg.actor_config.save or run_dir / "ckpt")).expanduser()
        save_dir.mkdir(parents=True, exist_ok=True)
        (save_dir / START_FILE).write_text(str(load.resolve()))
    if not engine_builds(load):  # transformers loads it as it is (load_hf); validate checked it loads
        tok.save(folder)
        log.info(f"model: {load} as transformers loads it (not a Qwen2: the held-out evaluation runs on it)")
        return Base(Path(str(load)), folder, tok, train_set, held_out, None)
    args = ModelArgs.from_model_config(cfg.model_arch)
    if load is not None:  # a user's HF starting point, or the newest checkpoint-N of a save dir (finetune)
        policy = Qwen2(args)
        load_weights(policy, load)
    elif eng.task == "dataset":
        raise UserError(f"{cfg._source}: actor_config.load: backend trl needs a HF folder with engine.task=dataset")
    else:  # the (shipped or cached) warm start, the same bytes the embedded engine starts from
        policy, _ = warm_started_policy(
            args, tok, get_task(eng.task), eng.task_seed, eng.warm_start_steps, mt.init_method_std,
            default_cache_dir(eng.cache_dir), log=log.info,
        )  # fmt: skip
    save_weights(policy, folder, eos_token_id=tok.eos_id, pad_token_id=tok.pad_id)
    tok.save(folder)
    return Base(folder, folder, tok, train_set, held_out, policy)


def start_weights(cfg: GRPOConfig) -> Path | None:
    """The HF folder a run's weights start from: ``actor_config.load`` when it is one, or, for a save dir (the
    driver's tracker beside TRL's ``checkpoint-N`` folders) with ``finetune``, its newest checkpoint's weights.
    A retry or branch (a save dir, no ``finetune``) resumes from its save dir (``backend.resume_folder``) on the
    weights its run started from: the folder named in the save dir's ``START_FILE``, else the warm start (None).
    """
    load = Path(str(cfg.actor_config.load)).expanduser() if cfg.actor_config.load else None
    if load is None or is_hf_folder(load):
        return load
    if not cfg.actor_config.finetune and (load / START_FILE).is_file():
        start = Path((load / START_FILE).read_text().strip())
        if not is_hf_folder(start):
            raise UserError(f"{cfg._source}: actor_config.load: {load} started from {start}, which is gone")
        return start
    if not cfg.actor_config.finetune or checkpoint_iteration(load) is None:
        return None
    steps = [int(p.name.split("-")[1]) for p in load.glob("checkpoint-*") if p.name.split("-")[1].isdigit()]
    if not steps:
        raise UserError(f"{cfg._source}: actor_config.load: {load} has a tracker but no checkpoint-N folder")
    return load / f"checkpoint-{max(steps)}"


def load_hf(base: Base) -> tuple[Any, Any]:
    """(Qwen2ForCausalLM or the folder's own causal LM, PreTrainedTokenizerFast) from the base folders; prompts
    left-padded, as TRL samples."""
    import transformers

    if base.evaluator is None:
        model = load_causal_lm(base.folder, "actor_config.load")
    else:
        model = transformers.Qwen2ForCausalLM.from_pretrained(base.folder, dtype=torch.float32)
    model.generation_config.eos_token_id = base.tokenizer.stop_ids  # every stop token ends a response
    model.generation_config.pad_token_id = base.tokenizer.pad_id
    fast = transformers.PreTrainedTokenizerFast.from_pretrained(str(base.tokenizer_folder))
    fast.padding_side = "left"
    return model, fast


def copy_into(evaluator: Qwen2, hf_model: Any) -> Qwen2:
    """The engine model holding ``hf_model``'s weights now (the parameter names are the same, by design); a peft
    model's adapters are merged for the copy (``merge_adapter``) and unmerged after it."""
    peft = hasattr(hf_model, "merge_adapter")
    if peft:
        hf_model.merge_adapter()
    try:
        own = hf_model.get_base_model() if peft else hf_model
        state = {k.replace(".base_layer.", "."): v for k, v in own.state_dict().items()}
        state = {k: v for k, v in state.items() if k in evaluator.state_dict()}
        missing = set(evaluator.state_dict()) - set(state)
        if missing:  # an evaluation of other weights than the policy's would be silently wrong
            raise RuntimeError(f"held-out evaluation: TRL's model has no {sorted(missing)[0]}")
        evaluator.load_state_dict(state)
    finally:
        if peft:
            hf_model.unmerge_adapter()
    return evaluator.eval()


def peft_config(cfg: GRPOConfig) -> Any:
    """GRPOTrainer's ``peft_config`` from MindSpeed-RL's LoRA keys as the embedded engine reads them
    (grpo/engine/lora.py: rank, alpha, target modules mapped to the Qwen2 projections, no dropout); None
    without LoRA."""
    settings = lora.settings(cfg)
    if settings is None:
        return None
    import peft

    return peft.LoraConfig(
        r=settings.r, lora_alpha=settings.alpha, target_modules=list(settings.modules), lora_dropout=0.0,
        task_type="CAUSAL_LM",
    )  # fmt: skip


def dataset_rows(base: Base) -> list[dict[str, Any]]:
    """The rows of TRL's ``train_dataset``: ``prompt`` the text the engine tokenizes (its chat template applied as
    on the embedded engine, so TRL samples from the same tokens), every other column of the record as it is (TRL
    passes them to reward functions by name), and two columns of the project's own: the record's prompt as given
    (text or chat messages, JSON: a user's TRL function gets it as ``prompts``, as TRL would) and the label read."""
    columns = dict.fromkeys(k for e in base.train_set for k in e.extra)  # from_list keeps only the first row's keys
    return [
        {
            **{k: e.extra.get(k) for k in columns},
            "prompt": build_prompt(base.tokenizer, e),
            PROMPT_COLUMN: json.dumps(list(e.messages) if e.messages else e.prompt),
            LABEL_COLUMN: e.label,
        }
        for e in base.train_set
    ]


def reward_functions(cfg: GRPOConfig) -> tuple[list[Callable[..., list[float | None]]], list[float]]:
    """One TRL reward function per ``rl_config.verifier_function`` (named ``verifier_<name>``, TRL's metric name
    ``rewards/verifier_<name>/mean``) and their ``verifier_weight``s as GRPOConfig's ``reward_weights``.

    Each goes through ``rewards.score`` / ``UserReward.score`` as on the embedded engine: a user function
    (``file.py:fn``, named by its own name) gets what TRL would give it on the user's own dataset: ``prompts`` as
    the records give them (not the rendered text TRL sampled from; ``dataset_rows``), ``completions`` shaped by
    them (chat messages for a conversational prompt), TRL's ``completion_ids``, ``trainer_state``, ``log_extra``
    and ``log_metric``, and the dataset's columns; a dict's other keys are logged with ``log_metric`` as
    ``<name>/<key>``."""
    rl = cfg.rl_config
    names, weights = [str(v) for v in rl.verifier_function], [float(w) for w in rl.verifier_weight]
    funcs: list[Callable[..., list[float | None]]] = []
    for name in names:
        user = rewards.load_user_reward(name) if rewards.is_user_ref(name) else None

        def func(
            prompts: list[Any], completions: list[Any], _name: str = name, _user: Any = user, **columns: Any
        ) -> list[float | None]:
            texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]  # conversational: messages
            labels = [str(x) for x in columns.pop(LABEL_COLUMN)]
            given = [json.loads(p) for p in columns.pop(PROMPT_COLUMN)]
            if _user is None:
                scores, _ = rewards.score(texts, labels, [_name], [1.0])
                return list[float | None](scores)
            context = {k: columns.pop(k) for k in ("trainer_state", "log_extra", "log_metric") if k in columns}
            ids = columns.pop("completion_ids", None)
            rows = [{k: v[i] for k, v in columns.items()} for i in range(len(texts))]
            values, metrics = _user.score(given, texts, labels, rows, ids, **context)
            log_metric = context.get("log_metric")
            for key, per in metrics.items():
                kept = [v for v in per if v == v]  # NaN: the sample's dict had no such key
                if log_metric is not None and kept:
                    log_metric(f"user_reward/{key}", sum(kept) / len(kept))  # callback.py: <name>/<key>
            return values

        func.__name__ = f"verifier_{user.name if user is not None else name}"
        funcs.append(func)
    return funcs, weights
