"""``schedule``: config values that change during a run, ``{dotted key: {first iteration: value}}``.

    schedule:
      rl_config.clip_ratio: {0: 0.2, 20: 0.28}
      actor_config.lr: {0: 1.0e-6, 40: 5.0e-7}

A value applies while the number of completed iterations is ``>= start``: ``{20: x}`` takes effect for the
21st iteration, exactly as a run resumed from the iteration-20 checkpoint with ``x`` set would train (that is
what a population-based-training segment is; its winner's history replays as one schedule). Before a key's
first start its plain config value holds. Starts may be written as int-like strings (JSON, study attrs); they
become ints. Only ``SCHEDULABLE`` keys: those the embedded engine re-reads between iterations, each one tested
to change training when switched (tests/test_engine_schedule.py). Layout, batch-shape, model and data keys
never are.

This module is the API. The checks themselves (``SCHEDULABLE``, the normalisation, keys, starts and values) live
with the schema in ``schema/root.py``, which runs them whenever a config is built or ``cfg.schedule`` is assigned;
``problems`` adds the config's cross-field rules at each start (``load_config`` and the engine's check call it).
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from grpo.config.rules import check_rules
from grpo.config.schema.root import SCHEDULABLE, GRPOConfig, Schedule, check_schedule, schedule_owner
from grpo.errors import UserError, describe_error

__all__ = ["SCHEDULABLE", "Schedule", "apply", "plain_value", "problems", "starts", "values_at"]


def problems(cfg: GRPOConfig) -> list[str]:
    """Every problem of ``cfg.schedule``, ``<source>: schedule.<key>: <why>`` each: its keys, starts and values,
    and the config's cross-field rules at each start (``min_lr <= lr`` with both scheduled...)."""
    if not cfg.schedule:
        return []
    src = cfg._source
    _, found = check_schedule(cfg.schedule, cfg, cfg.megatron_training.train_iters, cfg.rl_config.kl_ctrl_type)
    out = [f"{src}: {line}" for line in found]
    if out:
        return out
    for start in starts(cfg):
        out += [f"{src}: schedule (from iteration {start}): {line}" for line in check_rules(apply(cfg, start))]
    return out


def starts(cfg: GRPOConfig) -> list[int]:
    """The iterations (completed) at which some scheduled value changes, in order."""
    return sorted({start for points in (cfg.schedule or {}).values() for start in points})


def plain_value(cfg: GRPOConfig, key: str) -> Any:
    owner = schedule_owner(cfg, key)
    if owner is None:
        raise UserError(f"{cfg._source}: schedule.{key}: no such config key")
    return getattr(*owner)


def values_at(cfg: GRPOConfig, iteration: int) -> dict[str, Any]:
    """Each scheduled key's value for the iteration after ``iteration`` completed ones: the value of its latest
    start ``<= iteration``, else the key's plain config value (as ``cfg`` is written, not an applied copy)."""
    out: dict[str, Any] = {}
    for key, points in (cfg.schedule or {}).items():
        begun = [start for start in points if start <= iteration]
        out[key] = points[max(begun)] if begun else plain_value(cfg, key)
    return out


def apply(cfg: GRPOConfig, iteration: int) -> GRPOConfig:
    """A copy of ``cfg`` with the schedule's values at ``iteration`` set as plain values (validated as any
    assignment; UserError naming the key when the schema refuses one). ``cfg`` is not changed; the copy keeps
    the schedule, so apply the config as written, not an applied copy, for another iteration."""
    values = values_at(cfg, iteration)
    out = cfg.model_copy(deep=True)
    for key, value in values.items():
        section, field = schedule_owner(out, key) or (None, key)
        if section is None:
            raise UserError(f"{cfg._source}: schedule.{key}: no such config key")
        try:
            setattr(section, field, value)
        except ValidationError as err:
            raise UserError(
                f"{cfg._source}: schedule.{key}: from iteration {iteration}: {describe_error(err.errors()[0])}"
            ) from None
    return out
