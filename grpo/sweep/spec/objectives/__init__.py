"""Objective reducers: how a metric's learning curve becomes the number Optuna optimises.

One class per module behind ``CurveReducer`` (``_base.py``), picked by name with ``get_reducer``:
``last`` (default), ``max``, ``min``, ``mean_last_k`` (with ``k``; over an evaluated metric such as
``eval/acc_greedy`` that is the mean of the last ``k`` evaluations, the final plateau), ``auc`` and
``final_fit`` (the fitted curve at the last iteration, ``curve_fit``).

Example:
    >>> from grpo.sweep.spec.objectives import get_reducer
    >>> curve = [0.1, 0.3, 0.2, 0.6]
    >>> [round(get_reducer(name, k=2).reduce(curve), 4) for name in ("last", "max", "mean_last_k", "auc")]
    [0.6, 0.6, 0.4, 0.2833]
"""

from __future__ import annotations

from grpo.sweep.spec.objectives._auc import AUCReducer
from grpo.sweep.spec.objectives._base import CurveReducer
from grpo.sweep.spec.objectives._final_fit import FinalFitReducer
from grpo.sweep.spec.objectives._last import LastReducer
from grpo.sweep.spec.objectives._max import MaxReducer, MinReducer
from grpo.sweep.spec.objectives._mean_last_k import DEFAULT_K, MeanLastKReducer

REDUCERS: dict[str, type[CurveReducer]] = {
    "last": LastReducer,
    "max": MaxReducer,
    "min": MinReducer,
    "mean_last_k": MeanLastKReducer,
    "auc": AUCReducer,
    "final_fit": FinalFitReducer,
}


def get_reducer(name: str, k: int | None = None) -> CurveReducer:
    """The reducer called ``name``; ``k`` is used by ``mean_last_k`` only (default 5).

    An unknown name is a ValueError: spec validation has already rejected user typos, so reaching
    here with one is a bug.
    """
    try:
        cls = REDUCERS[name]
    except KeyError:
        raise ValueError(f"unknown reducer {name!r}; known: {', '.join(REDUCERS)}") from None
    if cls is MeanLastKReducer:
        return MeanLastKReducer(DEFAULT_K if k is None else k)
    return cls()


__all__ = [
    "DEFAULT_K",
    "REDUCERS",
    "AUCReducer",
    "CurveReducer",
    "FinalFitReducer",
    "LastReducer",
    "MaxReducer",
    "MeanLastKReducer",
    "MinReducer",
    "get_reducer",
]
