"""LoRA on the embedded engine, through ``peft``: MindSpeed-RL's ``lora_*`` keys on the Qwen2 decoder.

MindSpeed-RL (its LoRA GRPO recipe ``configs/grpo_lora_qwen25_32b_A2.yaml``, ``docs/zh/features/grpo_lora.md``)
builds MindSpeed-LLM's LoRA modules when ``lora_target_modules`` is set, and the keys mean here:

- ``lora_target_modules``: Megatron's module names, mapped to the Qwen2 projections they fuse
  (``MEGATRON_TO_QWEN2``); the Qwen2 names themselves (what peft users write) are accepted too. Megatron's
  fused ``linear_qkv`` (``linear_fc1``) carries one adapter whose A is shared by q, k and v (gate and up); peft
  gives each projection its own A, so MindSpeed-RL's adapter is the special case of equal A's (more adapter
  parameters here, the same rank per projection).
- ``lora_r``, ``lora_alpha``: the rank and the scale ``alpha / r`` (MindSpeed-RL merges ``alpha / r * B @ A``
  into the weights it hands vLLM, ``vllm_weight_container.py``; peft's default scaling is the same).
  MindSpeed-RL has no LoRA dropout key: dropout 0, as peft's default.
- ``lora_ckpt_filter``: checkpoints hold only the adapters (true) or the adapters with the base and the
  merged weights (false), see ``save_lora``.
- ``lora_fusion`` (CCLoRA: overlaps tensor-parallel communication with the LoRA matmuls): speed only; one
  device has no such communication, so it cannot change the outcome here.
- ``lora_r``/``lora_alpha`` while LoRA is off change nothing: the inert-in-context lint (``grpo/config/inert.py``)
  warns when they are searched.
- ``rl_config.share_backbone``: the reference is the base with adapters off (``disable_adapter``, as
  MindSpeed-RL's ``IntegratedWorker.compute_ref_log_prob`` does with a shared backbone). Without it MindSpeed-RL
  builds a second LoRA model (B = 0) on the same base checkpoint, the same values, so both train alike here;
  without LoRA it is refused, as MindSpeed-RL's ``validate_rl_args`` does.

Only the adapters require gradients (peft freezes the rest), so the optimizer holds only them. The module
level is free of torch and peft (``check.py`` imports it); the functions that need them import them.
"""

from __future__ import annotations

import importlib.util
import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from grpo.errors import UserError

if TYPE_CHECKING:
    import torch

    from grpo.config import GRPOConfig
    from grpo.engine.model import Qwen2

MEGATRON_TO_QWEN2: dict[str, tuple[str, ...]] = {
    "linear_qkv": ("q_proj", "k_proj", "v_proj"),
    "linear_proj": ("o_proj",),
    "linear_fc1": ("gate_proj", "up_proj"),
    "linear_fc2": ("down_proj",),
}
QWEN2_NAMES = tuple(n for names in MEGATRON_TO_QWEN2.values() for n in names)
INSTALL = "pip install 'grpo-sweep[lora]'"
ADAPTER_DIR = "adapter"  # peft's adapter folder (adapter_config.json, adapter_model.safetensors)
LORA_FILE = "lora.json"  # the settings and where the base weights come from
ADAPTER = "default"  # peft's adapter name


@dataclass(frozen=True)
class LoraSettings:
    r: int
    alpha: int  # an int in MindSpeed-RL's MegatronConfig (and so in the schema)
    target_modules: tuple[str, ...]  # as the config names them
    modules: tuple[str, ...]  # the Qwen2 projections they cover
    ckpt_filter: bool

    @property
    def scaling(self) -> float:
        return self.alpha / self.r

    def same_adapter(self, saved: dict[str, Any]) -> str | None:
        """The first key whose saved value differs from this run's (None: the adapter fits)."""
        pairs: list[tuple[str, Any, Any]] = [
            ("lora_r", self.r, saved.get("lora_r")),
            ("lora_alpha", self.alpha, saved.get("lora_alpha")),
            ("lora_target_modules", list(self.modules), sorted(saved.get("lora_target_modules") or [])),
        ]
        for key, mine, theirs in pairs:
            if mine != theirs:
                return f"{key}: the checkpoint's adapter has {theirs}, this run {mine}"
        return None


def _where(cfg: GRPOConfig, key: str) -> str:
    """``<section>.<key>`` where the config sets Megatron key ``key`` (the one ``megatron_value`` reads)."""
    actor = cfg.actor_config
    for name, section in (
        ("actor_config", actor),
        ("megatron_training", cfg.megatron_training),
        (f"model.{actor.model}", cfg.model.get(actor.model)),
    ):
        if section is not None and key in section.model_fields_set:
            return f"{name}.{key}"
    return f"megatron_training.{key}"


