"""``profiler_config`` and ``msprobe_config``: MindSpeed-RL's MindStudio tools (mindstudio_config.py)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from grpo.config.schema._base import Section


class ProfilerRoleConfig(Section):
    """MindSpeed-RL's ``ProfilerConfig`` of one role (mindspeed_rl/config_cls/mindstudio_config.py): the
    torch_npu profiler around chosen iterations. Defaults are MindSpeed-RL's."""

    profile: bool = Field(False, description="Profile this role.")
    mstx: bool = Field(False, description="Lightweight mstx range markers instead of a full profile.")
    stage: str = Field("all", description="Which stage to profile (all, or one stage's name).")
    profile_save_path: str = Field("", description="Folder of the profiling output.")
    profile_export_type: Literal["text", "db"] = Field("text", description="Export format of the profile.")
    profile_level: Literal["level_none", "level0", "level1", "level2"] = Field(
        "level0", description="Profiler level (more detail, more overhead)."
    )
    profile_with_memory: bool = Field(False, description="Record memory.")
    profile_record_shapes: bool = Field(False, description="Record tensor shapes.")
    profile_with_cpu: bool = Field(True, description="Profile CPU activity.")
    profile_with_npu: bool = Field(True, description="Profile NPU activity.")
    profile_with_module: bool = Field(False, description="Record Python module call stacks.")
    profile_step_start: int = Field(1, ge=0, description="First profiled iteration.")
    profile_step_end: int = Field(2, ge=0, description="Iteration the profile stops at (exclusive).")
    profile_analysis: bool = Field(False, description="Analyse the profile after collecting it.")
    profile_ranks: str | list[int] = Field("all", description="Ranks profiled: all, or a list of ranks.")


class ProfilerSectionConfig(Section):
    """``profiler_config``: MindSpeed-RL's GRPO entry point reads the ``integrated`` role only."""

    integrated: ProfilerRoleConfig | None = Field(
        None, description="Profiler of the integrated worker (actor, reference and rollout)."
    )


class MsprobeConfig(Section):
    """MindSpeed-RL's ``MsprobeConfig`` (mindspeed_rl/config_cls/mindstudio_config.py): msprobe data dumps
    for precision debugging. Defaults are MindSpeed-RL's."""

    msprobe: bool = Field(False, description="Turn msprobe on.")
    dump_path: str = Field("./msprobe_dump", description="Folder of the dumps.")
    key_data_dump: bool = Field(False, description="Dump key data (prompts, responses, rewards, advantages).")
    configurations_dump: bool = Field(False, description="Dump the configurations.")
    actor_train_dump: bool = Field(False, description="Dump the actor's training forward/backward.")
    actor_infer_dump: bool = Field(False, description="Dump the actor's rollout.")
    token_range_start: int = Field(0, ge=0, description="First generated token dumped (actor_infer_dump).")
    token_range_end: int = Field(0, ge=0, description="Last generated token dumped (actor_infer_dump).")
    reference_dump: bool = Field(False, description="Dump the reference forward.")
    critic_train_dump: bool = Field(False, description="Dump the critic's training (PPO).")
    step_start: int = Field(0, ge=0, description="First dumped iteration.")
    step_end: int = Field(0, ge=0, description="Last dumped iteration.")
