"""``grpo-sweep init NAME --backend B [--model DIR] [--data FILE] [--eval-data FILE] [--reward FILE:FUNCTION]``.

Writes ``NAME.yaml``: a sweep spec on a shipped base (``grpo_trainer_tiny_cpu`` for the built-in tiny model or a
model folder small enough for a CPU, ``grpo_trainer_gpu`` for a larger folder, ``grpo_trainer_qwen25_7b_A3`` for
MindSpeed-RL on NPUs) that searches the knobs GRPO users search first (learning rate, KL coefficient, clip ratio,
samples per prompt, temperature) over ranges that fit the backend and the model's size. Every key carries a
comment with its name in the user's engine, read from the backend's key table (``backends/*/coverage.py``);
MindSpeed-RL's names are the project's own. The spec is loaded by ``load_spec`` before it is written (a temporary
file beside it, renamed into place), so what ``init`` writes validates as written; an existing file is never
overwritten.

    grpo-sweep init demo --backend trl --model models/qwen --data data/train.jsonl --reward rewards.py:score
    grpo-sweep demo.yaml
"""

from __future__ import annotations

import argparse
import json
import os
from dataclasses import dataclass
from pathlib import Path

from grpo.config.hf_model import read_model_folder
from grpo.errors import UserError

BACKENDS = ("embedded", "trl", "verl", "mindspeed")
CPU_PARAMS = 50_000_000  # a model up to this size trains in minutes on a CPU: the small CPU sweep
LR_RANGES = (  # (largest parameter count, learning-rate range): full fine-tuning of a pretrained model
    (CPU_PARAMS, (1e-5, 3e-4)),
    (2_000_000_000, (3e-7, 1e-5)),
    (10_000_000_000, (1e-7, 3e-6)),
    (float("inf"), (5e-8, 1e-6)),
)
# The small CPU sweep: 8 prompts per iteration, 6 iterations, evaluated every 2 (minutes on a 2-core CPU).
SMALL_RUN = ("megatron_training.train_iters=6", "megatron_training.save_interval=3",
             "megatron_training.global_batch_size=8", "rl_config.mini_batch_size=4", "rl_config.epochs=1",
             "actor_config.micro_batch_size=16", "engine.eval_every=2", "engine.device=cpu")  # fmt: skip
# Names where the key table words how a key is used rather than what the engine calls it.
NATIVE_NAMES = {
    "trl": {
        "actor_config.load": "GRPOTrainer(model=...)",
        "megatron_training.tokenizer_name_or_path": "GRPOTrainer(processing_class=...)",
        "megatron_training.data_path": "GRPOTrainer(train_dataset=...)",
        "engine.eval_data_path": "GRPOTrainer(eval_dataset=...)",
        "rl_config.verifier_function": "GRPOTrainer(reward_funcs=...)",
        "engine.task": "train_dataset (dataset: your file)",
    },
    "verl": {
        "engine.eval_data_path": "data.val_files",
        "rl_config.verifier_function": "reward.custom_reward_function.path / name",
        "engine.task": "data.train_files (dataset: your file)",
    },
}
# A config key -> its key-table name (grpo/engine/coverage.py names the Megatron sections `megatron`).
_TABLE_SECTIONS = {"megatron_training": "megatron", "actor_config": "megatron"}


@dataclass(frozen=True)
class Choices:
    """What ``init`` was asked for, checked."""

    name: str
    dest: Path
    backend: str
    model: str | None
    params: int | None  # the model folder's parameter count (None: the built-in tiny model)
    max_positions: int | None  # the model folder's max_position_embeddings
    data: str | None
    eval_data: str | None
    reward: str | None  # FILE:FUNCTION, relative to the spec's folder


def cmd_init(args: argparse.Namespace) -> int:
    choices = _check(args)
    text = spec_text(choices)
    _write_checked(choices.dest, text)
    print(f"wrote {choices.dest} (backend {choices.backend}); next: grpo-sweep validate {choices.dest}")
    return 0


