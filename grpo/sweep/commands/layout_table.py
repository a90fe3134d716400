"""The layout table of ``grpo-sweep validate SPEC``: per layout, DP, memory estimate and verdict.

Rows are the layouts of the spec's ``layout`` search dimension (or the base config's layout when the
layout is not searched), crossed with the other searched keys that change memory and take a few
discrete values (micro batch size, recompute, vLLM settings ...). Continuous keys and conditional
(``when:``) keys keep their base value.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from rich.table import Table

from grpo.config import GRPOConfig, load_config
from grpo.errors import UserError
from grpo.plan import Estimate, estimate
from grpo.sweep.backends import TrialBackend
from grpo.sweep.spec.models import SweepSpec
from grpo.sweep.spec.space import SearchSpace, distribution_values, format_value

# Searched keys that change the estimate (prefixes); others do not add rows.
MEMORY_KEYS = (
    "actor_config.micro_batch_size",
    "actor_config.tensor_model_parallel_size",
    "actor_config.pipeline_model_parallel_size",
    "megatron_training.recompute_",
    "megatron_training.sequence_parallel",
    "megatron_training.use_flash_attn",
    "megatron_training.use_distributed_optimizer",
    "megatron_training.bf16",
    "rl_config.max_prompt_length",
    "rl_config.actor_forward_micro_batch_size",
    "rl_config.ref_forward_micro_batch_size",
    "rl_config.actor_resource.num_npus",
    "rl_config.mini_batch_size",
    "rl_config.n_samples_per_prompt",
    "generate_config.infer_tensor_parallel_size",
    "generate_config.gpu_memory_utilization",
    "generate_config.max_num_seqs",
    "generate_config.max_model_len",
    "generate_config.max_num_batched_tokens",
    "generate_config.offload_",
    "generate_config.sampling_config.max_tokens",
)
MAX_ROWS = 48


@dataclass
class LayoutRow:
    """One row: its label, the searched values it stands for, and the estimate or the config problem."""

    label: str
    params: dict[str, Any] = field(default_factory=dict)
    estimate: Estimate | None = None
    problem: str | None = None  # the config rule it breaks (then no estimate)
    launch_problems: list[str] = field(default_factory=list)  # the backend's check (e.g. checkpoint missing)
    # What this machine lacks to launch it (TrialBackend.launch_warnings: e.g. no MindSpeed-RL checkout
    # here): shown, but the row still fits, since trials may launch on a node that has them.
    launch_warnings: list[str] = field(default_factory=list)

    @property
    def verdict(self) -> str:
        if self.estimate is None:
            return "invalid"
        if not self.estimate.feasible:
            return "does not fit"
        if self.launch_problems:
            return "blocked"
        return "fits" if self.estimate.estimated else "not estimated"  # MoE/MLA: neither pruned nor vouched for


def _spec_points(spec: SweepSpec) -> list[dict[str, Any]]:
    """Layout x memory-relevant discrete values of the spec's search space, at most MAX_ROWS."""
    space = SearchSpace.from_spec(spec)
    dims: dict[str, list[Any]] = {}
    for param in space.params:
        values = distribution_values(param.distribution)
        relevant = param.key == "layout" or param.key.startswith(MEMORY_KEYS)
        if values and relevant and not param.when:
            dims[param.key] = values
    keys = sorted(dims, key=lambda k: k != "layout")  # the layout first
    points = [dict(zip(keys, combo, strict=True)) for combo in itertools.product(*(dims[k] for k in keys))]
    return points[:MAX_ROWS] if points else [{}]


def _label(cfg: GRPOConfig | None, params: Mapping[str, Any]) -> str:
    name = str(params.get("layout") or (cfg.layout_name if cfg is not None else "base"))
    extra = ", ".join(f"{k.rsplit('.', 1)[-1]}={v}" for k, v in params.items() if k != "layout")
    return f"{name} ({extra})" if extra else name


