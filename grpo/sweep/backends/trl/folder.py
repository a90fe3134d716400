"""Which network a TRL trial trains: the embedded engine's Qwen2 (no model folder, or a Qwen2 folder: model.py
builds it as the engine does and saves it for TRL), or any other causal LM as transformers loads it from its
folder (``actor_config.load``), trained and evaluated as it is (the engine cannot build it: grpo/engine/check.py).

At validate (``folder_problems``, no weights read) the folder must be one transformers opens as a causal LM whose
every parameter is in the folder's safetensors with its shape (transformers would otherwise initialise the
missing ones at random and train them silently), and LoRA's target projections must exist in it. In the trial
``load_causal_lm`` loads it and refuses the same way, from transformers' own loading report.

    if not engine_builds(folder): model = load_causal_lm(folder, "actor_config.load")

The module level is free of torch and transformers (the driver imports it for ``check``).
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Any

from grpo.config import GRPOConfig
from grpo.config.hf_model import config_of, folder_model_type, safetensors_header
from grpo.engine import lora
from grpo.engine.check import _unbuilt_architecture
from grpo.errors import UserError

ENGINE_TYPE = "qwen2"  # config.json's model_type of the folders the engine's Qwen2 builds (Qwen2 and Qwen2.5)


def model_type(folder: Path) -> str | None:
    """config.json's ``model_type`` (a multimodal folder's language model's), None when unreadable."""
    hf = config_of(folder)
    if not isinstance(hf, dict):
        return None
    text = hf.get("text_config")
    return str((text if isinstance(text, dict) and text.get("model_type") else hf).get("model_type") or "") or None


def engine_builds(folder: Path | None) -> bool:
    """True when the trial's network is the engine's Qwen2: no folder (the warm start) or a Qwen2 folder."""
    return folder is None or model_type(folder) in (ENGINE_TYPE, None)


def folder_problems(cfg: GRPOConfig) -> list[str]:
    """One line per reason the model of ``cfg`` is not one a TRL trial can train: for the engine's Qwen2, each
    ``model.*`` value it does not build (as on the embedded engine: it would train another network without a
    word); for another folder, why transformers would not load it. A non-Qwen2 folder named only by the
    tokenizer key is refused: its weights would not be loaded (without ``actor_config.load`` the trial
    warm-starts the engine's Qwen2)."""
    actor, mt, src = cfg.actor_config, cfg.megatron_training, cfg._source
    located = folder_model_type(actor.load, mt.tokenizer_name_or_path)
    if located is None or located[2] == ENGINE_TYPE:
        return _qwen2_problems(cfg)
    key, config_file, kind = located
    if key != "actor_config.load":
        return [f"{src}: {key}: {config_file} is a {kind} model; backend trl trains another architecture than "
                f"Qwen2 from its weights only: set actor_config.load={config_file.parent}"]  # fmt: skip
    settings = lora.settings(cfg)
    targets = tuple(settings.modules) if settings is not None else ()
    folder = config_file.parent
    stamp = tuple(p.stat().st_mtime_ns for p in sorted(folder.glob("*.safetensors")))
    why = _load_problem(str(folder), stamp, targets)
    return [f"{src}: {key}: {folder}: {why}"] if why else []


QWEN2_ONLY = (
    "backend trl builds the engine's Qwen2 from model.* (a Hugging Face folder of this architecture in "
    "actor_config.load runs as it is)"
)


def _qwen2_problems(cfg: GRPOConfig) -> list[str]:
    name, why = cfg.actor_config.model, QWEN2_ONLY
    arch = cfg.model.get(name)
    out = [f"{cfg._source}: model.{name}.{key}: {reason.split(';')[0]}; {why}"
           for key, reason in (_unbuilt_architecture(arch) if arch is not None else [])]  # fmt: skip
    scaling, factor = cfg.megatron_value("rope_scaling_type"), cfg.megatron_value("rope_scaling_factor")
    if scaling is not None or (factor is not None and float(factor) != 1.0):
        key = "rope_scaling_type" if scaling is not None else "rope_scaling_factor"
        out.append(f"{cfg._source}: model.{name}.{key}: RoPE scaling ({scaling or factor}) is not applied; {why}")
    return out


@lru_cache(maxsize=8)
def _load_problem(folder: str, _stamp: tuple[int, ...], targets: tuple[str, ...]) -> str | None:
    """Why transformers would not load ``folder`` as the causal LM it describes, without reading its weights:
    the model is built on the meta device and its parameters matched against the safetensors headers (skipped
    for architectures transformers converts on load, whose checkpoint names differ from the parameters')."""
    import torch
    import transformers
    from transformers.conversion_mapping import get_checkpoint_conversion_mapping

    try:
        config = transformers.AutoConfig.from_pretrained(folder, local_files_only=True)
        with torch.device("meta"):
            model = transformers.AutoModelForCausalLM.from_config(config)
    except Exception as err:  # an unknown model_type, no causal LM class, a config transformers refuses
        first = (str(err).strip().splitlines() or [type(err).__name__])[0]
        return f"transformers {transformers.__version__} cannot build it as a causal LM ({first})"
    names = {name.rsplit(".", 1)[-1] for name, _ in model.named_modules()}
    absent = [t for t in targets if t not in names]
    if absent:
        return f"LoRA's target {absent[0]} is no module of this {config.model_type} model (lora_target_modules)"
    if get_checkpoint_conversion_mapping(config.model_type) is not None:
        return None  # renamed or fused on load: the trial's loading report checks it (load_causal_lm)
    shapes = _tensor_shapes(Path(folder))
    if not shapes:  # a LoRA run's own checkpoint holds adapters only; its base is checked where it starts
        return None
    prefix = f"{model.base_model_prefix}."
    for name, param in model.named_parameters():  # a tied weight is named once (its first owner)
        shape = shapes.get(name, shapes.get(name.removeprefix(prefix)))
        if shape is None:
            return f"the weights lack {name}, which transformers would initialise at random"
        if shape != list(param.shape):
            return f"{name} is {shape} in the weights, {list(param.shape)} in the model config.json describes"
    return None


def _tensor_shapes(folder: Path) -> dict[str, list[int]]:
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        files = sorted(set(json.loads(index.read_text())["weight_map"].values()))
    else:
        files = [p.name for p in sorted(folder.glob("*.safetensors"))]
    shapes: dict[str, list[int]] = {}
    for name in files:
        shapes.update({k: list(t["shape"]) for k, t in safetensors_header(folder / name).items()})
    return shapes


def load_causal_lm(folder: Path, key: str) -> Any:
    """transformers' causal LM from ``folder`` in float32, every parameter from the folder (a missing or
    mismatched one is the user's folder: UserError, the trial's 'bad trial config')."""
    import torch
    import transformers

    loaded: Any = transformers.AutoModelForCausalLM.from_pretrained(
        str(folder), dtype=torch.float32, local_files_only=True, output_loading_info=True
    )
    model, info = loaded
    bad = sorted(info.get("missing_keys") or []) or sorted(str(k) for k in info.get("mismatched_keys") or [])
    if bad:
        raise UserError(f"{key}: {folder}: transformers did not load {bad[0]} from the weights")
    return model