def _check(args: argparse.Namespace) -> Choices:
    from grpo.sweep.spec.study_models import MAX_STUDY_NAME, STUDY_NAME

    dest = Path(args.name if args.name.endswith((".yaml", ".yml")) else f"{args.name}.yaml")
    name = dest.stem
    if not STUDY_NAME.fullmatch(name) or len(name) > MAX_STUDY_NAME:
        raise UserError(f"grpo-sweep init: NAME: study names use letters, digits, '-' and '_' only (got {name!r})")
    if dest.exists():
        raise UserError(f"{dest}: grpo-sweep init: the file exists; init never overwrites (pick another NAME)")
    if not dest.parent.is_dir():
        raise UserError(f"{dest.parent}: grpo-sweep init: NAME: no such folder")
    backend = args.backend
    if backend == "mindspeed" and args.reward:
        raise UserError("grpo-sweep init: --reward: MindSpeed-RL has no reward hook (backend mindspeed scores with "
                        "its own verifiers); use backend embedded, trl or verl")  # fmt: skip
    if backend == "mindspeed" and args.eval_data:
        raise UserError("grpo-sweep init: --eval-data: backend mindspeed runs no held-out evaluation")
    params = max_positions = None
    if args.model:
        folder = Path(args.model).expanduser()
        if not (folder / "config.json").is_file():
            raise UserError(f"{folder}: grpo-sweep init: --model: not a Hugging Face model folder (no config.json)")
        key = "megatron_training.tokenizer_name_or_path" if backend == "mindspeed" else "actor_config.load"
        hf = read_model_folder(folder, key, "grpo-sweep init --model").config
        params, max_positions = parameter_count(hf), hf.get("max_position_embeddings")
    for flag, value in (("--data", args.data), ("--eval-data", args.eval_data)):
        # MindSpeed-RL's data is a Megatron prefix (PREFIX_packed_*.bin), read on its nodes: not checked here.
        if value and backend != "mindspeed" and not Path(value).expanduser().exists():
            raise UserError(f"{value}: grpo-sweep init: {flag}: no such file")
    reward = None
    if args.reward:
        file, sep, function = args.reward.rpartition(":")
        if not sep or not file.endswith(".py") or not function.isidentifier():
            raise UserError(f"grpo-sweep init: --reward: {args.reward!r} is not FILE.py:FUNCTION")
        if not Path(file).expanduser().is_file():
            raise UserError(f"{file}: grpo-sweep init: --reward: no such file")
        # The spec names a reward file relative to its own folder.
        reward = f"{os.path.relpath(Path(file).expanduser().resolve(), dest.parent.resolve())}:{function}"
    if backend == "verl" and not args.model:
        raise UserError("grpo-sweep init: --model: backend verl needs a model folder (verl has no built-in model)")
    return Choices(name, dest, backend, args.model, params, max_positions, args.data, args.eval_data, reward)


def parameter_count(hf: dict) -> int:
    """About how many parameters config.json describes (embeddings, attention with its KV heads, gated MLP)."""
    hidden, layers, vocab = hf["hidden_size"], hf["num_hidden_layers"], hf["vocab_size"]
    heads = hf["num_attention_heads"]
    head_dim = hf.get("head_dim") or hidden // heads
    kv = (hf.get("num_key_value_heads") or heads) * head_dim
    per_layer = 2 * hidden * heads * head_dim + 2 * hidden * kv + 3 * hidden * hf["intermediate_size"]
    return layers * per_layer + vocab * hidden * (1 if hf.get("tie_word_embeddings", True) else 2)


def native_name(backend: str, key: str) -> str:
    """What ``key`` is called in the user's engine: the backend's key table, MindSpeed-RL's name otherwise."""
    if backend in ("embedded", "mindspeed"):
        return f"MindSpeed-RL: {key}"
    named = NATIVE_NAMES[backend].get(key)
    if named is None:
        if backend == "trl":
            from grpo.sweep.backends.trl.coverage import APPLIED
        else:
            from grpo.sweep.backends.verl.coverage import APPLIED
        section, _, rest = key.partition(".")
        named = APPLIED.get(f"{_TABLE_SECTIONS.get(section, section)}.{rest}")
    if named is None:
        return f"{'TRL' if backend == 'trl' else 'verl'}: no counterpart (grpo-sweep's own)"
    for cut in (" (", " with ", ": ", " = "):  # the name, without the table's explanation
        named = named.split(cut)[0]
    return f"{'TRL' if backend == 'trl' else 'verl'}: {named}"


