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
    first_class = set(RLConfig.model_fields) - RLConfig.long_tail
    assert all(f"| `{name}` |" in text or f"| `{name}` (alias" in text for name in first_class)


def test_reference_lists_the_long_tail_compactly():
    """Every MindSpeed-RL key that is not a first-class field is listed once, with its type and default."""
    text = generate()
    long_tail = text[text.index("## Long tail"):]
    assert "`reuse_fp32_param` bool=false" in long_tail and "`use_remove_padding` bool=false" in long_tail
    assert "`enable_prefix_caching` bool=false" in long_tail and "`spec` list|str=null" in long_tail
    assert "| `reuse_fp32_param` |" not in text  # no table row per long-tail key
    assert len(text.splitlines()) < 450
