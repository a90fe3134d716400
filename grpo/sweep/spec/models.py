"""The sweep spec (``sweeps/*.yaml``) as validated pydantic models; nothing here reads files or imports Optuna.

``grpo.sweep.spec.load.load_spec(path)`` reads a spec file and builds a ``SweepSpec`` (with the checks that
need the config dir, the search space and the sampler); the models are only the data model and the checks a
single value allows. They live in three modules, one per group of sections, re-exported here so that
``from grpo.sweep.spec.models import ...`` keeps working:

- grpo/sweep/spec/search_models.py: search, objective, sampler, pruner (collapse, curve)
- grpo/sweep/spec/backend_sections.py: cluster, tracking, mindspeed, verl, trl, plan
- grpo/sweep/spec/study_models.py: scheduler, confirm, transfer and SweepSpec (the whole spec)

The full key reference is docs/sweep_spec.md.
"""

from __future__ import annotations

from grpo.sweep.spec.backend_sections import (
    MAX_NUM_CPUS,
    MAX_RESOURCE,
    RAY_OWN_RESOURCES,
    ClusterSpec,
    EnvVars,
    MindSpeedSpec,
    PlanSpec,
    TrackingSpec,
    TrlSpec,
    VerlSpec,
)
from grpo.sweep.spec.search_models import (
    CollapseRule,
    CurveRule,
    ObjectiveSpec,
    PrunerName,
    PrunerSpec,
    ReducerName,
    SamplerName,
    SamplerSpec,
    SearchEntry,
)
from grpo.sweep.spec.strict import CONTROL
from grpo.sweep.spec.study_models import (
    BACKEND,
    MAX_STUDY_NAME,
    STORAGE_SCHEMES,
    STUDY_NAME,
    ConfirmSpec,
    ExploreSpec,
    KeepRule,
    SchedulerSpec,
    SweepSpec,
    TransferSpec,
    masked_url,
)

__all__ = [
    "BACKEND",
    "CONTROL",
    "MAX_NUM_CPUS",
    "MAX_RESOURCE",
    "MAX_STUDY_NAME",
    "RAY_OWN_RESOURCES",
    "STORAGE_SCHEMES",
    "STUDY_NAME",
    "ClusterSpec",
    "CollapseRule",
    "ConfirmSpec",
    "CurveRule",
    "EnvVars",
    "ExploreSpec",
    "KeepRule",
    "MindSpeedSpec",
    "ObjectiveSpec",
    "PlanSpec",
    "PrunerName",
    "PrunerSpec",
    "ReducerName",
    "SamplerName",
    "SamplerSpec",
    "SchedulerSpec",
    "SearchEntry",
    "SweepSpec",
    "TrackingSpec",
    "TransferSpec",
    "TrlSpec",
    "VerlSpec",
    "masked_url",
]
