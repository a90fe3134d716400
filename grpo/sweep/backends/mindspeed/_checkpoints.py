"""Which converted Megatron checkpoint a trial's layout loads, and what is wrong with it."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from grpo._fs import CHECKPOINT_TRACKER
from grpo.config import GRPOConfig
from grpo.sweep.spec.models import MindSpeedSpec


def original_weights(cfg: GRPOConfig, settings: MindSpeedSpec) -> tuple[str | None, str]:
    """The Megatron checkpoint converted for this layout, and the key that named it.

    ``mindspeed.checkpoints.<layout>`` wins, then ``mindspeed.checkpoints.pattern``, then the config's
    own ``actor_config.load`` (a layout entry may set it).
    """
    layout = cfg.layout_name
    actor = cfg.actor_config
    if layout in settings.checkpoints:
        return settings.checkpoints[layout], f"mindspeed.checkpoints.{layout}"
    if "pattern" in settings.checkpoints:
        values = {
            "tp": actor.tensor_model_parallel_size,
            "pp": actor.pipeline_model_parallel_size,
            "layout": layout,
            "model": actor.model,
        }
        try:
            return settings.checkpoints["pattern"].format(**values), "mindspeed.checkpoints.pattern"
        except (KeyError, IndexError, ValueError) as err:
            raise ValueError(
                f"mindspeed.checkpoints.pattern: bad placeholder {err} (use {{tp}}, {{pp}}, {{layout}}, {{model}})"
            ) from None
    return actor.load, "actor_config.load"


def checkpoint_split(path: Path) -> tuple[int, int] | None:
    """(TP, PP) a Megatron checkpoint was saved with, from its ``mp_rank_XX[_YYY]`` folders, if it has any."""
    try:
        text = (path / CHECKPOINT_TRACKER).read_text().strip()
    except OSError:
        return None
    step = path / ("release" if text == "release" else f"iter_{int(text):07d}" if text.isdigit() else text)
    try:
        ranks = [[int(x) for x in p.name.split("_")[2:]] for p in step.glob("mp_rank_*") if p.is_dir()]
    except ValueError:
        return None
    if not ranks or not all(ranks):
        return None
    return 1 + max(r[0] for r in ranks), 1 + max(r[1] if len(r) > 1 else 0 for r in ranks)


@dataclass
class CheckpointCheck:
    """What is wrong with a layout's converted checkpoint, by how it is known."""

    unnamed: list[str] = field(default_factory=list)  # nothing names one, or a bad pattern: the config says so
    missing: list[str] = field(default_factory=list)  # the named folder is not on this machine
    wrong_split: list[str] = field(default_factory=list)  # it is here, converted for another TP/PP

    @property
    def all(self) -> list[str]:
        return self.unnamed + self.missing + self.wrong_split


def check_checkpoint(cfg: GRPOConfig, settings: MindSpeedSpec, source: str = "spec") -> CheckpointCheck:
    """Why this layout's checkpoint cannot be loaded: none named, missing, or converted for another TP/PP."""
    layout = cfg.layout_name
    actor = cfg.actor_config
    tp, pp = actor.tensor_model_parallel_size, actor.pipeline_model_parallel_size
    try:
        weights, key = original_weights(cfg, settings)
    except ValueError as err:
        return CheckpointCheck(unnamed=[f"{source}: {err}"])
    if not weights:
        return CheckpointCheck(
            unnamed=[
                f"{source}: layout {layout}: no Megatron checkpoint named; set "
                f"mindspeed.checkpoints.{layout}, mindspeed.checkpoints.pattern or actor_config.load"
            ]
        )
    path = settings.resolve(weights)
    if not path.is_dir():
        return CheckpointCheck(
            missing=[
                f"{source}: layout {layout}: Megatron checkpoint {path} not found ({key}); convert the "
                f"weights for TP{tp} PP{pp} with MindSpeed-LLM's checkpoint converter"
            ]
        )
    split = checkpoint_split(path)
    if split is not None and split != (tp, pp):
        return CheckpointCheck(
            wrong_split=[
                f"{source}: layout {layout}: checkpoint {path} ({key}) was converted for TP{split[0]} "
                f"PP{split[1]}, the layout needs TP{tp} PP{pp}"
            ]
        )
    return CheckpointCheck()


def checkpoint_problems(cfg: GRPOConfig, settings: MindSpeedSpec, source: str = "spec") -> list[str]:
    """Every problem of ``check_checkpoint``, as one list."""
    return check_checkpoint(cfg, settings, source).all
