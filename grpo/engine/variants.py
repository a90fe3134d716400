"""MindSpeed-RL's GRPO variants the engine applies, read from the config once, and what it refuses of them.

No torch here: ``check.py`` (the sweep's preflight) calls ``problems``. The keys are MindSpeed-RL's
``rl_config`` long-tail keys (``filter_groups_*``, ``overlong_buffer*``, ``rollout_max_tokens``,
``use_kl_in_reward``) and Megatron's ``hidden_dropout``/``attention_dropout``; ``dapo.py`` computes them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from grpo.config import GRPOConfig
from grpo.config.derived import fully_on_policy, trained_prompts


def _rl(cfg: GRPOConfig, key: str) -> Any:
    return getattr(cfg.rl_config, key, None)  # long-tail keys: typed by the manifest, not by RLConfig


@dataclass(frozen=True)
class Variants:
    filter_groups: bool  # DAPO dynamic sampling (filter_groups_enable)
    filter_metric: str  # a verifier name: groups whose scores of it are all equal are dropped
    filter_max_batches: int  # generation batches per iteration at most; <= 0: no limit (MindSpeed-RL's rule)
    filter_train_prompts: int  # groups trained on per iteration
    overlong: bool  # overlong_buffer_enable
    rollout_max_tokens: int
    overlong_buffer: int
    overlong_factor: float
    kl_in_reward: bool
    hidden_dropout: float
    attention_dropout: float

    @property
    def dropout(self) -> bool:
        return self.hidden_dropout > 0 or self.attention_dropout > 0


def read(cfg: GRPOConfig) -> Variants:
    """The variant settings of ``cfg`` (call ``problems`` first: it refuses the nulls read here)."""
    on = bool(_rl(cfg, "filter_groups_enable"))
    overlong = bool(_rl(cfg, "overlong_buffer_enable"))
    mt = cfg.megatron_training
    return Variants(
        filter_groups=on,
        filter_metric=str(_rl(cfg, "filter_groups_metric")),
        filter_max_batches=int(_rl(cfg, "filter_groups_max_batches") or 0) if on else 0,
        filter_train_prompts=trained_prompts(cfg),
        overlong=overlong,
        rollout_max_tokens=int(_rl(cfg, "rollout_max_tokens") or 0) if overlong else 0,
        overlong_buffer=int(_rl(cfg, "overlong_buffer") or 0) if overlong else 0,
        overlong_factor=float(_rl(cfg, "overlong_buffer_penalty_factor") or 0.0) if overlong else 0.0,
        kl_in_reward=bool(_rl(cfg, "use_kl_in_reward")),
        hidden_dropout=float(mt.hidden_dropout),
        attention_dropout=float(mt.attention_dropout),
    )


def problems(cfg: GRPOConfig) -> list[str]:
    """What the engine cannot carry out of these keys, one ``<source>: <key>: <why>`` line each. The checks
    MindSpeed-RL's ``validate_rl_args`` makes are repeated, so the engine fails where it would."""
    src, rl, out = cfg._source, cfg.rl_config, []
    if _rl(cfg, "filter_groups_enable"):
        metric = _rl(cfg, "filter_groups_metric")
        # A user reward function (file.py:fn) is named by its function, as its metric is (issue 41).
        names = [n.rpartition(":")[2].split("@")[0] if ":" in n else n for n in rl.verifier_function]
        if metric not in names:
            out.append(
                f"{src}: rl_config.filter_groups_metric: {metric!r} is not one of verifier_function "
                f"{names}; dynamic sampling filters on one verifier's scores"
            )
        train, most = _rl(cfg, "filter_groups_train_batch_size"), _rl(cfg, "filter_groups_max_batches")
        if not isinstance(train, int) or train < 1:
            out.append(f"{src}: rl_config.filter_groups_train_batch_size: {train} must be a number of prompts >= 1")
        elif not isinstance(most, int):
            out.append(f"{src}: rl_config.filter_groups_max_batches: {most} must be an integer (<= 0: no limit)")
        elif most > 0 and train > most * cfg.megatron_training.global_batch_size:
            out.append(
                f"{src}: rl_config.filter_groups_train_batch_size: {train} groups can never be kept from "
                f"filter_groups_max_batches={most} generation batches of global_batch_size="
                f"{cfg.megatron_training.global_batch_size} prompts"
            )
    if _rl(cfg, "overlong_buffer_enable"):
        buffer, rollout = _rl(cfg, "overlong_buffer"), _rl(cfg, "rollout_max_tokens")
        factor, max_tokens = _rl(cfg, "overlong_buffer_penalty_factor"), cfg.generate_config.sampling_config.max_tokens
        if not isinstance(buffer, int) or not 0 < buffer < max_tokens:
            out.append(
                f"{src}: rl_config.overlong_buffer: {buffer} must be > 0 and less than sampling_config.max_tokens "
                f"{max_tokens} (the penalty divides by it)"
            )
        if rollout != max_tokens:
            out.append(
                f"{src}: rl_config.rollout_max_tokens: {rollout} must equal generate_config.sampling_config.max_tokens "
                f"{max_tokens} with overlong_buffer_enable (MindSpeed-RL's validate_rl_args)"
            )
        if not isinstance(factor, int | float) or not math.isfinite(factor):
            out.append(f"{src}: rl_config.overlong_buffer_penalty_factor: {factor} must be a number")
    mt, eng = cfg.megatron_training, cfg.engine
    if (mt.hidden_dropout > 0 or mt.attention_dropout > 0) and eng.recompute_old_logprobs and not fully_on_policy(cfg):
        out.append(
            f"{src}: engine.recompute_old_logprobs: with dropout the first mini batch's old log-probs would come "
            f"from its dropout forward, not from a dropout-free pass as MindSpeed-RL's; set it false (the "
            f"sampler's log-probs, dropout-free)"
        )
    return out
