"""The spec's study sections (``scheduler``, ``confirm``, ``transfer``) and ``SweepSpec``, the whole spec.

Re-exported by grpo/sweep/spec/models.py; the key reference is docs/sweep_spec.md.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, PrivateAttr, field_validator, model_validator

from grpo.sweep.spec.backend_sections import ClusterSpec, MindSpeedSpec, PlanSpec, TrackingSpec, TrlSpec, VerlSpec
from grpo.sweep.spec.search_models import ObjectiveSpec, PrunerSpec, SamplerSpec, SearchEntry
from grpo.sweep.spec.strict import CONTROL, _Strict

STUDY_NAME = re.compile(r"^[A-Za-z0-9_-]+$")
MAX_STUDY_NAME = 100  # a folder name under studies/ and reports/ (file systems stop at 255 bytes)
BACKEND = re.compile(r"^(embedded|mindspeed|trl|verl|[A-Za-z_][\w.]*:[A-Za-z_]\w*)$")
STORAGE_SCHEMES = ("journal:", "sqlite:///", "postgresql://", "postgresql+", "mysql://", "mysql+")
KeepRule = Literal["best", "all", "none"]


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
    # Seconds the driver keeps retrying a storage it lost the connection to (a database restart, a failover)
    # before it stops its trials and exits, resumable (grpo/sweep/study/outage.py).
    storage_retry_timeout: float = Field(300, gt=0)
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