def _sized(c: Choices) -> tuple[str, bool]:
    """(base config, whether the run is the small CPU sweep)."""
    if c.backend == "mindspeed":
        return "grpo_trainer_qwen25_7b_A3", False
    small = c.backend in ("embedded", "trl") and (c.params is None or c.params <= CPU_PARAMS)
    return ("grpo_trainer_tiny_cpu" if small else "grpo_trainer_gpu"), small


def _lr_range(params: int | None) -> tuple[float, float]:
    return next(r for top, r in LR_RANGES if (params or 0) <= top)


def _overrides(c: Choices, small: bool) -> list[tuple[str, str]]:
    """(override, the key it sets) in the order the spec lists them."""
    out: list[tuple[str, str]] = []
    if c.model:
        if c.backend in ("embedded", "trl"):
            out.append((f"actor_config.load={c.model}", "actor_config.load"))
        out.append((f"megatron_training.tokenizer_name_or_path={c.model}", "megatron_training.tokenizer_name_or_path"))
    if c.data:
        if c.backend != "mindspeed":
            out.append(("engine.task=dataset", "engine.task"))
        out.append((f"megatron_training.data_path={c.data}", "megatron_training.data_path"))
        if c.eval_data:
            out.append((f"engine.eval_data_path={c.eval_data}", "engine.eval_data_path"))
        elif c.backend != "mindspeed":  # held-out rows from the training file
            out.append(("megatron_training.split='90,10,0'", "megatron_training.split"))
    if c.reward:
        out.append((f"rl_config.verifier_function=['{c.reward}']", "rl_config.verifier_function"))
        out.append(("rl_config.verifier_weight=[1.0]", "rl_config.verifier_weight"))
    texts: list[str] = []
    if small:
        texts += SMALL_RUN
    if c.backend == "trl":  # TRL always shuffles a generation before splitting it into mini batches
        texts.append("rl_config.shuffle_mini_batch=true")
    if c.backend == "mindspeed" and c.params is not None and c.params < 2_000_000_000:
        texts.append("layout=tp1_pp1")  # a small model on one NPU (the base splits a 7B model four ways)
    texts += _lengths(c, small)
    return out + [(text, text.partition("=")[0]) for text in texts]


def _lengths(c: Choices, small: bool) -> list[str]:
    """Sequence lengths that fit the model: room for real prompts on the tiny CPU base (your data, or a tokenizer
    of its own; the base's own are for its generated task), never beyond the folder's max_position_embeddings."""
    if c.model is None and c.data is None:
        return []
    base = 192 if small else 4096 if c.backend == "mindspeed" else 1536
    total = min(base, c.max_positions or base)
    if not small and total == base:
        return []
    prompt = 128 if small and total == base else total // 3
    return [
        f"rl_config.max_prompt_length={prompt}",
        f"generate_config.max_model_len={total}",
        f"megatron_training.seq_length={total}",
        f"generate_config.sampling_config.max_tokens={min(total - prompt, 48 if small else total)}",
    ]


def _search(c: Choices, small: bool) -> list[tuple[str, str]]:
    low, high = _lr_range(c.params)
    samples = "choice(4, 8)" if small else "choice(4, 8, 16)"
    temperature = "interval(0.6, 1.0)" if small else "interval(0.7, 1.2)"
    return [
        ("actor_config.lr", f"tag(log, interval({low:g}, {high:g}))"),
        ("rl_config.init_kl_coef", "choice(0.0, 0.001, 0.01)"),
        ("rl_config.clip_ratio", "choice(0.1, 0.2, 0.28)"),
        ("rl_config.n_samples_per_prompt", samples),
        ("generate_config.sampling_config.temperature", temperature),
    ]


