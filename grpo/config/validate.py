"""``grpo-sweep validate CONFIG [OVERRIDE ...]``: print the resolved config and its derived layout.

Exit 0 after printing; every user mistake propagates as a UserError, which the CLI prints as one
``error:`` line per problem with exit code 2. ``check`` is the backend's own check (``grpo-sweep`` passes the
embedded engine's unless ``--backend mindspeed``): a config it would not carry out is an error too. Overridden
keys that the config keeps from changing training (``inert.lint``) are ``warning:`` lines on stderr.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import Any

import yaml
from rich.console import Console
from rich.table import Table

from grpo.config.compose import load_config
from grpo.config.derived import Derived, derive
from grpo.config.inert import lint, override_keys
from grpo.config.schema import GRPOConfig
from grpo.errors import UserError


def select_section(cfg: GRPOConfig, section: str) -> Any:
    """The value at a dotted section path (``rl_config``, ``generate_config.sampling_config``)."""
    node: Any = cfg.to_dict()
    walked: list[str] = []
    for part in section.split("."):
        if not isinstance(node, dict) or part not in node:
            options = ", ".join(node) if isinstance(node, dict) else "none"
            where = ".".join(walked) or "the config"
            raise UserError(f"--section {section}: no section '{part}' in {where} (available: {options})")
        node = node[part]
        walked.append(part)
    return node


def layout_table(cfg: GRPOConfig, derived: Derived) -> Table:
    arch = cfg.model_arch.architecture
    model = cfg.actor_config.model + ("" if arch == "dense" else f" ({arch})")  # MoE / MLA named
    title = f"derived layout: {cfg.layout or 'no named layout'}, model {model}"
    table = Table(title=title)
    table.add_column("derived")
    table.add_column("value", justify="right")
    table.add_column("from")
    how = Derived.how()
    for name, value in derived.as_dict().items():
        table.add_row(name, str(value), how[name])
    return table


def cli_validate(
    target: str,
    overrides: Sequence[str] = (),
    section: str | None = None,
    check: Callable[[GRPOConfig], list[str]] | None = None,
) -> int:
    """Load, check and print ``target`` (with ``overrides``); 0 when it is valid (and ``check`` finds nothing)."""
    cfg = load_config(target, overrides=list(overrides))
    problems = check(cfg) if check is not None else []
    if problems:
        raise UserError(problems[0], problems)
    for line in lint(cfg, override_keys(overrides)):
        print(f"warning: {cfg._source}: {line}", file=sys.stderr)
    data = select_section(cfg, section) if section else cfg.to_dict()
    text = yaml.safe_dump(data, sort_keys=False).removesuffix("...\n")
    console = Console(soft_wrap=True)
    console.print(f"# {cfg._source}: valid" + (f" ({section})" if section else ""), highlight=False)
    console.out(text, highlight=False)
    console.print(layout_table(cfg, derive(cfg)))
    return 0
