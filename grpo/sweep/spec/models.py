"""The sweep spec (``sweeps/*.yaml``) as validated pydantic models; nothing here reads files or imports Optuna.

``grpo.sweep.spec.load.load_spec(path)`` reads a spec file and builds a ``SweepSpec`` (with the checks that
need the config dir, the search space and the sampler); this module is only the data model and the
checks a single value allows. The full key reference is docs/sweep_spec.md.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationInfo,
    field_validator,
    model_validator,
)

from grpo.sweep.spec.address import parse as parse_address
from grpo.sweep.spec.objectives import DEFAULT_K, CurveReducer, get_reducer

STUDY_NAME = re.compile(r"^[A-Za-z0-9_-]+$")
MAX_STUDY_NAME = 100  # a folder name under studies/ and reports/ (file systems stop at 255 bytes)
MAX_NUM_CPUS = 4096  # more than any node has: a typo, and Ray would plan for it
MAX_RESOURCE = 1_000_000  # a custom resource (NPUs, ...) per local cluster
RAY_OWN_RESOURCES = {"CPU": "set CPUs with cluster.num_cpus", "GPU": "GPUs are found by Ray; do not declare them"}
CONTROL = re.compile(r"[\x00-\x1f\x7f]")
BACKEND = re.compile(r"^(embedded|mindspeed|trl|verl|[A-Za-z_][\w.]*:[A-Za-z_]\w*)$")
STORAGE_SCHEMES = ("journal:", "sqlite:///", "postgresql://", "postgresql+", "mysql://", "mysql+")
# The names a spec may use; grpo.sweep.spec.samplers and grpo.sweep.spec.objectives map each to its class
# (tests/test_spec_load.py checks the two agree).
SamplerName = Literal["tpe", "random", "grid", "cmaes", "nsga2", "gp"]
PrunerName = Literal["median", "successive_halving", "hyperband", "none"]
ReducerName = Literal["last", "max", "min", "mean_last_k", "auc", "final_fit"]
KeepRule = Literal["best", "all", "none"]


# ------------------------------------------------------------------------------------------ models
class _Strict(BaseModel):
    """Unknown keys are errors everywhere in the spec; ``true``/``false`` are no numbers; numbers are finite."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    @field_validator("*", mode="before")
    @classmethod
    def _no_bool_numbers(cls, value: Any, info: ValidationInfo) -> Any:
        # pydantic reads `trials: true` as 1; YAML's true/yes/on are never meant as a count.
        if isinstance(value, bool) and info.field_name is not None:
            annotation = cls.model_fields[info.field_name].annotation
            kinds = set(getattr(annotation, "__args__", ())) | {annotation}
            if bool not in kinds and kinds & {int, float}:
                word = "an integer" if int in kinds else "a number"
                raise ValueError(f"must be {word} (got {str(value).lower()})")
        return value


class SearchEntry(_Strict):
    """One searched key: a Hydra sweep expression, active only when ``when`` holds.

    ``when`` maps other searched keys to the value (or list of values) they must take for this one
    to be sampled, e.g. ``{rl_config.kl_ctrl_type: adaptive}``.
    """

    values: str
    when: dict[str, Any] | None = None

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, data: Any) -> Any:
        if isinstance(data, str):
            return {"values": data}
        if isinstance(data, dict):
            return data
        raise ValueError(
            f"must be a Hydra sweep expression such as choice(...) or interval(...) (got {data!r}); "
            "fixed values go under overrides"
        )


class ObjectiveSpec(_Strict):
    """One objective: a metric, its direction, and the rule that turns its curve into a value."""

    metric: str = Field(min_length=1)
    direction: Literal["maximize", "minimize"] = "maximize"
    reduce: ReducerName = "last"
    k: int | None = Field(None, ge=1)

    @model_validator(mode="after")
    def _k_only_for_mean_last_k(self) -> ObjectiveSpec:
        if CONTROL.search(self.metric):
            raise ValueError(f"metric: must be one line with no control characters (got {self.metric!r})")
        if self.reduce == "mean_last_k":
            if self.k is None:
                self.k = DEFAULT_K
        elif self.k is not None:
            raise ValueError(f"k: only used with reduce: mean_last_k (reduce is {self.reduce})")
        return self

    def reducer(self) -> CurveReducer:
        """The ``CurveReducer`` for this objective."""
        return get_reducer(self.reduce, self.k)