def _modules(targets: list[str]) -> tuple[str, ...]:
    out: list[str] = []
    for name in targets:
        out += MEGATRON_TO_QWEN2.get(name, (name,))
    return tuple(sorted(set(out)))


def settings(cfg: GRPOConfig) -> LoraSettings | None:
    """The run's LoRA settings; None when ``lora_target_modules`` is unset or empty (full fine-tuning)."""
    targets = cfg.megatron_value("lora_target_modules")
    if not targets:
        return None
    return LoraSettings(
        r=int(cfg.megatron_value("lora_r")),
        alpha=int(cfg.megatron_value("lora_alpha")),
        target_modules=tuple(targets),
        modules=_modules(list(targets)),
        ckpt_filter=bool(cfg.megatron_value("lora_ckpt_filter")),
    )


def peft_installed() -> bool:
    return importlib.util.find_spec("peft") is not None


def config_problems(cfg: GRPOConfig) -> list[str]:
    """One ``<source>: <key>: <why>`` line per LoRA setting the engine would not carry out (for check.py)."""
    source = cfg._source
    targets = cfg.megatron_value("lora_target_modules")
    if not targets:  # lora_r/lora_alpha set while LoRA is off: the inert-in-context lint warns (config/inert.py)
        if getattr(cfg.rl_config, "share_backbone", False):  # a long-tail key
            return [
                f"{source}: rl_config.share_backbone: the shared backbone works with LoRA only; set "
                f"lora_target_modules (MindSpeed-RL's validate_rl_args refuses it too)"
            ]
        return []
    key = _where(cfg, "lora_target_modules")
    if not isinstance(targets, list) or not all(isinstance(t, str) for t in targets):
        return [f"{source}: {key}: a list of module names, got {targets!r}"]
    unknown = [t for t in targets if t not in MEGATRON_TO_QWEN2 and t not in QWEN2_NAMES]
    if unknown:
        return [
            f"{source}: {key}: the embedded engine's Qwen2 has no {', '.join(unknown)}; use "
            f"{', '.join(MEGATRON_TO_QWEN2)} (MindSpeed-RL's names) or {', '.join(QWEN2_NAMES)}"
        ]
    problems = []
    if not peft_installed():
        problems.append(f"{source}: {key}: LoRA needs the peft package, which is not installed here; {INSTALL}")
    r, alpha = cfg.megatron_value("lora_r"), cfg.megatron_value("lora_alpha")
    if r is None or int(r) < 1:
        problems.append(f"{source}: {_where(cfg, 'lora_r')}: the LoRA rank must be >= 1 (got {r})")
    if alpha is None or float(alpha) <= 0:
        problems.append(f"{source}: {_where(cfg, 'lora_alpha')}: must be > 0 (got {alpha}); it scales the adapters")
    return problems


# ---------------------------------------------------------------------------------------------- torch side
def attach(policy: Qwen2, lora: LoraSettings, seed: int) -> Any:
    """Wrap ``policy`` in a peft model (in place: its projections become LoRA layers); returns the PeftModel.

    The A matrices are drawn from the CPU generator seeded with ``seed`` (B starts at 0, so the policy starts
    equal to the base); the global random state is left as it was. Call it before moving ``policy``."""
    import torch
    from peft import LoraConfig, get_peft_model

    config = LoraConfig(
        r=lora.r, lora_alpha=lora.alpha, target_modules=list(lora.modules), lora_dropout=0.0, bias="none"
    )
    with torch.random.fork_rng(devices=[]):
        torch.default_generator.manual_seed(seed)
        return get_peft_model(policy, config, adapter_name=ADAPTER)


class BaseView:
    """The policy with its adapters switched off (peft's ``disable_adapter``): the frozen base weights, with
    no second copy of the model. Duck-typed as a ``Qwen2`` for ``rollout.response_logprobs`` (``hidden``,
    ``lm_head``) and any other read."""

    def __init__(self, policy: Qwen2, peft_model: Any):
        self._policy, self._peft = policy, peft_model

    def hidden(self, *args: Any, **kwargs: Any) -> torch.Tensor:
        with self._peft.disable_adapter():
            return self._policy.hidden(*args, **kwargs)

    def __call__(self, *args: Any, **kwargs: Any) -> torch.Tensor:
        with self._peft.disable_adapter():
            return self._policy(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._policy, name)


def _lora_layers(policy: Qwen2) -> dict[str, Any]:
    """Qwen2 projection name (``model.layers.0.self_attn.q_proj``) -> its peft LoRA layer."""
    from peft.tuners.lora import LoraLayer

    return {name: m for name, m in policy.named_modules() if isinstance(m, LoraLayer)}


def base_state(policy: Qwen2) -> dict[str, torch.Tensor]:
    """The base weights under their Hugging Face names (adapters left out)."""
    state = {}
    for name, tensor in policy.state_dict().items():
        if ".lora_" in name:
            continue
        state[name.replace(".base_layer.", ".")] = tensor
    return state


