"""Hugging Face-format Qwen2 folders: ``config.json`` + ``*.safetensors`` (+ ``tokenizer.json``), read and written.

A folder is a HF checkpoint when it holds a ``config.json`` and at least one ``*.safetensors`` file
(a sharded ``model.safetensors.index.json`` works too). The engine's own checkpoints write the same two
files, so every saved iteration is also a valid HF Qwen2 folder that ``transformers`` can open (a LoRA run's
holds the merged weights there, unless ``lora_ckpt_filter`` keeps only the adapters: see ``lora.py``).
Nothing is ever downloaded: the folder must be local.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from grpo.config.hf_model import rope_theta
from grpo.engine.model import ModelArgs, Qwen2
from grpo.errors import UserError

ARCH_FIELDS = (
    "num_layers",
    "hidden_size",
    "ffn_hidden_size",
    "num_attention_heads",
    "num_query_groups",
    "padded_vocab_size",
)


def is_hf_folder(path: Path) -> bool:
    path = Path(path)
    return (path / "config.json").is_file() and any(path.glob("*.safetensors"))


def read_model_args(folder: Path, key: str = "actor_config.load") -> ModelArgs:
    """The architecture a HF folder's config.json describes (bias presence is read from the weights)."""
    folder = Path(folder)
    cfg_path = folder / "config.json"
    try:
        hf = json.loads(cfg_path.read_text())
    except FileNotFoundError:
        raise UserError(f"{cfg_path}: {key}: no config.json in the checkpoint folder") from None
    except json.JSONDecodeError as err:
        raise UserError(f"{cfg_path}: {key}: config.json is not valid JSON ({err.msg}, line {err.lineno})") from None
    missing = [
        k
        for k in ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "vocab_size")
        if k not in hf
    ]
    if missing:
        raise UserError(f"{cfg_path}: {key}: config.json lacks {', '.join(missing)} (not a Qwen2 config)")
    scaling = hf.get("rope_scaling") or {}
    rope_type = scaling.get("rope_type") or scaling.get("type") or (hf.get("rope_parameters") or {}).get("rope_type")
    if rope_type not in (None, "default"):
        raise UserError(
            f"{cfg_path}: {key}: config.json rope_scaling is {rope_type!r}; the embedded engine applies no RoPE "
            f"scaling (use backend: mindspeed, or a checkpoint without rope_scaling)"
        )
    if hf.get("use_sliding_window"):
        raise UserError(
            f"{cfg_path}: {key}: config.json use_sliding_window is true; the embedded engine attends to the whole "
            f"sequence (set use_sliding_window false if the sequences fit the window)"
        )
    weights = _weight_names(folder)
    return ModelArgs(
        num_layers=hf["num_hidden_layers"],
        hidden_size=hf["hidden_size"],
        ffn_hidden_size=hf["intermediate_size"],
        num_attention_heads=hf["num_attention_heads"],
        num_query_groups=hf.get("num_key_value_heads") or hf["num_attention_heads"],
        padded_vocab_size=hf["vocab_size"],
        max_position_embeddings=hf.get("max_position_embeddings", 32768),
        rotary_base=rope_theta(hf) or 1_000_000.0,
        norm_epsilon=float(hf.get("rms_norm_eps", 1e-6)),
        add_qkv_bias="model.layers.0.self_attn.q_proj.bias" in weights,
        untie_embeddings_and_output_weights=not hf.get("tie_word_embeddings", False),
    )


def _shards(folder: Path) -> list[Path]:
    """The weight files of the model: the index's shards, else model.safetensors, else every other file."""
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        names = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        return [folder / n for n in names]
    if (folder / "model.safetensors").is_file():
        return [folder / "model.safetensors"]
    return sorted(p for p in folder.glob("*.safetensors") if p.name != "reference.safetensors")


def _weight_names(folder: Path) -> set[str]:
    from safetensors import safe_open

    names: set[str] = set()
    for shard in _shards(folder):
        with safe_open(str(shard), framework="pt") as f:
            names.update(f.keys())
    return names


