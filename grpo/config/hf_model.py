"""A Hugging Face model folder is the model: its ``config.json`` gives the ``model.<name>.*`` architecture keys.

Where ``actor_config.load`` (else ``megatron_training.tokenizer_name_or_path``) names a local folder holding a
``config.json``, ``apply_model_folder`` replaces the selected model entry's architecture (the values the model
group's YAML gave) with the folder's, so a user never restates vocabulary, sizes, positions or rope. A value the
user set themselves (in an override or the primary config file) that differs from the folder is one line naming
both. The folder itself is checked the way a trial would find it broken, without torch: config.json readable
and complete, the ``*.safetensors`` headers readable and their tensors fitting config.json (embedding rows,
hidden size, layer count), and the tokenizer no larger than the embedding table.

Standard library only: safetensors' header is 8 bytes of little-endian length followed by JSON.

    data = apply_model_folder(data, "sweeps/my.yaml", user_keys={"max_position_embeddings"})
"""

from __future__ import annotations

import json
import re
import struct
from collections.abc import Collection
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from grpo._fs import checkpoint_iteration
from grpo.errors import UserError

REQUIRED = ("num_hidden_layers", "hidden_size", "intermediate_size", "num_attention_heads", "vocab_size")
# Decoder families whose layers are rope + RMSNorm + gated-SiLU MLP with no bias outside q/k/v (or none).
ROPE_RMSNORM_FAMILIES = ("qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "llama", "mistral")
_LAYER = re.compile(r"^model\.layers\.(\d+)\.")


@dataclass(frozen=True)
class ModelFolder:
    """A local HF folder and the config key that named it (``actor_config.load`` or the tokenizer key)."""

    folder: Path
    key: str
    config: dict[str, Any]
    tensors: dict[str, list[int]] | None = None  # name -> shape, read from the weights' headers (load only)

    @property
    def model_type(self) -> str:
        return str(self.config.get("model_type") or "")

    @property
    def architectures(self) -> list[str]:
        return [str(a) for a in self.config.get("architectures") or []]

    @property
    def config_file(self) -> Path:
        return self.folder / "config.json"


def find_model_folder(load: str | None, tokenizer: str | None) -> tuple[Path, str] | None:
    """The folder whose config.json is the architecture: ``load``'s (or, for a save folder a run resumes from,
    its latest checkpoint's), else the tokenizer folder's, else None."""
    for value, key in ((load, "actor_config.load"), (tokenizer, "megatron_training.tokenizer_name_or_path")):
        folder = Path(value).expanduser() if value else None
        if folder is not None and (folder / "config.json").is_file():
            return folder, key
        if folder is not None and key == "actor_config.load" and (latest := _latest_checkpoint(folder)) is not None:
            return latest, key
    return None


def _latest_checkpoint(save_dir: Path) -> Path | None:
    """A save folder's latest checkpoint holding a config.json: the engine's ``iter_0000010``, TRL's
    ``checkpoint-10`` (a retried or branched trial resumes from one; it must keep the architecture)."""
    iteration = checkpoint_iteration(save_dir)
    if iteration is None:
        return None
    if (save_dir / f"iter_{iteration:07d}" / "config.json").is_file():
        return save_dir / f"iter_{iteration:07d}"
    # TRL numbers its checkpoints in optimizer steps; every one holds the same architecture: take the latest.
    steps = [p for p in save_dir.glob("checkpoint-*") if p.name[11:].isdigit() and (p / "config.json").is_file()]
    return max(steps, key=lambda p: int(p.name[11:]), default=None)


def read_model_folder(folder: Path, key: str, source: str) -> ModelFolder:
    """Read and check ``folder`` (config.json, weights when it is ``actor_config.load``, tokenizer size)."""
    cfg_file = folder / "config.json"
    where = f"{source}: {key}: {cfg_file}"
    try:
        hf = json.loads(cfg_file.read_text())
    except json.JSONDecodeError as err:
        raise UserError(f"{where}: not valid JSON ({err.msg}, line {err.lineno})") from None
    except OSError as err:
        raise UserError(f"{where}: cannot be read ({err.strerror})") from None
    if not isinstance(hf, dict):
        raise UserError(f"{where}: not a JSON object")
    text = hf.get("text_config")  # multimodal folders nest the language model's config
    hf = {**hf, **text} if isinstance(text, dict) else hf
    missing = [k for k in REQUIRED if not isinstance(hf.get(k), int)]
    if missing:
        raise UserError(f"{where}: lacks {', '.join(missing)} (not a causal language model's config)")
    found = ModelFolder(folder, key, hf)
    if key == "actor_config.load" and not (folder / "trainer_state.json").is_file():
        found = ModelFolder(folder, key, hf, _check_weights(found, source))
    elif key == "actor_config.load":  # a run's own checkpoint (its resume): the run checks it; bias from its weights
        merged = folder / "model.safetensors"  # absent in a LoRA checkpoint that keeps only its adapters
        found = ModelFolder(folder, key, hf, _shapes(safetensors_header(merged)) if merged.is_file() else None)
    _check_tokenizer(found, source)
    return found


def _shards(folder: Path, where: str) -> list[Path]:
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        try:
            names = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        except (json.JSONDecodeError, KeyError, TypeError, AttributeError):
            raise UserError(f"{where}: {index.name} is not a safetensors index (no weight_map)") from None
        absent = [n for n in names if not (folder / n).is_file()]
        if absent:
            raise UserError(f"{where}: {index.name} names {absent[0]}, which is not in the folder")
        return [folder / n for n in names]
    if (folder / "model.safetensors").is_file():
        return [folder / "model.safetensors"]
    shards = sorted(p for p in folder.glob("*.safetensors") if p.name != "reference.safetensors")
    if not shards:
        bins = sorted(p.name for p in folder.glob("*.bin"))
        hint = f" ({bins[0]} is a pickle: save the model with safe_serialization=True)" if bins else ""
        raise UserError(f"{where}: no *.safetensors weights in the folder{hint}")
    return shards


def safetensors_header(path: Path) -> dict[str, Any]:
    """The tensor table of a safetensors file ({name: {dtype, shape, data_offsets}}); UserError when unreadable."""
    try:
        with path.open("rb") as f:
            (length,) = struct.unpack("<Q", f.read(8))
            if length > 100_000_000:
                raise ValueError("header length is not plausible")
            header = json.loads(f.read(length))
        size = path.stat().st_size
    except (OSError, struct.error, ValueError) as err:
        raise UserError(f"{path}: not a readable safetensors file ({err})") from None
    header.pop("__metadata__", None)
    end = max((int(t["data_offsets"][1]) for t in header.values()), default=0)
    if 8 + length + end > size:
        raise UserError(f"{path}: truncated safetensors file ({size} bytes, its header needs {8 + length + end})")
    return header


def _shapes(header: dict[str, Any]) -> dict[str, list[int]]:
    return {name: list(t["shape"]) for name, t in header.items()}


def _check_weights(found: ModelFolder, source: str) -> dict[str, list[int]]:
    """The tensors' shapes; they must exist and fit config.json (the shapes a trial would otherwise fail on)."""
    where = f"{source}: actor_config.load: {found.folder}"
    tensors: dict[str, list[int]] = {}
    for shard in _shards(found.folder, where):
        try:
            header = safetensors_header(shard)
        except UserError as err:
            raise UserError(f"{source}: actor_config.load: {err}") from None
        tensors.update(_shapes(header))
    hf = found.config
    embed = tensors.get("model.embed_tokens.weight")
    if embed is not None and embed != [hf["vocab_size"], hf["hidden_size"]]:
        raise UserError(
            f"{where}: model.embed_tokens.weight is {embed[0]}x{embed[1]} but config.json says vocab_size="
            f"{hf['vocab_size']}, hidden_size={hf['hidden_size']}"
        )
    layers = {int(m.group(1)) for name in tensors if (m := _LAYER.match(name))}
    if layers and len(layers) != hf["num_hidden_layers"]:
        raise UserError(
            f"{where}: the weights hold {len(layers)} layers but config.json says num_hidden_layers="
            f"{hf['num_hidden_layers']}"
        )
    return tensors


def tokenizer_size(folder: Path) -> int | None:
    """Token ids a folder's tokenizer.json can produce (highest id + 1); None without one."""
    file = folder / "tokenizer.json"
    if not file.is_file():
        return None
    stat = file.stat()
    return _tokenizer_size(str(file), stat.st_mtime_ns, stat.st_size)


@lru_cache(maxsize=16)
def _tokenizer_size(file: str, mtime_ns: int, size: int) -> int | None:
    """Cached by the file's stamp: a sweep's preflight composes many configs (a Qwen tokenizer.json is 7 MB)."""
    try:
        data = json.loads(Path(file).read_text())
    except (OSError, json.JSONDecodeError):
        return None  # the engine's tokenizer loader words this one
    vocab = (data.get("model") or {}).get("vocab")
    ids = list(vocab.values()) if isinstance(vocab, dict) else list(range(len(vocab or [])))
    ids += [t.get("id", -1) for t in data.get("added_tokens") or [] if isinstance(t, dict)]
    numeric = [i for i in ids if isinstance(i, int)]
    return max(numeric) + 1 if numeric else None


def _check_tokenizer(found: ModelFolder, source: str) -> None:
    size = tokenizer_size(found.folder)
    if size is not None and size > found.config["vocab_size"]:
        raise UserError(
            f"{source}: {found.key}: {found.folder}: the tokenizer has {size} tokens but config.json vocab_size="
            f"{found.config['vocab_size']} embedding rows (tokenizer and model do not match)"
        )


def rope_theta(hf: dict[str, Any]) -> float | None:
    # transformers 5 moved rope_theta into rope_parameters; older configs keep it at the top level.
    params = hf.get("rope_parameters") or hf.get("rope_scaling") or {}
    theta = hf.get("rope_theta") or (params.get("rope_theta") if isinstance(params, dict) else None)
    return float(theta) if theta else None


def derived_fields(found: ModelFolder) -> dict[str, Any]:
    """The ``model.<name>.*`` values (MindSpeed/Megatron names) that config.json determines."""
    hf = found.config
    heads, kv = hf["num_attention_heads"], hf.get("num_key_value_heads") or hf["num_attention_heads"]
    out: dict[str, Any] = {
        "num_layers": hf["num_hidden_layers"],
        "hidden_size": hf["hidden_size"],
        "ffn_hidden_size": hf["intermediate_size"],
        "num_attention_heads": heads,
        "group_query_attention": True,
        "num_query_groups": kv,
        "padded_vocab_size": hf["vocab_size"],
        "untie_embeddings_and_output_weights": not hf.get("tie_word_embeddings", True),
    }
    if isinstance(hf.get("max_position_embeddings"), int):
        out["max_position_embeddings"] = hf["max_position_embeddings"]
    if (theta := rope_theta(hf)) is not None:
        out["rotary_base"] = theta
    eps = hf.get("rms_norm_eps", hf.get("layer_norm_eps"))
    if isinstance(eps, (int, float)):
        out["norm_epsilon"] = float(eps)
    head_dim = hf.get("head_dim")
    if isinstance(head_dim, int) and head_dim * heads != hf["hidden_size"]:
        out["kv_channels"] = head_dim
    family = found.model_type
    if family in ROPE_RMSNORM_FAMILIES:
        out.update(position_embedding_type="rope", normalization="RMSNorm", disable_bias_linear=True)
        out["swiglu"] = hf.get("hidden_act", "silu") == "silu"
        bias = hf.get("attention_bias", family.startswith("qwen2"))  # Qwen2's q/k/v have a bias; the weights say
        out["add_qkv_bias"] = "model.layers.0.self_attn.q_proj.bias" in found.tensors if found.tensors else bool(bias)
        if family.startswith("qwen3"):
            out["qk_layernorm"] = True
    scaling = hf.get("rope_scaling") or hf.get("rope_parameters") or {}
    kind = (scaling.get("rope_type") or scaling.get("type")) if isinstance(scaling, dict) else None
    if kind not in (None, "default"):  # MindSpeed-RL's names; the embedded engine refuses scaling in one line
        out["rope_scaling_type"] = kind
        if isinstance(scaling.get("factor"), (int, float)):
            out["rope_scaling_factor"] = scaling["factor"]
        if isinstance(scaling.get("original_max_position_embeddings"), int):
            out["original_max_position_embeddings"] = scaling["original_max_position_embeddings"]
    experts = hf.get("num_experts") or hf.get("n_routed_experts")
    if isinstance(experts, int) and experts > 0:
        out["num_experts"] = experts
        if isinstance(hf.get("num_experts_per_tok"), int):
            out["moe_router_topk"] = hf["num_experts_per_tok"]
        if isinstance(hf.get("moe_intermediate_size"), int):
            out["moe_ffn_hidden_size"] = hf["moe_intermediate_size"]
    return out


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
        return float(a) == float(b)
    if isinstance(a, str) and isinstance(b, (int, float)):  # 1e-6 written as a string in YAML
        try:
            return float(a) == float(b)
        except ValueError:
            return False
    return bool(a == b)


def apply_model_folder(data: dict[str, Any], source: str, user_keys: Collection[str] = ()) -> dict[str, Any]:
    """``data`` (a canonical composed config) with the selected model entry's architecture taken from the model
    folder; ``user_keys`` (model field names the user set) must agree with it. Unchanged without a folder."""
    actor, mt, models = data.get("actor_config"), data.get("megatron_training"), data.get("model")
    if not isinstance(actor, dict) or not isinstance(mt, dict) or not isinstance(models, dict):
        return data  # the schema reports the shape
    name = actor.get("model")
    entry = models.get(name) if isinstance(name, str) else None
    located = find_model_folder(actor.get("load"), mt.get("tokenizer_name_or_path"))
    if located is None or not isinstance(entry, dict):
        return data
    found = read_model_folder(*located, source)
    derived = derived_fields(found)
    for field in sorted(set(user_keys) & derived.keys()):
        if field in entry and not _same(entry[field], derived[field]):
            raise UserError(
                f"{source}: model.{name}.{field}={entry[field]} contradicts {found.config_file} "
                f"({derived[field]} from config.json, named by {found.key}); drop the override: the folder is the model"
            )
    return {**data, "model": {**models, name: {**entry, **derived}}}


def config_of(folder: Path) -> Any:
    """``folder``'s config.json as parsed (any JSON value), None when it is missing or not JSON
    (``read_model_folder`` says why at validate; the callers of this one only look)."""
    try:
        return json.loads((Path(folder) / "config.json").read_text())
    except (OSError, json.JSONDecodeError):
        return None


def folder_model_type(load: str | None, tokenizer: str | None) -> tuple[str, Path, str] | None:
    """(config key, config.json, model_type) of the model folder; None without one (or unreadable: validate
    has said why). What an engine that builds one architecture checks before anything loads."""
    located = find_model_folder(load, tokenizer)
    if located is None:
        return None
    folder, key = located
    hf = config_of(folder)
    if hf is None:
        return None
    kind = (
        str(hf.get("model_type") or "/".join(hf.get("architectures") or []) or "unknown")
        if isinstance(hf, dict)
        else "unknown"
    )
    return key, folder / "config.json", kind
