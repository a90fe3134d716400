"""Which model a verl trial trains: ``actor_rollout_ref.model.path`` (and ``tokenizer_path``).

A Hugging Face folder in ``actor_config.load`` (a ``config.json``, no ``latest_checkpointed_iteration.txt``: not a
run to resume) is the model, as on the other backends and as ``grpo.config.hf_model`` reads the architecture keys
from it; ``tokenizer_name_or_path`` is the model only when ``load`` names no such folder (or the checkpoint a
retry resumes, whose weights verl takes from the checkpoint itself).

A retry or pbt branch names its parent's save folder in ``load``: verl takes the weights from the checkpoint but
still builds the model (config.json, tokenizer) from ``model.path``, so each run records its model in its save
folder (``MODEL_FILE``, beside ``_resume.OPTIM_FILE``) and a resume trains the model its run started from.

Two different folders: verl 0.9.1's ``HFModelConfig`` has ``tokenizer_path`` (its trainer, dataset and reward
tokenizer), but its vLLM rollout serves ``model.path`` with that folder's own tokenizer (``vllm serve <path>``,
no ``--tokenizer``: verl-0.9.1:verl/workers/rollout/vllm_rollout/vllm_async_server.py), so the rollout would stop
on one tokenizer's end token and train on the other's ids. verl honours the pair only when the load folder holds
the same tokenizer files as the tokenizer folder; any other pair is refused in one line.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from grpo._fs import checkpoint_iteration
from grpo.config import GRPOConfig

MODEL = "actor_rollout_ref.model"
MODEL_FILE = "grpo_sweep_model.json"  # in the save folder: the model.path / tokenizer_path its run trains
# The files transformers' AutoTokenizer reads from a folder (the fast and the slow tokenizers' own).
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab.json",
    "merges.txt",
    "tokenizer.model",
    "chat_template.jinja",
)


@dataclass(frozen=True)
class VerlModel:
    """verl's model section of one trial: ``path`` (None: no model named), ``tokenizer_path`` (None: path's own),
    and ``problem``, the one line when the config names a pair verl cannot honour."""

    path: str | None = None
    tokenizer_path: str | None = None
    problem: str | None = None

    def overrides(self) -> list[str]:
        out = [f"{MODEL}.path={self.path}"] if self.path else []
        return out + ([f"{MODEL}.tokenizer_path={self.tokenizer_path}"] if self.tokenizer_path else [])


def hf_load_folder(cfg: GRPOConfig) -> Path | None:
    """``actor_config.load`` when it is a Hugging Face model folder here (not a checkpoint a run resumes)."""
    load = cfg.actor_config.load
    folder = Path(str(load)).expanduser() if load else None
    if folder is None or not (folder / "config.json").is_file() or checkpoint_iteration(folder) is not None:
        return None
    return folder


def _same_tokenizer(a: Path, b: Path) -> bool:
    """Both folders hold the same tokenizer files, byte for byte (and at least one)."""
    files = [name for name in TOKENIZER_FILES if (a / name).is_file() or (b / name).is_file()]
    if not files or not b.is_dir():
        return False
    return all((a / n).is_file() and (b / n).is_file() and (a / n).read_bytes() == (b / n).read_bytes() for n in files)


def record(save_dir: Path, model: VerlModel) -> None:
    save_dir.mkdir(parents=True, exist_ok=True)
    (save_dir / MODEL_FILE).write_text(json.dumps({"path": model.path, "tokenizer_path": model.tokenizer_path}))


def _recorded(cfg: GRPOConfig) -> VerlModel | None:
    """The model a resumed run (``load``: a save folder with a checkpoint, not ``finetune``) started from."""
    load, actor = cfg.actor_config.load, cfg.actor_config
    folder = Path(str(load)).expanduser() if load else None
    if folder is None or actor.finetune or checkpoint_iteration(folder) is None:
        return None
    try:
        saved = json.loads((folder / MODEL_FILE).read_text())
        return VerlModel(**{k: saved.get(k) for k in asdict(VerlModel()) if k != "problem"})
    except (OSError, ValueError, AttributeError, TypeError):
        return None  # a run saved before the record: the config's tokenizer folder, as then


def verl_model(cfg: GRPOConfig) -> VerlModel:
    """The trial's ``model.path`` / ``tokenizer_path`` (see the module docstring)."""
    recorded = _recorded(cfg)
    if recorded is not None:
        return recorded
    tokenizer = cfg.megatron_training.tokenizer_name_or_path
    named = Path(str(tokenizer)).expanduser() if tokenizer else None
    load = hf_load_folder(cfg)
    if load is None:
        return VerlModel(str(named) if named else None)
    if named is None or named.resolve() == load.resolve() or _same_tokenizer(load, named):
        return VerlModel(str(load), None if named is None or named.resolve() == load.resolve() else str(named))
    return VerlModel(
        str(load),
        problem=(
            f"{cfg._source}: megatron_training.tokenizer_name_or_path: {tokenizer} is another tokenizer than "
            f"actor_config.load's model folder {cfg.actor_config.load}: verl's vLLM rollout serves "
            f"{MODEL}.path with that folder's own tokenizer (its tokenizer_path reaches only the trainer); put the "
            "tokenizer in the model folder and set tokenizer_name_or_path to it, or leave it unset"
        ),
    )