def check_arch(found: ModelArgs, expected: ModelArgs, where: str, model_name: str) -> None:
    """The checkpoint must match the selected model yaml (MindSpeed-RL builds the model from the yaml)."""
    diffs = [
        f"{k}={getattr(found, k)} but model {model_name} has {k}={getattr(expected, k)}"
        for k in ARCH_FIELDS
        if getattr(found, k) != getattr(expected, k)
    ]
    if diffs:
        raise UserError(f"{where}: actor_config.load: checkpoint does not match the model config: " + "; ".join(diffs))


def load_state_dict(folder: Path) -> dict[str, torch.Tensor]:
    state: dict[str, torch.Tensor] = {}
    for shard in _shards(Path(folder)):
        state.update(load_file(str(shard)))
    return state


def load_weights(model: Qwen2, folder: Path, filename: str | None = None) -> None:
    """Copy saved tensors into ``model``: a HF folder's weights (its shards), or one ``filename`` in ``folder``
    (as ``save_weights`` wrote it). Names are identical; a tied lm_head is implied; UserError on any mismatch."""
    where = Path(folder) if filename is None else Path(folder) / filename
    state = load_state_dict(where) if filename is None else load_file(str(where))
    tied = not model.args.untie_embeddings_and_output_weights
    if tied:
        state.pop("lm_head.weight", None)
    ref = model.state_dict()
    expected = {k for k in ref if not (tied and k == "lm_head.weight")}
    missing = expected - state.keys()
    unexpected = {k for k in state.keys() - expected if not k.endswith("rotary_emb.inv_freq")}
    if missing or unexpected:
        sample = sorted(missing)[:3] or sorted(unexpected)[:3]
        raise UserError(
            f"{where}: actor_config.load: weights do not fit a Qwen2 model "
            f"({len(missing)} missing, {len(unexpected)} unexpected, e.g. {', '.join(sample)})"
        )
    with torch.no_grad():
        for name, tensor in state.items():
            if name in ref:
                ref[name].copy_(tensor.to(ref[name].dtype))


def hf_config(args: ModelArgs, eos_token_id: int | None = None, pad_token_id: int | None = None) -> dict:
    """A transformers Qwen2 config.json for these arch args."""
    return {
        "architectures": ["Qwen2ForCausalLM"],
        "model_type": "qwen2",
        "hidden_size": args.hidden_size,
        "intermediate_size": args.ffn_hidden_size,
        "num_hidden_layers": args.num_layers,
        "num_attention_heads": args.num_attention_heads,
        "num_key_value_heads": args.num_query_groups,
        "vocab_size": args.padded_vocab_size,
        "max_position_embeddings": args.max_position_embeddings,
        "rope_theta": args.rotary_base,
        "rms_norm_eps": args.norm_epsilon,
        "tie_word_embeddings": not args.untie_embeddings_and_output_weights,
        "hidden_act": "silu",
        "attention_dropout": 0.0,
        "use_sliding_window": False,
        "torch_dtype": "float32",
        "eos_token_id": eos_token_id,
        "pad_token_id": pad_token_id,
    }


def write_hf_config(
    args: ModelArgs, folder: Path, eos_token_id: int | None = None, pad_token_id: int | None = None
) -> None:
    (Path(folder) / "config.json").write_text(json.dumps(hf_config(args, eos_token_id, pad_token_id), indent=2))


def save_state(
    state: dict[str, torch.Tensor], args: ModelArgs, folder: Path, filename: str = "model.safetensors"
) -> None:
    """Write a Qwen2 state dict (Hugging Face names) as ``folder/filename``; a tied lm_head is left out."""
    state = {k: v.detach().contiguous().cpu() for k, v in state.items()}
    if not args.untie_embeddings_and_output_weights:
        state.pop("lm_head.weight", None)
    save_file(state, str(Path(folder) / filename), metadata={"format": "pt"})


def save_weights(
    model: Qwen2,
    folder: Path,
    eos_token_id: int | None = None,
    pad_token_id: int | None = None,
    filename: str = "model.safetensors",
    write_config: bool = True,
) -> None:
    """Write ``filename`` (+ config.json) into an existing folder; the caller makes the folder atomic."""
    save_state(model.state_dict(), model.args, folder, filename)
    if write_config:
        write_hf_config(model.args, folder, eos_token_id, pad_token_id)