def spec_layout_rows(spec: SweepSpec, backend: TrialBackend) -> list[LayoutRow]:
    """Rows for the layouts of a sweep (see the module docstring), on ``spec.plan.device_memory_gb`` NPUs.

    Each row also carries its backend's launch problems (``TrialBackend.check``: for mindspeed, the
    layout's Megatron checkpoint and the MindSpeed-RL checkout) and what this machine lacks to launch it
    (``TrialBackend.launch_warnings``: a driver without the checkout cannot see the NPU nodes' files).
    """
    rows = []
    for params in _spec_points(spec):
        overrides = [*spec.overrides, *(f"{k}={format_value(v)}" for k, v in params.items())]
        try:
            cfg = load_config(spec.base, overrides)
        except UserError as err:
            rows.append(LayoutRow(_label(None, params), params, None, err.problems[0]))
            continue
        est = estimate(cfg, spec.plan.device_memory_gb)
        rows.append(
            LayoutRow(
                _label(cfg, params),
                params,
                est,
                launch_problems=backend.check(cfg),
                launch_warnings=backend.launch_warnings(cfg),
            )
        )
    return rows


def config_layout_rows(
    configs: Mapping[str, GRPOConfig] | Iterable[GRPOConfig], device_memory_gb: float
) -> list[LayoutRow]:
    """Rows for configs given directly: a mapping label -> config, or configs labelled by their layout."""
    pairs = configs.items() if isinstance(configs, Mapping) else ((_label(c, {}), c) for c in configs)
    return [LayoutRow(label, {}, estimate(cfg, device_memory_gb)) for label, cfg in pairs]


def _without_file(message: str) -> str:
    """A problem line without its leading ``file: `` (the table is about one spec already)."""
    head, sep, rest = message.partition(": ")
    return rest if sep and head.endswith((".yaml", ".yml", "spec")) else message


def _why(row: LayoutRow) -> str:
    est = row.estimate
    if est is None:
        return _without_file(row.problem or "")
    if not est.feasible or not est.estimated:
        return "; ".join([est.reason, *(_without_file(p) for p in row.launch_problems)])
    headroom = est.usable_gb - max(est.train_peak_gb, est.generation_peak_gb)
    parts = [f"{headroom:.1f} GiB headroom", *est.notes, *(_without_file(p) for p in row.launch_problems)]
    parts += [f"warning: {_without_file(p)}" for p in row.launch_warnings]
    return "; ".join(parts)


def layout_table(spec: SweepSpec, backend: TrialBackend) -> Table:
    """The layout table of a sweep (``spec_layout_rows``)."""
    return rows_table(spec_layout_rows(spec, backend), spec.plan.device_memory_gb)


def rows_table(rows: list[LayoutRow], device_memory_gb: float) -> Table:
    """A rich Table of layout rows: TP x PP x DP, infer TP, GiB per NPU, KV cache, verdict, reason."""
    device = next((r.estimate.device_gb for r in rows if r.estimate), device_memory_gb)
    table = Table(title=f"layouts on {device:g} GiB NPUs (memory planner, docs/planner.md)")
    columns: tuple[tuple[str, Literal["left", "center", "right"]], ...] = (
        ("layout", "left"),
        ("TPxPPxDP", "center"),
        ("infer TP", "right"),
        ("params/NPU", "right"),
        ("train GiB", "right"),
        ("generate GiB", "right"),
        ("KV seqs", "right"),
        ("verdict", "left"),
        ("why", "left"),
    )
    for name, justify in columns:
        table.add_column(name, justify=justify, overflow="fold")
    for row in rows:
        est = row.estimate
        if est is None:
            table.add_row(row.label, "", "", "", "", "", "", "[red]invalid[/red]", _why(row))
            continue
        colour = {"fits": "green", "blocked": "yellow", "not estimated": "yellow"}.get(row.verdict, "red")
        reason = _why(row)
        if not est.estimated:  # the figures are NaN: say nothing rather than "nan"
            table.add_row(row.label, f"{est.train_tp}x{est.train_pp}x{est.train_dp}", str(est.infer_tp),
                          "", "", "", "", f"[{colour}]{row.verdict}[/{colour}]", reason)  # fmt: skip
            continue
        table.add_row(
            row.label,
            f"{est.train_tp}x{est.train_pp}x{est.train_dp}",
            str(est.infer_tp),
            f"{est.params_per_npu:.2f}B",
            f"{est.train_peak_gb:.1f}",
            f"{est.generation_peak_gb:.1f}",
            str(est.kv_sequences),
            f"[{colour}]{row.verdict}[/{colour}]",
            reason,
        )
    return table