class SamplerSpec(_Strict):
    name: SamplerName = "tpe"
    seed: int | None = Field(None, ge=0, le=2**32 - 1)  # what numpy's RandomState accepts
    options: dict[str, Any] = Field(default_factory=dict)


class CollapseRule(_Strict):
    """Stop a trial whose held-out ``metric`` (higher is better, e.g. accuracy) falls more than
    ``below_base`` under its own base policy's value (iteration 0): the run has collapsed, and on the
    tabular GRPO benchmark such runs rarely recover within their budget (benchmarks/search_efficiency.py)."""

    metric: str = Field("eval/acc_greedy", min_length=1)
    below_base: float | None = Field(0.10, gt=0)  # null: off
    # Training-dynamics rules (grpo/sweep/run/collapse.py), each off unless given, on the mean over seeds:
    kl_spike: float | None = Field(None, gt=1)  # actor/kl_loss above this multiple of its trailing median
    kl_max: float | None = Field(None, gt=0)  # actor/kl_loss above this bound
    reward_drop: float | None = Field(None, gt=0)  # grpo/score/mean's trailing mean this far below its best
    zero_reward: int | None = Field(None, ge=1)  # grpo/score/mean at or below reward_floor this many iterations
    reward_floor: float | None = None  # default 0.0
    entropy_floor: float | None = Field(None, gt=0)  # actor/entropy below it
    window: int | None = Field(None, ge=2)  # trailing iterations of kl_spike's median, reward_drop's mean (5)

    @model_validator(mode="after")
    def _used(self) -> CollapseRule:
        if self.reward_floor is not None and self.zero_reward is None:
            raise ValueError("reward_floor: only used with zero_reward")
        if self.window is not None and self.kl_spike is None and self.reward_drop is None:
            raise ValueError("window: only used with kl_spike or reward_drop")
        return self


class CurveRule(_Strict):
    """Stop a trial only when its fitted learning curve's upper bound at the last iteration lies below the best
    finished trial's lower bound (grpo/sweep/run/curve_stop.py)."""

    min_points: int = Field(5, ge=4)  # evaluations after the start before it acts
    confidence: float = Field(0.95, gt=0, lt=1)
    bounds: tuple[float, float] | None = None  # the metric's range, e.g. [0, 1] for accuracy

    @field_validator("bounds")
    @classmethod
    def _ordered(cls, value: tuple[float, float] | None) -> tuple[float, float] | None:
        if value is not None and not value[0] < value[1]:
            raise ValueError(f"must be [low, high] with low < high (got {list(value)})")
        return value


class PrunerSpec(_Strict):
    name: PrunerName = "median"
    warmup_steps: int = Field(0, ge=0)
    options: dict[str, Any] = Field(default_factory=dict)
    collapse: CollapseRule | None = None  # the GRPO-aware rule, on top of (or without) the Optuna pruner
    curve: CurveRule | None = None  # the curve-aware stopper, on top of (or without) the Optuna pruner
    patience: int | None = Field(None, ge=0)  # wrap the pruner in optuna.pruners.PatientPruner
    min_delta: float | None = Field(None, ge=0)  # PatientPruner's min_delta (default 0.0)

    @model_validator(mode="after")
    def _patience(self) -> PrunerSpec:
        if self.min_delta is not None and self.patience is None:
            raise ValueError("min_delta: only used with patience")
        return self


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
    last (a reward function, a rollout setting MindSpeed-RL has no key for); preflight validates them with the
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
    group is killed. ``config_file`` is relative to the spec's folder."""

    launcher: Literal["worker", "accelerate"] = "worker"
    num_processes: int = Field(1, ge=1)
    config_file: str | None = Field(None, min_length=1)
    extra_args: list[str] = Field(default_factory=list)
    stop_grace: float = Field(60, ge=0)

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


