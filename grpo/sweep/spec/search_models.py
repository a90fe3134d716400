"""The spec's search sections: ``search``, ``objective``, ``sampler``, ``pruner`` (with ``collapse`` and ``curve``).

Re-exported by grpo/sweep/spec/models.py; the key reference is docs/sweep_spec.md.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from grpo.sweep.spec.objectives import DEFAULT_K, CurveReducer, get_reducer
from grpo.sweep.spec.strict import CONTROL, _Strict

# The names a spec may use; grpo.sweep.spec.samplers and grpo.sweep.spec.objectives map each to its class
# (tests/test_spec_load.py checks the two agree).
SamplerName = Literal["tpe", "random", "grid", "cmaes", "nsga2", "gp"]
PrunerName = Literal["median", "successive_halving", "hyperband", "none"]
ReducerName = Literal["last", "max", "min", "mean_last_k", "auc", "final_fit"]


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
