"""Checkpoints: one folder per saved iteration, written atomically, Megatron-style bookkeeping.

Layout of ``actor_config.save``::

    latest_checkpointed_iteration.txt      the newest complete iteration (written last)
    iter_0000010/
        model.safetensors  config.json  tokenizer.json  tokenizer_config.json   (a valid HF Qwen2 folder)
        reference.safetensors   the frozen KL reference (so a resumed run keeps the original one)
        optim.pt                AdamW state (absent with no_save_optim)
        rng.pt                  python / numpy / torch / sampling-generator states (absent with no_save_rng)
        trainer_state.json      iteration, consumed prompts, optimizer steps, KL coefficient

A LoRA run (``lora_target_modules``, see ``lora.py``) writes its weights with ``lora.save_lora`` instead:
``adapter/`` (peft's adapter folder) and ``lora.json`` always; ``model.safetensors`` (merged) and
``reference.safetensors`` (the base) unless ``lora_ckpt_filter``. ``optim.pt`` then holds the adapters' state.

A checkpoint is first written to a hidden ``.tmp-iter_...`` folder next to its final place and renamed when
complete, and the ``latest`` file is replaced after that, so a crash (even SIGKILL) at any moment leaves
either the previous checkpoint or the new one, never half of one.
"""

from __future__ import annotations

import json
import os
import random
import shutil
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from grpo._fs import CHECKPOINT_TRACKER, atomic_write_text, checkpoint_iteration
from grpo.engine import lora as lora_mod
from grpo.engine.hf_checkpoint import is_hf_folder, load_weights, save_weights
from grpo.engine.model import Qwen2
from grpo.engine.tokenizer import Tokenizer
from grpo.errors import UserError


@dataclass
class TrainerState:
    iteration: int = 0  # iterations completed
    consumed_prompts: int = 0  # position in the data order
    optimizer_steps: int = 0  # position in the lr schedule
    kl_coef: float = 0.0


def iter_dir(root: Path, iteration: int) -> Path:
    return Path(root) / f"iter_{iteration:07d}"


def rng_state(generator: torch.Generator) -> dict:
    state = {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
        "generator": generator.get_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict, generator: torch.Generator) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    generator.set_state(state["generator"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def save_checkpoint(
    root: Path,
    state: TrainerState,
    policy: Qwen2,
    reference: Qwen2 | None,  # None with write_weights
    tokenizer: Tokenizer,
    optimizer: torch.optim.Optimizer,
    generator: torch.Generator,
    save_optim: bool = True,
    save_rng: bool = True,
    keep: int | None = None,
    write_weights: Callable[[Path], None] | None = None,
) -> Path:
    """Write iteration ``state.iteration`` under ``root``; returns its folder. With ``keep``, only the
    newest ``keep`` iteration folders stay (older ones are removed once the new one is complete).
    ``write_weights(folder)`` replaces the policy and reference files (a LoRA run's ``lora.save_lora``)."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    final = iter_dir(root, state.iteration)
    tmp = root / f".tmp-{final.name}-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    try:
        if write_weights is not None:
            write_weights(tmp)
        else:
            assert reference is not None
            save_weights(policy, tmp, eos_token_id=tokenizer.eos_id, pad_token_id=tokenizer.pad_id)
            save_weights(reference, tmp, filename="reference.safetensors", write_config=False)
        tokenizer.save(tmp)
        if save_optim:
            torch.save(optimizer.state_dict(), tmp / "optim.pt")
        if save_rng:
            torch.save(rng_state(generator), tmp / "rng.pt")
        (tmp / "trainer_state.json").write_text(json.dumps(asdict(state), indent=2))
        if final.exists():  # a rerun of the same iteration: the new one replaces it
            shutil.rmtree(final)
        os.replace(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    atomic_write_text(root / CHECKPOINT_TRACKER, str(state.iteration))
    if keep is not None:
        for old in sorted(root.glob("iter_*"), key=lambda p: p.name)[:-keep]:
            if old != final:
                shutil.rmtree(old, ignore_errors=True)
    return final


def find_checkpoint(path: Path) -> Path | None:
    """The iteration folder ``path`` designates: a save root (its latest), an iteration folder, or None."""
    path = Path(path)
    tracker = path / CHECKPOINT_TRACKER
    if tracker.is_file():
        iteration = checkpoint_iteration(path)
        folder = iter_dir(path, iteration) if iteration is not None else None
        if folder is None or not (folder / "trainer_state.json").is_file():
            text = tracker.read_text().strip()
            raise UserError(f"{tracker}: actor_config.load: names iteration {text!r}, which is not saved there")
        return folder
    if (path / "trainer_state.json").is_file():
        return path
    return None


def has_checkpoint(path: Path) -> bool:
    return Path(path).is_dir() and find_checkpoint(path) is not None


@dataclass
class Loaded:
    """What ``load_checkpoint`` read; the caller applies the parts it wants."""

    folder: Path
    state: TrainerState | None  # None for a plain HF folder (weights only)
    has_reference: bool
    optim_file: Path | None
    rng_file: Path | None
    lora: dict | None = None  # lora.json of a LoRA run's checkpoint


def describe_load(path: Path) -> Loaded:
    """Classify ``actor_config.load``: an engine checkpoint (root or iteration folder) or a HF folder."""
    path = Path(path).expanduser()
    if not path.exists():
        raise UserError(f"{path}: actor_config.load: no such checkpoint folder")
    if not path.is_dir():
        raise UserError(f"{path}: actor_config.load: not a folder")
    folder = find_checkpoint(path)
    if folder is not None:
        state = TrainerState(**json.loads((folder / "trainer_state.json").read_text()))
        optim = folder / "optim.pt"
        rng = folder / "rng.pt"
        return Loaded(
            folder,
            state,
            (folder / "reference.safetensors").is_file(),
            optim if optim.is_file() else None,
            rng if rng.is_file() else None,
            lora_mod.read_meta(folder),
        )
    if is_hf_folder(path):
        return Loaded(path, None, False, None, None)
    raise UserError(
        f"{path}: actor_config.load: neither a grpo-sweep checkpoint ({CHECKPOINT_TRACKER} or trainer_state.json) "
        f"nor a Hugging Face folder (config.json + *.safetensors)"
    )


def load_reference(model: Qwen2, loaded: Loaded) -> None:
    load_weights(model, loaded.folder, "reference.safetensors")


def load_optimizer(optimizer: torch.optim.Optimizer, loaded: Loaded) -> None:
    if loaded.optim_file is None:
        raise UserError(
            f"{loaded.folder}: actor_config.no_load_optim: the checkpoint has no optimizer state "
            f"(saved with no_save_optim); set actor_config.no_load_optim=true"
        )
    optimizer.load_state_dict(torch.load(loaded.optim_file, weights_only=False))


def load_rng(generator: torch.Generator, loaded: Loaded) -> None:
    if loaded.rng_file is None:
        raise UserError(
            f"{loaded.folder}: actor_config.no_load_rng: the checkpoint has no RNG state "
            f"(saved with no_save_rng); set actor_config.no_load_rng=true"
        )
    set_rng_state(torch.load(loaded.rng_file, weights_only=False), generator)
