"""The spec's backend and machine sections: ``cluster``, ``tracking``, ``mindspeed``, ``verl``, ``trl``, ``plan``.

Re-exported by grpo/sweep/spec/models.py; the key reference is docs/sweep_spec.md and docs/backend_*.md.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, field_validator

from grpo.sweep.spec.address import parse as parse_address
from grpo.sweep.spec.strict import CONTROL, _Strict

MAX_NUM_CPUS = 4096  # more than any node has: a typo, and Ray would plan for it
MAX_RESOURCE = 1_000_000  # a custom resource (NPUs, ...) per local cluster
RAY_OWN_RESOURCES = {"CPU": "set CPUs with cluster.num_cpus", "GPU": "GPUs are found by Ray; do not declare them"}


class ClusterSpec(_Strict):
    address: str = "local"
    # Only for a local cluster (address: local): CPUs to offer (default: all cores) and custom resources
    # to declare, e.g. {NPU: 16} to schedule NPU trials on one Ascend host without `ray start`.
    num_cpus: int | None = Field(None, ge=1, le=MAX_NUM_CPUS)
    resources: dict[str, Annotated[float, Field(ge=0, le=MAX_RESOURCE)]] = Field(default_factory=dict)

    @field_validator("resources")
    @classmethod
    def _resources(cls, value: dict[str, float]) -> dict[str, float]:
        for name in value:
            if not name.strip() or CONTROL.search(name):
                raise ValueError(f"resource names must be words such as NPU (got {name!r})")
            if name in RAY_OWN_RESOURCES:
                raise ValueError(f"{name}: {RAY_OWN_RESOURCES[name]}, not in cluster.resources")
        return value

    @field_validator("address")
    @classmethod
    def _address(cls, value: str) -> str:
        if value not in ("local", "auto"):
            parse_address(value)  # host:port or ray://host:port, as Ray reads them; its ValueError is the problem
        return value


class TrackingSpec(_Strict):
    wandb: Literal["off", "offline", "online"] = "off"
    project: str = Field("grpo-sweep", min_length=1)  # W&B and SwanLab project; each study is a group in it
    tensorboard: bool = False
    swanlab: Literal["off", "offline", "local", "cloud"] = "off"  # rl_config.swanlab_mode of every run

    @field_validator("wandb", "swanlab", mode="before")
    @classmethod
    def _yaml_off(cls, value: Any) -> Any:
        # YAML 1.1 reads a bare `off` as False.
        return "off" if value is False else value

    @field_validator("swanlab")
    @classmethod
    def _swanlab_installed(cls, value: str) -> str:
        from grpo.config.rules import swanlab_missing

        problem = swanlab_missing(value)
        if problem:
            raise ValueError(problem)
        return value


def _env_as_text(value: Any) -> Any:
    """Environment variables' values as strings (a YAML ``1`` or ``true`` is what a process sees as text)."""
    if isinstance(value, dict):
        return {k: v if isinstance(v, str) or v is None else str(v) for k, v in value.items()}
    return value


EnvVars = Annotated[dict[str, str], BeforeValidator(_env_as_text)]  # mindspeed.env, verl.env


class MindSpeedSpec(_Strict):
    """How the mindspeed backend launches MindSpeed-RL (ignored by the embedded backend).

    ``path`` is the MindSpeed-RL checkout; relative checkpoint paths are relative to it, as in
    MindSpeed-RL's own configs (it runs there). ``checkpoints`` maps a layout name to the Megatron
    checkpoint converted for that layout's TP/PP, and/or ``pattern`` with ``{tp}``, ``{pp}``,
    ``{layout}``, ``{model}`` placeholders.
    """

    path: str | None = None
    python: str = Field(default_factory=lambda: sys.executable)
    entry: str = "cli/train_grpo.py"
    env: EnvVars = Field(default_factory=dict)
    stall_timeout: float = Field(1800, gt=0)
    kill_grace: float = Field(30, ge=0)
    checkpoints: dict[str, str] = Field(default_factory=dict)
    ref_model_load_path: str | None = None

    @field_validator("path", "checkpoints", "ref_model_load_path", "python", mode="before")
    @classmethod
    def _paths_as_text(cls, value: Any) -> Any:
        if isinstance(value, Path):
            return str(value)
        if isinstance(value, dict):
            return {k: str(v) if isinstance(v, Path) else v for k, v in value.items()}
        return value

    @property
    def checkout(self) -> Path | None:
        """The MindSpeed-RL checkout as an absolute path (None when not set)."""
        return Path(self.path).expanduser().resolve() if self.path else None

    @property
    def interpreter(self) -> str:
        """A bare name (``python3``) is looked up on PATH at launch; a path gets ``~`` expanded."""
        return (
            str(Path(self.python).expanduser()) if ("/" in self.python or self.python.startswith("~")) else self.python
        )

    def resolve(self, path: str | Path) -> Path:
        """A path from the config or spec: absolute as given, else relative to the checkout."""
        p = Path(path).expanduser()
        checkout = self.checkout
        return p if p.is_absolute() or checkout is None else checkout / p

    def anchored(self) -> MindSpeedSpec:
        """A copy whose checkout path is absolute: the settings mean the same in a worker with another cwd."""
        checkout = self.checkout
        return self.model_copy(update={"path": str(checkout) if checkout else None})


