"""backend verl's key table: every MindSpeed-RL and schema key is applied, refused or classified, each applied
key's verl key exists in verl's real config, and docs/backend_verl.md shows the table as the code has it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from grpo.engine.coverage import TABLE, Kind
from grpo.sweep.backends.verl import coverage

REPO = Path(__file__).resolve().parents[1]


def test_every_key_is_classified_once():
    table = coverage.KEYS.table()
    assert set(table) == set(TABLE)
    assert {r.kind for r in table.values()} == {Kind.APPLIED, Kind.REFUSED, Kind.NO_EFFECT}
    for name in (*coverage.APPLIED, *coverage.NO_EFFECT, *coverage.VALUES, *coverage.REFUSED):
        assert name in TABLE, name


def test_the_doc_shows_the_table():
    doc = (REPO / "docs" / "backend_verl.md").read_text(encoding="utf-8")
    run = "run: python -m grpo.sweep.backends.verl.coverage --write docs/backend_verl.md"
    assert doc.endswith(coverage.KEYS.key_table()) and doc.count(coverage.KEYS.heading) == 1, run


def test_applied_keys_name_verl_keys_that_exist():
    """Every verl key an APPLIED row names (actor_rollout_ref.*, algorithm.*, data.*, trainer.*) is in verl's own
    composed ppo_trainer config: the table cannot promise a key verl does not have."""
    pytest.importorskip("verl")
    from omegaconf import OmegaConf

    from grpo.sweep.backends.verl import _validate

    base = _validate.compose()
    named = set()
    for reason in coverage.APPLIED.values():
        named |= set(re.findall(r"\b((?:actor_rollout_ref|algorithm|data|trainer)\.[\w.]*\w)", reason))
    assert len(named) > 30
    for key in sorted(named):
        parent, _, leaf = key.rpartition(".")
        node = OmegaConf.select(base, parent)
        assert node is not None and leaf in node.keys(), key
