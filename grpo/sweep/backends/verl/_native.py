"""verl-native settings: the config's ``verl`` section (``verl.<verl config path>``, fixed in a config or an
override, or searched) and the spec's ``verl.overrides``, against the keys the trial's own config sets.

Each trial gets ``verl.overrides`` last, so an override of a verl key the backend renders from a grpo-sweep key
would silently replace that key's value: ``actor_rollout_ref.rollout.temperature=0.7`` beside a search of
``generate_config.sampling_config.temperature`` would cancel the search. Such an override is refused in one line
naming the grpo-sweep key to set instead (``_validate.SOURCES``, the map every rendered key is in), or, for the keys
the backend sets at launch (rows, reward module, checkpoints, logging), saying so. A verl refusal of an override
names the spec's line (``verl.overrides[i]`` and where it is in the spec file), not the base config; one of a
``verl.<path>`` key names that key.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from grpo.config import GRPOConfig
from grpo.sweep.backends.verl._validate import SOURCES

# verl keys the backend sets for every job at launch (backend.launch_overrides, _resume, _launch), by what.
LAUNCH_KEYS: dict[str, str] = {
    "data.train_files": "the trial's training rows (megatron_training.data_path)",
    "data.val_files": "the trial's held-out rows (megatron_training.split or engine.eval_data_path)",
    "trainer.total_epochs": "the epochs covering megatron_training.train_iters",
    "reward.custom_reward_function.path": "the generated reward (rl_config.verifier_function)",
    "reward.custom_reward_function.name": "the generated reward (rl_config.verifier_function)",
    "actor_rollout_ref.model.path": "actor_config.load (a Hugging Face folder), else tokenizer_name_or_path",
    "actor_rollout_ref.model.tokenizer_path": "megatron_training.tokenizer_name_or_path",
    "trainer.default_local_dir": "actor_config.save",
    "trainer.resume_mode": "actor_config.load and finetune",
    "trainer.resume_from_path": "actor_config.load",
    "actor_rollout_ref.actor.checkpoint.load_contents": "actor_config.no_load_optim and no_load_rng",
    "trainer.max_actor_ckpt_to_keep": "engine.keep_checkpoints",
    "trainer.logger": "the trial's metric stream (verl's file logger)",
    "trainer.project_name": "the trial's run",
    "trainer.experiment_name": "the trial's run",
    "actor_rollout_ref.rollout.name": "the rollout engine, vLLM",
    "trainer.val_before_train": "the trial's metric stream",
}


def native_settings(cfg: GRPOConfig) -> dict[str, Any]:
    """The config's ``verl`` section as verl's dotted keys (leaves only)."""
    out: dict[str, Any] = {}

    def walk(node: Any, prefix: str) -> None:
        if isinstance(node, dict) and node:
            for key, value in node.items():
                walk(value, f"{prefix}{key}.")
        else:
            out[prefix[:-1]] = node

    for key, value in (cfg.verl or {}).items():
        walk(value, f"{key}.")
    return out


def native_problems(cfg: GRPOConfig) -> list[str]:
    """One line per ``verl.<path>`` key that a mapped key (or the launch) already sets."""
    out = []
    for key in native_settings(cfg):
        if key in SOURCES:
            out.append(f"{cfg._source}: verl.{key}: set from {SOURCES[key]}; set that key instead")
        elif key in LAUNCH_KEYS:
            out.append(f"{cfg._source}: verl.{key}: set by backend verl at launch from {LAUNCH_KEYS[key]}")
    return out


def override_key(override: str) -> str:
    """``actor_rollout_ref.rollout.top_p`` of ``+actor_rollout_ref.rollout.top_p=0.9``."""
    return override.split("=", 1)[0].lstrip("+~")


def where(index: int, override: str, source: str, spec_path: Path | None) -> str:
    """``<spec>:<line>: verl.overrides[i]``: the line of the spec file holding the override, when found."""
    line = ""
    if spec_path is not None and spec_path.is_file():
        for number, text in enumerate(spec_path.read_text(encoding="utf-8").splitlines(), 1):
            if re.search(rf"(?<![\w.]){re.escape(override)}(?![\w.])", text):
                line = f":{number}"
                break
    return f"{source}{line}: verl.overrides[{index}]"


def mapped_problems(overrides: list[str], source: str, spec_path: Path | None) -> list[str]:
    """One line per override of a key the trial's config or launch already sets."""
    out = []
    for i, override in enumerate(overrides):
        key = override_key(override)
        if key in SOURCES:
            out.append(
                f"{where(i, override, source, spec_path)}: {key} is set from {SOURCES[key]}; set that key instead "
                "(this override would silently replace its value)"
            )
        elif key in LAUNCH_KEYS:
            out.append(
                f"{where(i, override, source, spec_path)}: {key} is set by backend verl at launch from "
                f"{LAUNCH_KEYS[key]}"
            )
    return out


def searched_problems(keys: list[str], overrides: list[str], source: str, spec_path: Path | None) -> list[str]:
    """One line per override that pins a verl key a searched grpo-sweep key sets (the search would change nothing)."""
    out = []
    for i, override in enumerate(overrides):
        key = override_key(override)
        searched = [k for k in keys if SOURCES.get(key) == k or k == f"verl.{key}"]
        if searched:
            out.append(
                f"{where(i, override, source, spec_path)}: {key} pins what search.{searched[0]} varies (the search "
                "would change nothing); remove the override"
            )
    return out
