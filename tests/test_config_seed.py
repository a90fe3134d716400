"""The schema covers every parameter of the GRPO parameter reference (shared/seed, Chinese text).

The reference is parsed for its parameter names (table rows ``name<TAB>description``, section lines
``rl_config:``, the sampling table, the actor_resource code block). CI clones shared/ beside the
repository; when it is absent the committed copy tests/data/seed_parameters.txt is used.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from grpo.config import known_keys
from grpo.config.schema import GRPOConfig

REPO_ROOT = Path(__file__).resolve().parents[1]
SEED_NAME = "000_dccb2dd8d639ed20.txt"
COMMITTED_LIST = Path(__file__).parent / "data" / "seed_parameters.txt"
# Names the reference uses for Hydra composition rather than for a schema field.
COMPOSITION = {"defaults": "Hydra defaults list", "defaults.model": "defaults: [{model: [name]}] -> model.<name>"}

_SECTION = re.compile(r"^(defaults|megatron_training|actor_config|rl_config|generate_config)\s*[:：]\s*$")
_ROW = re.compile(r"^([a-z][a-z0-9_]*)\t")
_BULLET = re.compile(r"^•\s*([a-z][a-z0-9_]*)\s*:")
_CODE_KEY = re.compile(r"^(\s*)([a-z][a-z0-9_]*)\s*:")


def seed_path() -> Path | None:
    for base in (REPO_ROOT / "shared", REPO_ROOT.parent / "shared"):
        if (base / "seed" / SEED_NAME).is_file():
            return base / "seed" / SEED_NAME
    return None


def parse_seed(text: str) -> list[str]:
    """Dotted parameter names of the reference, in order."""
    names: list[str] = []
    section: str | None = None
    parent: str | None = None
    in_code = False
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("```"):
            in_code = not in_code
        elif in_code:
            if (m := _CODE_KEY.match(line)) and section:
                if m.group(1):
                    names.append(f"{section}.{parent}.{m.group(2)}")
                else:
                    parent = m.group(2)
                    names.append(f"{section}.{parent}")
        elif m := _SECTION.match(stripped):
            section = m.group(1)
        elif stripped == "采样配置":  # "sampling configuration"
            section = "generate_config.sampling_config"
        elif (m := _ROW.match(line)) or (m := _BULLET.match(stripped)):
            names.append(f"{section}.{m.group(1)}" if section else m.group(1))
    return list(dict.fromkeys(names))


def committed_parameters() -> list[str]:
    return [ln.strip() for ln in COMMITTED_LIST.read_text().splitlines() if ln.strip() and not ln.startswith("#")]


def test_committed_list_matches_the_seed():
    path = seed_path()
    if path is None:
        pytest.skip("shared/seed is not beside the repository; the committed list stands in")
    assert parse_seed(path.read_text()) == committed_parameters()


def test_parser_reads_rows_sections_and_code_blocks():
    text = "rl_config:\n\n参数名\t说明\nclip_ratio\tclip\n```\nactor_resource:\n    num_npus: 4\n```\n采样配置\ntop_p\tp\n"
    assert parse_seed(text) == ["rl_config.clip_ratio", "rl_config.actor_resource",
                                "rl_config.actor_resource.num_npus", "generate_config.sampling_config.top_p"]


def test_schema_covers_every_seed_parameter():
    keys = set(known_keys())
    sections = {name for name in GRPOConfig.model_fields}
    nested = {k.rsplit(".", 1)[0] for k in keys if "." in k}
    params = committed_parameters()
    assert len(params) >= 75
    missing = [p for p in params if p not in keys and p not in sections and p not in nested and p not in COMPOSITION]
    assert missing == []


def test_every_seed_parameter_is_set_in_the_7b_example():
    data = yaml.safe_load((REPO_ROOT / "configs" / "grpo_trainer_qwen25_7b_A3.yaml").read_text())
    absent = []
    for param in committed_parameters():
        if param in COMPOSITION:
            continue
        node = data
        for part in param.split("."):
            if not isinstance(node, dict) or part not in node:
                absent.append(param)
                break
            node = node[part]
    assert absent == []
    assert data["defaults"][0] == {"model": ["qwen25_7b"]}