class VerlSpec(_Strict):
    """How backend verl launches a trial (docs/backend_verl.md): each trial is a Ray job running ``python -m
    module`` (verl's ``main_ppo``) with the trial's overrides, submitted to the Jobs API at ``address`` (default: the
    dashboard of the cluster the trial's worker is in). ``overrides`` are verl-native overrides every trial gets
    last (a rollout setting MindSpeed-RL has no key for; not a key the trial sets); preflight validates them with the
    rest. A run that logs nothing for ``stall_timeout`` s is treated as stalled."""

    python: str | None = Field(None, min_length=1)  # the job's interpreter (a verl environment); default: this one
    module: str = Field("verl.trainer.main_ppo", min_length=1)
    address: str | None = Field(None, min_length=1)
    env: EnvVars = Field(default_factory=dict)
    gpus_per_node: int = Field(8, ge=1)
    stall_timeout: float = Field(3600, gt=0)
    overrides: list[str] = Field(default_factory=list)

    def problems(self, backend: str, source: str) -> list[str]:
        """One line when a ``verl:`` setting is given to another backend (``load_spec`` calls it)."""
        if backend != "verl" and self.model_fields_set:
            key = sorted(self.model_fields_set)[0]
            return [f"{source}: verl.{key}: only backend verl reads verl: (backend is {backend})"]
        bad = [o for o in self.overrides if "=" not in o.lstrip("+~")]
        return [f"{source}: verl.overrides: {bad[0]}: not a Hydra override key=value"] if bad else []


class TrlSpec(_Strict):
    """How backend trl runs a trial (docs/backend_trl.md): ``launcher: worker`` trains in the trial's Ray worker;
    ``accelerate`` runs ``accelerate launch [--config_file F] --num_processes N [extra_args] -m
    grpo.sweep.backends.trl.worker`` as its subprocess (several GPUs; DeepSpeed or FSDP through the accelerate
    config), asking Ray for ``num_processes`` GPUs. A stopped run has ``stop_grace`` s to end before its process
    group is killed. ``config_file`` is relative to the spec's folder. ``args``: TRL ``GRPOConfig`` fields every
    trial gets beside the rendered ones (``loss_type: bnpo``, ``mask_truncated_completions: true``), validated
    by constructing TRL's own GRPOConfig on the driver (trl/backend.py ``native_problems``)."""

    launcher: Literal["worker", "accelerate"] = "worker"
    num_processes: int = Field(1, ge=1)
    config_file: str | None = Field(None, min_length=1)
    extra_args: list[str] = Field(default_factory=list)
    stop_grace: float = Field(60, ge=0)
    args: dict[str, Any] = Field(default_factory=dict)

    def problems(self, backend: str, source: str, spec_dir: Path) -> list[str]:
        """One line per setting that cannot work, naming its key (``load_spec`` calls it)."""
        if backend != "trl":
            set_keys = sorted(self.model_fields_set)
            return [f"{source}: trl.{k}: only backend trl reads trl: (backend is {backend})" for k in set_keys[:1]]
        out = []
        if self.launcher == "worker":
            out += [
                f"{source}: trl.{key}: needs trl.launcher: accelerate (the worker trains in one process)"
                for key in ("num_processes", "config_file", "extra_args")
                if key in self.model_fields_set and getattr(self, key) not in (1, None, [])
            ]
        if self.config_file is not None and not self.config_path(spec_dir).is_file():
            out.append(f"{source}: trl.config_file: {self.config_file}: no such file")
        own = ("--num_processes", "--config_file", "-m", "--module", "--cpu")  # what the backend sets itself
        for arg in self.extra_args:
            if arg.split("=", 1)[0] in own:
                out.append(f"{source}: trl.extra_args: {arg}: set by the backend (trl.num_processes, trl.config_file)")
        return out

    def config_path(self, spec_dir: Path) -> Path:
        path = Path(str(self.config_file)).expanduser()
        return path if path.is_absolute() else (spec_dir / path).resolve()

    def anchored(self, spec_dir: Path) -> TrlSpec:
        """A copy whose config_file is absolute: the settings mean the same in a worker with another cwd."""
        return self.model_copy(update={"config_file": str(self.config_path(spec_dir)) if self.config_file else None})


class PlanSpec(_Strict):
    device_memory_gb: float = Field(64, gt=0)
    enabled: bool = True
