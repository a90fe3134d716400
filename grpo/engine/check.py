"""What the embedded engine cannot run, known from the config alone (no torch, no files, no model).

``check_config(cfg)`` returns one line per reason, ``<cfg._source>: <key>: <why>``; an empty list means
the engine accepts the config. ``Run`` (trainer.py) calls it first, and the sweep's preflight calls it for
every sampled point, so a config the engine refuses fails before any trial runs. What depends on files
(``actor_config.load``, a dataset, a tokenizer folder) or on the machine (``engine.device``) is checked
when the run starts.

``own_run_checks(cfg, base_dir)`` is the exception, for ``validate`` and the sweep's preflight: it reads the
dataset and the held-out file (their format and first record) and imports and tries the user's reward functions
in a child process (``rewards/probe.py``).
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from grpo.config import GRPOConfig, ModelConfig
from grpo.config.hf_model import folder_model_type
from grpo.config.schedule import problems as schedule_problems
from grpo.engine.coverage import refusals
from grpo.engine.data import ArithmeticTask, Example
from grpo.engine.datasets import read_examples
from grpo.engine.datasets._files import dataset_files
from grpo.engine.lora import config_problems as lora_config_problems
from grpo.engine.prompt import build_prompt
from grpo.engine.rewards import VERIFIERS, is_user_ref
from grpo.engine.rewards.custom import anchored
from grpo.engine.rewards.probe import probe
from grpo.engine.tokenizer import build_task_tokenizer
from grpo.engine.variants import problems as variant_problems
from grpo.errors import UserError


@lru_cache(maxsize=1)
def _builtin_tokenizer_figures() -> tuple[int, int]:
    """(vocabulary size of the built-in tokenizer, token length of every arithmetic chat prompt)."""
    tokenizer = build_task_tokenizer()
    # Operands are always two digits, so every prompt of the generated task has the same length.
    prompt = tokenizer.encode(build_prompt(tokenizer, Example(f"{ArithmeticTask.low}+{ArithmeticTask.low}=?", "")))
    return tokenizer.vocab_size, len(prompt)


def _unbuilt_architecture(mc: ModelConfig) -> list[tuple[str, str]]:
    """(key, why) for each part of ``mc`` the engine's Qwen2 decoder does not build: it would otherwise train
    a different network than the config names without a word."""
    qwen2 = "the embedded engine builds Qwen2 decoders only (backend: mindspeed runs this model)"
    out: list[tuple[str, str]] = []
    if mc.num_experts:
        out.append(("num_experts", f"mixture of experts; {qwen2}"))
    if mc.multi_latent_attention:
        out.append(("multi_latent_attention", f"multi-head latent attention; {qwen2}"))
    if mc.qk_layernorm:
        out.append(("qk_layernorm", f"per-head query/key norms (Qwen3); {qwen2}"))
    if mc.kv_channels and mc.kv_channels * mc.num_attention_heads != mc.hidden_size:
        out.append(("kv_channels", f"{mc.kv_channels} x {mc.num_attention_heads} heads != hidden_size; {qwen2}"))
    for key, value, needed in (
        ("position_embedding_type", mc.position_embedding_type, "rope"),
        ("normalization", mc.normalization, "RMSNorm"),
        ("swiglu", mc.swiglu, True),
        ("disable_bias_linear", mc.disable_bias_linear, True),  # Qwen2: biases on q, k, v only
    ):
        if value != needed:
            out.append((key, f"{value} (Qwen2 needs {needed}); {qwen2}"))
    return out


def check_config(cfg: GRPOConfig) -> list[str]:
    """Every reason the embedded engine cannot run ``cfg``, one ``<source>: <key>: <why>`` line each."""
    source, rl, eng, gen = cfg._source, cfg.rl_config, cfg.engine, cfg.generate_config
    mt, actor = cfg.megatron_training, cfg.actor_config
    problems: list[str] = []
    if rl.adv_estimator != "group_norm":
        problems.append(
            f"{source}: rl_config.adv_estimator: {rl.adv_estimator} needs a critic model, which the embedded "
            f"engine does not have; use group_norm"
        )
    unscored = [
        name for name in rl.verifier_function if name not in VERIFIERS and not is_user_ref(name)
    ]  # the registry loads optional verifiers here, not at import; user functions are imported by own_run_checks
    if "math_verify_reward" in unscored:  # scored only where the optional math-verify package imports
        unscored.remove("math_verify_reward")
        problems.append(
            f"{source}: rl_config.verifier_function: math_verify_reward needs the math-verify package, which is not "
            f"installed here; install it (pip install math-verify) or drop math_verify_reward"
        )
    if unscored:
        problems.append(
            f"{source}: rl_config.verifier_function: the embedded engine does not score {', '.join(unscored)} "
            f"(it scores {', '.join(VERIFIERS)}); MindSpeed-RL does (backend: mindspeed)"
        )
    if eng.task != "dataset":
        problems += [
            f"{source}: engine.{key}: reads a dataset, but engine.task is {eng.task}; set engine.task=dataset"
            for key in ("eval_data_path", "data_fields")
            if getattr(eng, key) is not None
        ]
    if not rl.rule_reward:
        problems.append(
            f"{source}: rl_config.rule_reward: the embedded engine scores with rule rewards only; set rule_reward=true"
        )

    folder = folder_model_type(actor.load, mt.tokenizer_name_or_path)
    if folder is not None and folder[2] != "qwen2":  # Qwen2 and Qwen2.5 folders say qwen2
        problems.append(
            f"{source}: {folder[0]}: {folder[1]} is a {folder[2]} model; the embedded engine builds Qwen2/Qwen2.5 "
            f"only (backend: trl or verl runs any causal language model)"
        )
    arch_model = cfg.model.get(actor.model)
    if arch_model is not None:
        problems += [f"{source}: model.{actor.model}.{key}: {why}" for key, why in _unbuilt_architecture(arch_model)]
    # MindSpeed-RL's RoPE scaling keys (MegatronConfig: rope_scaling_type linear/yarn/llama3, rope_scaling_factor):
    # the engine's rotary embedding is unscaled, so a scaled model would silently train another network.
    scaling, factor = cfg.megatron_value("rope_scaling_type"), cfg.megatron_value("rope_scaling_factor")
    if scaling is not None or (factor is not None and float(factor) != 1.0):
        key = "rope_scaling_type" if scaling is not None else "rope_scaling_factor"
        problems.append(
            f"{source}: model.{actor.model}.{key}: RoPE scaling ({scaling or 'factor ' + str(factor)}) is not "
            f"applied by the embedded engine; remove it or use backend: mindspeed"
        )

    problems += lora_config_problems(cfg)  # LoRA through peft (lora.py): targets, rank, alpha, peft installed
    problems += variant_problems(cfg)  # dynamic sampling, overlong shaping, dropout (variants.py)

    # Keys of the coverage table the engine does not carry out (docs/keys.md), set to another value than the one
    # it does: the line names the key and the backend that applies it.
    problems += [
        f"{source}: {path}: {why}; the embedded engine does not apply it (backend: mindspeed does)"
        for path, why in refusals(cfg)
    ]
    if cfg.trl:  # coverage's trl row (own_check): backend trl's own keys
        problems.append(f"{source}: trl.{next(iter(cfg.trl))}: backend trl's own setting; the embedded engine has none")
    if cfg.verl:  # coverage's verl row (own_check): backend verl's own keys
        first = next(iter(cfg.verl))
        problems.append(f"{source}: verl.{first}: backend verl's own setting; the embedded engine has none")

    if eng.exit_interval and not actor.save:
        problems.append(
            f"{source}: engine.exit_interval: {eng.exit_interval} stops the run with a checkpoint to resume from, "
            f"but actor_config.save is not set; set actor_config.save"
        )
    problems += schedule_problems(cfg)  # again here: a section may have changed since the config was validated

    builtin = not mt.tokenizer_name_or_path and not actor.load  # else a tokenizer.json decides (checked at start)
    arithmetic = eng.task == "arithmetic"
    longest_prompt = rl.max_prompt_length  # prompts longer than that are dropped
    if builtin:
        vocab, prompt_tokens = _builtin_tokenizer_figures()
        arch = cfg.model.get(actor.model)  # None: the config rules already name the missing model
        if arch is not None and vocab > arch.padded_vocab_size:
            problems.append(
                f"{source}: model.{actor.model}.padded_vocab_size: the tokenizer has {vocab} tokens but the model "
                f"only {arch.padded_vocab_size} embedding rows (tokenizer and model do not match)"
            )
        if arithmetic and prompt_tokens > rl.max_prompt_length:
            problems.append(
                f"{source}: rl_config.max_prompt_length: every prompt of the arithmetic task is {prompt_tokens} "
                f"tokens, longer than {rl.max_prompt_length}"
            )
        elif arithmetic:
            longest_prompt = prompt_tokens
    if gen.max_model_len - longest_prompt < 1:
        problems.append(
            f"{source}: generate_config.max_model_len: {gen.max_model_len} leaves no room for a response after "
            f"prompts of {longest_prompt} tokens"
        )

    if arithmetic:
        left = ArithmeticTask.distinct_prompts() - ArithmeticTask.demo_pool
        if eng.task_size > left:
            problems.append(
                f"{source}: engine.task_size: at most {left} distinct arithmetic prompts are left after the "
                f"warm-start demonstrations (got {eng.task_size})"
            )
        elif eng.eval_every and eng.eval_size > left - eng.task_size:
            problems.append(
                f"{source}: engine.eval_size: at most {left - eng.task_size} distinct arithmetic prompts are left "
                f"after the warm-start demonstrations and engine.task_size={eng.task_size} (got {eng.eval_size})"
            )
    return problems


def own_run_checks(
    cfg: GRPOConfig, base_dir: Path | None = None, *, data_here: bool = True, source: str | None = None
) -> tuple[list[str], list[str]]:
    """(problems, notes) of a user's own data and reward functions: each dataset file's detected format and first
    example as notes; an unreadable record, built-in verifiers on unlabelled rows, or a user function that does
    not import or score as problems (one line each). ``base_dir`` anchors relative reward files (the spec's
    folder). ``data_here`` false: trials read the dataset where they launch, so one missing here is skipped (the
    backend's launch_warnings name it). ``source`` starts the lines (the sweep spec; default: the config's file)."""
    rl, eng, mt = cfg.rl_config, cfg.engine, cfg.megatron_training
    source = source or cfg._source
    problems: list[str] = []
    notes: list[str] = []
    examples: list[Example] = []
    if eng.task == "dataset":
        for key, path in (("megatron_training.data_path", mt.data_path), ("engine.eval_data_path", eng.eval_data_path)):
            if not path or not (data_here or _present(path, key)):
                continue
            try:
                read = read_examples(path, fields=eng.data_fields, key=key)
            except UserError as err:
                problems.append(str(err))
                continue
            first = read[0]
            notes.append(
                f"{key}: {path}: {len(read)} records, format {', '.join(sorted(set(read.formats)))}; first: prompt "
                f"{first.prompt[:60]!r}, label {first.label[:40]!r}"
            )
            builtin = [n for n in rl.verifier_function if not is_user_ref(n)]
            if builtin and all(not e.label for e in read):
                problems.append(
                    f"{source}: rl_config.verifier_function: {builtin[0]} scores against a label, but {path} has no "
                    f"label column; name it with engine.data_fields.label, or score with your own function only"
                )
            examples = examples or list(read)
    refs = [(i, name) for i, name in enumerate(rl.verifier_function) if is_user_ref(name)]
    if refs:
        found, lines = probe(
            [anchored(name, base_dir or Path.cwd()) for _, name in refs],
            [f"{source}: rl_config.verifier_function[{i}]" for i, _ in refs],
            examples,
        )
        problems += found
        notes += lines
    return problems, notes


def _present(path: str, key: str) -> bool:
    try:
        dataset_files(str(path), key)
    except UserError:
        return False
    return True
