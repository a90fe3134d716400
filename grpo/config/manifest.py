"""MindSpeed-RL's config keys, as ``tools/mindspeed_manifest.py`` recorded them from its config classes.

``mindspeed_keys.json`` (beside this file) lists, per MindSpeed-RL config class, every key it accepts with
its type and default, at the commit recorded in the file. The schema accepts every one of them: the keys
grpo-sweep itself reads are first-class fields of ``schema``; the rest (the long tail) are fields
typed and defaulted from here. Sections:

- ``megatron``: ``MegatronConfig``. A model file, ``megatron_training``, ``actor_config``, ``ref_config``
  and ``reward_config`` all feed one such object, so each of them accepts every key of this section;
- ``rl``: ``RLConfig`` (``rl_config``), ``generate``: ``GenerateConfig`` (``generate_config``),
  ``sampling``: the keys of ``generate_config.sampling_config``.

Regenerate after a MindSpeed-RL update:
``python tools/mindspeed_manifest.py /path/to/MindSpeed-RL > grpo/config/mindspeed_keys.json``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal, TypedDict

MANIFEST_PATH = Path(__file__).with_name("mindspeed_keys.json")

ManifestSection = Literal["megatron", "rl", "generate", "sampling"]


class KeyEntry(TypedDict, total=False):
    type: str  # bool, int, float, str, list, dict, any; section for generate.sampling_config
    default: Any
    computed: bool  # MindSpeed-RL computes the default (a path); recorded as null


def _load() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(MANIFEST_PATH.read_text(encoding="utf-8"))
    return data


MANIFEST = _load()
COMMIT: str = MANIFEST.get("commit") or "unknown"


def manifest_keys(section: ManifestSection) -> dict[str, KeyEntry]:
    """Every key of one MindSpeed-RL config class, in its source order."""
    keys: dict[str, KeyEntry] = MANIFEST["sections"][section]
    return keys


MEGATRON_KEYS: frozenset[str] = frozenset(manifest_keys("megatron"))