class ExploreSpec(_Strict):
    """How a branch changes the parameters it copied (Ray Tune's ``PopulationBasedTraining`` explore step):
    each schedulable searched key is resampled from its search space with ``resample_probability``, else
    multiplied by one of ``perturb`` (a choice or an integer moves to a neighbouring value), within its bounds."""

    resample_probability: float = Field(0.25, ge=0, le=1)
    perturb: list[Annotated[float, Field(gt=0)]] = Field(default_factory=lambda: [0.8, 1.2], min_length=1)
    # perturb: the above (PBT). pb2: a time-varying GP-UCB picks a branch's float and int values from the
    # population's improvements so far (Population Based Bandits; grpo/sweep/run/pb2.py); choices are perturbed.
    method: Literal["perturb", "pb2"] = "perturb"


class SchedulerSpec(_Strict):
    """``scheduler: {kind: pbt, ...}``: population-based branching. ``population`` trials run; every
    ``interval`` iterations the members in the bottom ``quantile`` continue from a copy of a top member's
    checkpoint (weights, optimizer, KL controller, data position) with explored parameters; each segment
    of ``interval`` iterations is one trial of the study."""

    kind: Literal["pbt"] = "pbt"
    population: int = Field(4, ge=2)
    interval: int = Field(ge=1)
    quantile: float = Field(0.25, gt=0, le=0.5)
    explore: ExploreSpec = Field(default_factory=ExploreSpec)


class ConfirmSpec(_Strict):
    """The confirmation stage: once the search budget is spent, the ``top_k`` best complete trials run
    again on ``seeds`` fresh seeds (the same seeds for each, so they pair by seed); their values decide
    the winner, with an interval and a paired test against the runner-up."""

    top_k: int = Field(3, ge=1)
    seeds: int = Field(5, ge=2)
    # Promotion: rerun the top k on another base config (a larger model, the NPU config) with these
    # overrides instead of the spec's; the report says whether the ranking held there.
    base: str | None = Field(None, min_length=1)
    overrides: list[str] = Field(default_factory=list)

    @field_validator("seeds", mode="before")
    @classmethod
    def _two_seeds(cls, value: Any) -> Any:
        if isinstance(value, int) and not isinstance(value, bool) and value < 2:
            raise ValueError(f"must be at least 2: a paired comparison over seeds needs two (got {value})")
        return value


class TransferSpec(_Strict):
    """Another study whose best configurations this one tries first (grpo/sweep/study/transfer.py): the
    same search on a smaller proxy model, or an earlier study. Its ranking transfers, not its values."""

    study: str = Field(min_length=1)
    storage: str | None = Field(None, min_length=1)  # absent: that study's default journal
    top_k: int = Field(3, ge=1)


