"""The warm start: a short supervised stage on generated demonstrations, cached on disk.

A randomly initialised tiny model never produces a parsable answer, so GRPO would see all-equal rewards
and learn nothing. Before RL the engine therefore fine-tunes the fresh model for ``engine.warm_start_steps``
AdamW steps on the task's demonstrations (prompt -> ``<think>..</think><answer>\\boxed{..}</answer>``,
loss on the response tokens only). That teaches the format and part of the arithmetic: the base policy
is right sometimes, wrong often, which is what GRPO needs.

The result is cached at ``<cache_dir>/warm_start/<key>.safetensors``, the key hashing everything that
determines it (architecture, tokenizer, task, demonstrations, seed, steps, init std, a format version), so
trials of a sweep share one warm start. The shipped tiny config's warm start is package data
(``grpo/_data/warm_start/<key>.safetensors``, its sha256 in ``SHA256SUMS``; ``tools/ship_warm_start.py``
rebuilds it): 250 float32 AdamW steps do not give the same bits on two CPUs (kernels and their summation
order differ), and the quickstart's figures moved with the machine (base policy 0.656 held-out greedy on one,
0.719 on another), so every machine starts the shipped configs from the same bytes. Two processes that
start it at once take turns on a lock file (``filelock.FileLock``); the file itself is written atomically
(``grpo._fs.atomic_write``), so a reader never sees half a file.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Callable
from pathlib import Path

import torch
from filelock import FileLock

from grpo._fs import atomic_write
from grpo.engine.data import ArithmeticTask, Example
from grpo.engine.hf_checkpoint import load_weights, save_weights
from grpo.engine.model import ModelArgs, Qwen2
from grpo.engine.prompt import build_prompt
from grpo.engine.tokenizer import Tokenizer

FORMAT_VERSION = 1
BATCH_SIZE = 64
PEAK_LR = 3e-3
SHIPPED = Path(__file__).resolve().parent.parent / "_data" / "warm_start"
SUMS = "SHA256SUMS"


def file_sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def shipped_sums(folder: Path = SHIPPED) -> dict[str, str]:
    """``{file name: sha256}`` of the shipped warm starts (``sha256sum``'s format: ``HASH  NAME`` per line)."""
    sums = folder / SUMS
    if not sums.is_file():
        return {}
    pairs = (line.split() for line in sums.read_text().splitlines() if line.strip())
    return {name.lstrip("*"): digest for digest, name in pairs}


def shipped_file(key: str, folder: Path = SHIPPED) -> Path | None:
    """The shipped warm start for ``key``, its bytes checked against ``SHA256SUMS``; None when none is shipped.
    A file whose hash differs is a broken install, not a reason to train another policy silently."""
    name = f"{key}.safetensors"
    digest = shipped_sums(folder).get(name)
    if digest is None:
        return None
    file = folder / name
    found = file_sha256(file) if file.is_file() else "missing"
    if found != digest:
        raise RuntimeError(f"{file}: sha256 {found} is not the {digest} of {folder / SUMS}; reinstall grpo-sweep")
    return file


def default_cache_dir(configured: str | None) -> Path:
    """engine.cache_dir, else $GRPO_CACHE_DIR, else ~/.cache/grpo-sweep."""
    if configured:
        return Path(configured).expanduser()
    return Path(os.environ.get("GRPO_CACHE_DIR") or "~/.cache/grpo-sweep").expanduser()


def cache_key(
    args: ModelArgs, tokenizer: Tokenizer, task: str, demos: int, seed: int, steps: int, init_std: float
) -> str:
    blob = json.dumps(
        {
            "v": FORMAT_VERSION,
            "arch": args.to_dict(),
            "tokenizer": tokenizer.fingerprint(),
            "task": task,
            "demos": demos,
            "seed": seed,
            "steps": steps,
            "init_std": init_std,
            "batch": BATCH_SIZE,
            "lr": PEAK_LR,
        },
        sort_keys=True,
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:20]


def _demo_batch(
    tokenizer: Tokenizer, task: ArithmeticTask, examples: list[Example]
) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded prompt+demonstration+eos ids, and a mask that is 1 on the targets to learn."""
    seqs, masks = [], []
    for e in examples:
        prompt = tokenizer.encode(build_prompt(tokenizer, e))
        answer = [*tokenizer.encode(task.demonstration(e)), tokenizer.eos_id]
        seqs.append(prompt + answer)
        masks.append([0] * len(prompt) + [1] * len(answer))
    width = max(map(len, seqs))
    ids = torch.full((len(seqs), width), tokenizer.pad_id, dtype=torch.long)
    loss_mask = torch.zeros((len(seqs), width))
    for i, (s, m) in enumerate(zip(seqs, masks, strict=True)):
        ids[i, : len(s)] = torch.tensor(s)
        loss_mask[i, : len(m)] = torch.tensor(m, dtype=torch.float)
    return ids, loss_mask


def supervised_warm_start(
    model: Qwen2,
    tokenizer: Tokenizer,
    task: ArithmeticTask,
    examples: list[Example],
    steps: int,
    seed: int,
    log: Callable[[str], object] | None = None,
) -> None:
    """``steps`` AdamW steps (batch 64, warmup then cosine) of next-token loss on the demonstrations."""
    ids, loss_mask = _demo_batch(tokenizer, task, examples)
    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=PEAK_LR, betas=(0.9, 0.98), weight_decay=0.0)
    warmup = max(1, steps // 10)
    model.train()
    for step in range(steps):
        lr = PEAK_LR * min((step + 1) / warmup, 0.5 * (1 + math.cos(math.pi * step / steps)) * 0.9 + 0.1)
        for group in opt.param_groups:
            group["lr"] = lr
        rows = torch.randint(0, ids.shape[0], (BATCH_SIZE,), generator=gen)
        batch, mask = ids[rows], loss_mask[rows]
        logits = model(batch[:, :-1])[..., : tokenizer.vocab_size]
        nll = torch.nn.functional.cross_entropy(
            logits.reshape(-1, logits.shape[-1]), batch[:, 1:].reshape(-1), reduction="none"
        ).view(mask[:, 1:].shape)
        loss = (nll * mask[:, 1:]).sum() / mask[:, 1:].sum()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if log and (step + 1) % max(1, steps // 5) == 0:
            log(f"warm start step {step + 1}/{steps}: loss {loss.item():.4f}")
    model.eval()


def warm_started_policy(
    args: ModelArgs,
    tokenizer: Tokenizer,
    task: ArithmeticTask,
    seed: int,
    steps: int,
    init_std: float,
    cache_dir: Path,
    log: Callable[[str], object] | None = None,
    use_shipped: bool = True,
) -> tuple[Qwen2, Path | None]:
    """The fresh tiny policy after its warm start on ``task.demonstrations(seed)`` (shipped, cached, or built
    now and cached), and its file."""
    with torch.random.fork_rng():  # leave the caller's global RNG untouched
        torch.manual_seed(seed)
        model = Qwen2(args, init_std=init_std)
    if steps == 0:
        return model.eval(), None
    examples = task.demonstrations(seed)
    key = cache_key(args, tokenizer, task.name, len(examples), seed, steps, init_std)
    if use_shipped and (shipped := shipped_file(key)) is not None:
        if log:
            log(f"warm start: shipped {shipped.name} (the same bytes on every machine)")
        load_weights(model, shipped.parent, shipped.name)
        return model.eval(), shipped
    folder = Path(cache_dir) / "warm_start"
    file = folder / f"{key}.safetensors"
    folder.mkdir(parents=True, exist_ok=True)
    with FileLock(folder / f"{key}.lock"):
        if file.is_file():
            if log:
                log(f"warm start: cached {file}")
            load_weights(model, folder, file.name)
            return model.eval(), file
        if log:
            log(f"warm start: {steps} supervised steps on {len(examples)} demonstrations -> {file}")
        with torch.random.fork_rng():
            supervised_warm_start(model, tokenizer, task, examples, steps, seed, log)
        atomic_write(file, lambda tmp: save_weights(model, tmp.parent, filename=tmp.name, write_config=False))
    return model.eval(), file
