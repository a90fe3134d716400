"""docs/config_reference.md is generated from the schema and must be regenerated when the schema changes."""

from __future__ import annotations

from pathlib import Path

from grpo.config.reference import generate
from grpo.config.rules import RULES
from grpo.config.schema import RLConfig

DOC = Path(__file__).resolve().parents[1] / "docs" / "config_reference.md"


def test_committed_reference_is_up_to_date():
    assert DOC.read_text() == generate(), "run: python -m grpo.config.reference > docs/config_reference.md"


def test_reference_lists_fields_ranges_enums_and_rules():
    text = generate()
    assert "| `clip_ratio` | float | 0.2 | >= 0, <= 1 |" in text
    assert "`group_norm`, `gae`" in text and "`kl`, `abs`, `mse`, `low_var_kl`" in text
    assert "| `shuffle_mini_batch` (alias `shuffle_minibatch`) |" in text
    assert all(f"`{rule.__name__}`" in text for rule in RULES)
    assert all(f"| `{name}` |" in text or f"| `{name}` (alias" in text for name in RLConfig.model_fields)