class SweepSpec(_Strict):
    """A validated sweep spec. ``grpo.sweep.spec.load.load_spec`` builds it from a file (``base`` then names the
    resolved config, and ``path``/``warnings`` are set); ``model_validate`` alone skips the file checks."""

    study: str
    base: str = Field(min_length=1)
    overrides: list[str] = Field(default_factory=list)
    search: dict[str, SearchEntry] = Field(default_factory=dict)
    objectives: list[ObjectiveSpec] = Field(alias="objective", min_length=1)
    sampler: SamplerSpec = Field(default_factory=SamplerSpec)
    pruner: PrunerSpec = Field(default_factory=PrunerSpec)
    trials: int = Field(20, ge=1)
    concurrency: int = Field(1, ge=1)
    seeds: int = Field(1, ge=1)
    retries: int = Field(1, ge=0)
    timeout_per_trial: float | None = Field(None, gt=0)
    # Checkpoints each trial keeps (the newest; resuming needs one); null keeps every one saved.
    keep_checkpoints: int | None = Field(1, ge=1)
    # Checkpoints kept once a trial has ended (grpo.sweep.run.retention): the best trial's (a multi-objective
    # study: its Pareto front's), every trial's, or none; what a retry resumes from stays until it has run.
    keep_final_checkpoints: KeepRule = "best"
    # embedded | mindspeed | trl | verl | "package.module:ClassName" (a user's own TrialBackend subclass)
    backend: str = "embedded"
    cluster: ClusterSpec = Field(default_factory=ClusterSpec)
    storage: str | None = None
    # Where trial runs (checkpoints, logs) are kept: a path or URI every node sees (grpo.sweep.execution.trial_storage);
    # null: in the trial dirs under the study dir. load.py checks the value.
    trial_storage: str | None = None
    tracking: TrackingSpec = Field(default_factory=TrackingSpec)
    mindspeed: MindSpeedSpec = Field(default_factory=MindSpeedSpec)
    trl: TrlSpec = Field(default_factory=TrlSpec)
    verl: VerlSpec = Field(default_factory=VerlSpec)
    plan: PlanSpec = Field(default_factory=PlanSpec)
    # Known-good points tried first ({searched key: value}; grpo/sweep/spec/start_points.py), checked at load.
    start_points: list[dict[str, Any]] = Field(default_factory=list)
    transfer: TransferSpec | None = None  # absent: nothing is transferred from another study
    confirm: ConfirmSpec | None = None  # absent: no confirmation stage
    scheduler: SchedulerSpec | None = None  # absent: every trial runs from the start (no branching)

    _path: Path | None = PrivateAttr(default=None)
    _base_as_written: str | None = PrivateAttr(default=None)
    _warnings: list[str] = PrivateAttr(default_factory=list)

    @field_validator("study")
    @classmethod
    def _study_name(cls, value: str) -> str:
        if not STUDY_NAME.fullmatch(value):
            raise ValueError(f"must use letters, digits, - and _ only (got {value!r})")
        if len(value) > MAX_STUDY_NAME:
            raise ValueError(f"must be at most {MAX_STUDY_NAME} characters (got {len(value)})")
        return value

    @field_validator("backend")
    @classmethod
    def _backend(cls, value: str) -> str:
        if not BACKEND.fullmatch(value):
            raise ValueError(f"must be embedded, mindspeed, trl, verl or package.module:ClassName (got {value})")
        return value

    @field_validator("sampler", "pruner", mode="before")
    @classmethod
    def _name_shorthand(cls, value: Any) -> Any:
        return {"name": value} if isinstance(value, str) else value

    @field_validator("objectives", mode="before")
    @classmethod
    def _objective_forms(cls, value: Any) -> Any:
        # `objective: grpo/score/mean`, one mapping, or a list of strings/mappings.
        items = value if isinstance(value, list) else [value]
        return [{"metric": v} if isinstance(v, str) else v for v in items]

    @field_validator("overrides", mode="before")
    @classmethod
    def _overrides_list(cls, value: Any) -> Any:
        if value is None:
            return []
        if not isinstance(value, list):
            raise ValueError("must be a list of Hydra overrides such as rl_config.clip_ratio=0.2")
        return value

    @field_validator("storage")
    @classmethod
    def _storage_url(cls, value: str | None) -> str | None:
        if value is None:
            return value
        shown = masked_url(value)
        if CONTROL.search(value):
            raise ValueError(f"must be one line with no control characters (got {shown!r})")
        if not value.startswith(STORAGE_SCHEMES):
            raise ValueError(
                f"must be an Optuna storage URL (journal:PATH, sqlite:///PATH, postgresql://...) (got {shown!r})"
            )
        if value in ("journal:", "sqlite:///") or value.startswith("sqlite:///:memory:"):
            raise ValueError(f"must name a file or a database that outlives the run, to resume from (got {shown!r})")
        return value

    @model_validator(mode="after")
    def _unique_metrics(self) -> SweepSpec:
        metrics = [o.metric for o in self.objectives]
        doubles = sorted({m for m in metrics if metrics.count(m) > 1})
        if doubles:
            raise ValueError(f"objective: metric {doubles[0]} is listed twice")
        return self

    @model_validator(mode="after")
    def _confirm_single_objective(self) -> SweepSpec:
        if self.confirm is not None and self.multi_objective:
            # "The top k" and "the winner" need one ranking; a Pareto front has none.
            raise ValueError(
                f"confirm: ranks trials by one objective, but the spec has {len(self.objectives)}; "
                "remove confirm or keep one objective"
            )
        return self

    @model_validator(mode="before")
    @classmethod
    def _pbt_prunes_nothing(cls, data: Any) -> Any:
        """A pbt study's pruner is ``none`` unless the spec says otherwise (which ``_pbt_rules`` refuses)."""
        if isinstance(data, dict) and data.get("scheduler") is not None and "pruner" not in data:
            return {**data, "pruner": {"name": "none"}}
        return data

    @model_validator(mode="after")
    def _pbt_rules(self) -> SweepSpec:
        if self.scheduler is None:
            return self
        if self.multi_objective:
            raise ValueError(
                f"scheduler: pbt ranks members by one objective, but the spec has {len(self.objectives)}; keep one"
            )
        if "trials" in self.model_fields_set:
            raise ValueError(
                "trials: a pbt study runs population x generations trials (one per segment); remove trials and "
                "set scheduler.population"
            )
        if self.pruner.name != "none":
            raise ValueError(
                f"pruner.name: {self.pruner.name} compares trials at equal steps, which pbt segments are not; "
                "set pruner.name: none (the collapse rule may stay)"
            )
        for key in ("curve", "patience"):  # both compare a segment with trials it cannot be compared with
            if getattr(self.pruner, key) is not None:
                raise ValueError(f"pruner.{key}: pbt segments are not comparable at equal steps; remove it")
        return self

    @model_validator(mode="after")
    def _curve_single_objective(self) -> SweepSpec:
        if self.pruner.curve is not None and self.multi_objective:
            raise ValueError(
                f"pruner.curve: compares one objective with the best finished trial, but the spec has "
                f"{len(self.objectives)}; remove it or keep one objective"
            )
        return self

    # ---------------------------------------------------------------- derived values
    @property
    def path(self) -> Path | None:
        """The spec file this was loaded from (None when built in code)."""
        return self._path

    @property
    def source(self) -> str:
        """How messages name the spec: the path as the user gave it."""
        return str(self._path) if self._path is not None else "sweep spec"

    @property
    def warnings(self) -> list[str]:
        """Things worth telling the user that are not errors (e.g. pruning off for multi-objective)."""
        return list(self._warnings)

    @property
    def study_dir(self) -> Path:
        return Path("studies") / self.study

    @property
    def multi_objective(self) -> bool:
        return len(self.objectives) > 1

    @property
    def directions(self) -> list[str]:
        return [o.direction for o in self.objectives]

    def confirmation_seed_offsets(self) -> list[int]:
        """Offsets from the base seed of the confirmation stage's seeds: after the search's own
        (``seeds``), so they are fresh, and the same for every confirmation trial, so they pair."""
        if self.confirm is None:
            return []
        return [self.seeds + j for j in range(self.confirm.seeds)]

    def storage_label(self) -> str:
        """``storage_url()`` as it may be shown or stored: a password in it is masked."""
        return masked_url(self.storage_url())

    def tool_storage(self) -> str:
        """The storage as Optuna's own tools take it (``optuna-dashboard X``, ``optuna trials --storage X``): a
        journal as its file path (they read a path that is a file as a journal; our ``journal:`` prefix is
        this project's spelling), any other URL as it is, its password masked."""
        url = self.storage_label()
        return url[len("journal:") :] if url.startswith("journal:") else url

    def storage_url(self) -> str:
        """``storage`` when set, else ``journal:studies/<study>/journal.log`` (an Optuna journal file)."""
        return self.storage or f"journal:{(self.study_dir / 'journal.log').as_posix()}"

    @property
    def base_as_written(self) -> str:
        """``base`` as the spec file spells it (before ``load_spec`` resolved it to a config name or path)."""
        return self._base_as_written or self.base

    def located(self, path: Path, base: str, warnings: list[str]) -> SweepSpec:
        """A copy that knows its file, with ``base`` resolved and the loader's warnings (``load_spec`` calls it)."""
        spec = self.model_copy(update={"base": base})
        spec._path, spec._base_as_written, spec._warnings = path, self.base, list(warnings)
        return spec

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able dict in the spec's own spelling (``objective:``), a storage password masked (what
        the study stores); round-trips through model_validate."""
        data = self.model_dump(mode="json", by_alias=True)
        if data.get("storage"):
            data["storage"] = masked_url(data["storage"])
        return data


def masked_url(url: str) -> str:
    """``postgresql://user:secret@host/db`` -> ``postgresql://user:***@host/db`` (other URLs unchanged)."""
    return re.sub(r"^([A-Za-z0-9+.-]+://[^/:@]*:)[^/@]*@", r"\1***@", url)