def _quote(text: str) -> str:
    return json.dumps(text)  # a YAML double-quoted scalar


def spec_text(c: Choices) -> str:
    """The spec, every key commented with its name in the user's engine."""
    base, small = _sized(c)
    size = "the built-in tiny model" if c.params is None else f"about {c.params / 1e6:,.3g}M parameters"
    flags = (("--model", c.model), ("--data", c.data), ("--eval-data", c.eval_data), ("--reward", c.reward))
    command = " ".join(["grpo-sweep init", c.name, "--backend", c.backend, *(f"{f} {v}" for f, v in flags if v)])
    lines = [
        f"# Written by `{command}` ({size}).",
        f"#   grpo-sweep validate {c.dest}     # what it resolves to, checked by the {c.backend} backend",
        f"#   grpo-sweep {c.dest}              # run it; the report lands in reports/{c.name}/",
        f"# Keys: docs/backend_{c.backend}.md; your own model, data and reward: docs/your_run.md.",
        f"study: {c.name}",
        f"base: {base}",
        f"backend: {c.backend}",
        "",
    ]
    overrides = _overrides(c, small)
    if overrides:
        lines.append("overrides:")
        lines += [f"  - {_quote(text)}  # {native_name(c.backend, key)}" for text, key in overrides]
        lines.append("")
    lines.append("search:")
    lines += [f"  {key}: {dist}  # {native_name(c.backend, key)}" for key, dist in _search(c, small)]
    evaluated = c.backend != "mindspeed"
    metric = "eval/acc" if evaluated else "grpo/score/mean"
    lines += [
        "",
        "objective:",
        f"  metric: {metric}  # {'held-out accuracy' if evaluated else 'mean reward of the rollouts'}",
        "  direction: maximize",
        "  reduce: mean_last_k",
        "  k: 2",
        "",
        "sampler:",
        "  name: tpe",
        "  seed: 42",
        "  options:",
        f"    n_startup_trials: {2 if small else 5}",
        "",
        "pruner:",
        *(["  name: none"] if small else ["  name: median", "  warmup_steps: 20"]),
        "",
        f"trials: {4 if small else 16}",
        f"concurrency: {2 if small else 1}",
        "seeds: 1",
        "retries: 1",
        f"timeout_per_trial: {900 if small else 7200}",
        "",
        "cluster:",
        "  address: local" + ("" if small else "  # or auto: join a running Ray cluster (ray start --head)"),
        *(["  num_cpus: 2"] if small else []),
    ]
    if c.backend == "mindspeed":
        lines += [
            "",
            "mindspeed:  # your MindSpeed-RL checkout and its Python (Python 3.10, torch_npu, vLLM-Ascend)",
            "  path: ~/MindSpeed-RL",
            "  python: ~/miniconda3/envs/mindspeed-rl/bin/python",
            "  entry: cli/train_grpo.py",
            "  checkpoints:  # MindSpeed-LLM's converter writes one Megatron checkpoint per TP/PP split",
            "    pattern: ./ckpt/model-tp{tp}-pp{pp}",
        ]
    return "\n".join(lines) + "\n"


def _write_checked(dest: Path, text: str) -> None:
    """Load the spec from a temporary file beside ``dest`` (relative paths resolve the same), then rename it into
    place without replacing a file that appeared meanwhile; nothing is left behind when it does not validate."""
    from grpo.sweep.spec.load import load_spec

    tmp = dest.with_name(f".{dest.stem}.init-{os.getpid()}.yaml")
    tmp.write_text(text)
    try:
        load_spec(tmp)
        os.link(tmp, dest)  # fails when dest exists: never overwrite
    except UserError as err:  # name the file the user will have, not the temporary one
        lines = [line.replace(str(tmp), str(dest)) for line in err.problems]
        raise UserError(lines[0], problems=lines) from None
    except FileExistsError:
        raise UserError(
            f"{dest}: grpo-sweep init: the file exists; init never overwrites (pick another NAME)"
        ) from None
    finally:
        tmp.unlink(missing_ok=True)