def merged_state(policy: Qwen2) -> dict[str, torch.Tensor]:
    """The base weights with every adapter added (``W + alpha / r * B @ A``): the policy as one plain Qwen2."""
    state = base_state(policy)
    for name, layer in _lora_layers(policy).items():
        state[f"{name}.weight"] = state[f"{name}.weight"] + layer.get_delta_weight(ADAPTER).detach()
    return state


def fingerprint(policy: Qwen2) -> str:
    """A cheap identity of the base weights (per tensor: shape, sum and sum of squares in float64), so a
    resumed run can tell whether it rebuilt the same base; not a cryptographic hash."""
    import hashlib

    import torch

    rows = []
    with torch.no_grad():
        for name, tensor in sorted(base_state(policy).items()):
            t = tensor.double()
            rows.append(f"{name}:{tuple(t.shape)}:{float(t.sum())!r}:{float((t * t).sum())!r}")
    return hashlib.sha256("\n".join(rows).encode()).hexdigest()[:24]


def save_lora(
    folder: Path,
    peft_model: Any,
    policy: Qwen2,
    lora: LoraSettings,
    base: dict[str, Any],
    eos_token_id: int | None,
    pad_token_id: int | None,
) -> None:
    """Write a LoRA checkpoint's weights into ``folder`` (the caller makes it atomic):

    - ``adapter/``: peft's adapter folder (``adapter_config.json``, ``adapter_model.safetensors``), which
      ``PeftModel.from_pretrained(base, folder / "adapter")`` opens; ``lora.json``: the settings and ``base``
      (``base_load``: the ``actor_config.load`` the run started from, null for the warm start; ``fingerprint``);
    - ``config.json`` (the architecture);
    - unless ``lora_ckpt_filter``: ``model.safetensors``, the merged policy (so the folder is a Hugging Face
      Qwen2 folder of the trained model), and ``reference.safetensors``, the base (the reference policy),
      which a resume reads instead of rebuilding the base from ``base_load``.
    """
    from peft.utils import get_peft_model_state_dict
    from safetensors.torch import save_file

    from grpo.engine.hf_checkpoint import save_state, write_hf_config

    adapter = folder / ADAPTER_DIR
    adapter.mkdir()
    peft_model.peft_config[ADAPTER].save_pretrained(str(adapter))
    weights = {k: v.detach().contiguous().cpu() for k, v in get_peft_model_state_dict(peft_model).items()}
    save_file(weights, str(adapter / "adapter_model.safetensors"), metadata={"format": "pt"})
    meta = {
        "lora_r": lora.r,
        "lora_alpha": lora.alpha,
        "lora_target_modules": list(lora.modules),
        "lora_ckpt_filter": lora.ckpt_filter,
        **base,
    }
    (folder / LORA_FILE).write_text(json.dumps(meta, indent=2))
    write_hf_config(policy.args, folder, eos_token_id, pad_token_id)
    if not lora.ckpt_filter:
        save_state(merged_state(policy), policy.args, folder)
        save_state(base_state(policy), policy.args, folder, filename="reference.safetensors")


def read_meta(folder: Path) -> dict[str, Any] | None:
    """``lora.json`` of a checkpoint folder; None for a checkpoint without LoRA."""
    path = Path(folder) / LORA_FILE
    if not path.is_file():
        return None
    try:
        meta = json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise UserError(f"{path}: actor_config.load: not valid JSON ({err.msg}, line {err.lineno})") from None
    if not isinstance(meta, dict):
        raise UserError(f"{path}: actor_config.load: not a LoRA checkpoint description")
    return meta


def load_adapter(peft_model: Any, folder: Path) -> None:
    """Copy a checkpoint's adapter weights into ``peft_model`` (same settings: the caller checked)."""
    from peft.utils import set_peft_model_state_dict
    from safetensors.torch import load_file

    path = Path(folder) / ADAPTER_DIR / "adapter_model.safetensors"
    if not path.is_file():
        raise UserError(f"{path}: actor_config.load: the LoRA checkpoint has no adapter weights")
    result = set_peft_model_state_dict(peft_model, load_file(str(path)), adapter_name=ADAPTER)
    missing = [k for k in getattr(result, "missing_keys", []) if ".lora_" in k]
    if missing or getattr(result, "unexpected_keys", []):
        raise UserError(f"{path}: actor_config.load: adapter weights do not fit the model (e.g. {missing[:1]})")


def merge_adapter(base: Qwen2, folder: Path) -> Qwen2:
    """``base`` with a checkpoint's adapter merged in (peft's ``merge_and_unload``): a plain Qwen2 again."""
    from peft import PeftModel

    return PeftModel.from_pretrained(base, str(Path(folder) / ADAPTER_DIR)).merge_and_unload()
