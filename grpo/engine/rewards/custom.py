"""A user's own reward function, named in ``rl_config.verifier_function`` beside the built-in verifiers.

An entry ``path/to/file.py:function`` (relative to the spec's folder; the working directory outside a sweep) or
``package.module:function`` names it; ``...:function@trl`` / ``@verl`` states its form where the signature does
not tell. Either native form works unchanged:

- ``trl``: TRL's batched ``reward_funcs`` call (``trl/trainer/grpo_trainer.py``'s ``_calculate_rewards``):
  keyword arguments ``prompts`` (each record's prompt as given: text, or chat messages for a conversational
  record), ``completions`` (text; for a conversational record ``[{"role": "assistant", "content": ...}]``, as
  TRL's ``_generate`` shapes it), ``completion_ids`` (each response's token ids up to and including its stop
  token; None where the caller has none: backend verl, validate), ``trainer_state``, ``log_extra``,
  ``log_metric`` and every dataset column but ``prompt`` and ``completion`` as a list, plus ``label`` (the label
  the project read) where the dataset has no ``label`` column; returns one value per completion.
- ``verl``: verl's per-sample ``compute_score(data_source, solution_str, ground_truth, extra_info=None)``
  (``verl/experimental/reward_loop/reward_manager/naive.py`` calls it with those keywords): ``data_source`` and
  ``extra_info`` are the row's, ``ground_truth`` its ``reward_model.ground_truth`` as stored (else the label
  read), and ``extra_info`` gets ``num_turns`` (2) and ``rollout_reward_scores`` ({}) as verl's single-turn
  rollout adds them.

A value is a number, ``None`` (not applicable: left out of that sample's weighted sum, as TRL does with NaN) or a
dict with ``"score"`` whose other numeric keys become metrics ``<name>/<key>``; ``async def`` functions are awaited
(a verl-style one over the batch at once). Anything else, or an exception, is a ``UserCodeError`` naming the
function and the line that raised: the trial fails and is not retried. The function runs in the trial's process
as the user's own code.

    reward = load_user_reward("rewards.py:my_reward", base_dir=Path("sweeps"))
    scores, metrics = reward.score(prompts, completions, labels, extras)   # metrics: {"my_reward/part": [...]}
"""

from __future__ import annotations

import inspect
import math
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

from grpo._imports import import_object, ref_path, split_ref
from grpo.errors import UserCodeError, UserError, first_line

Form = Literal["trl", "verl"]
FORMS: tuple[Form, ...] = ("trl", "verl")
DEFAULT_DATA_SOURCE = "grpo_sweep"  # the data_source of rows that have none (grpo.engine.datasets writes it too)
VERL_PARAMS = ("data_source", "solution_str", "ground_truth", "extra_info")
_NOT_COLUMNS = ("prompt", "completion", "completion_ids")  # dataset columns TRL does not pass by their name
# What verl's naive reward manager adds to every row's extra_info in a single-turn run (num_turns: the agent
# loop's user and assistant turns, single_turn_agent_loop.py; no rollout-side reward scores).
VERL_ADDED_INFO: dict[str, Any] = {"num_turns": 2, "rollout_reward_scores": {}}


def is_user_ref(name: str) -> bool:
    """``file.py:function`` or ``package.module:function`` (a verifier name has no colon)."""
    return ":" in name


def parse_ref(ref: str) -> tuple[str, Form | None]:
    """(the import reference, the stated form or None): ``a.py:f@verl`` -> ``("a.py:f", "verl")``."""
    body, at, form = ref.rpartition("@")
    if at and form in FORMS and ":" in body:
        return body, form
    return ref, None


def ref_problem(ref: str) -> str | None:
    """Why ``ref`` is not a well-formed user reference (None when it is); no import."""
    body, form = parse_ref(ref)
    if "@" in body and form is None:
        return f"{ref!r}: the form after @ is trl or verl"
    try:
        split_ref(body)
    except ValueError as err:
        return str(err)
    return None


def anchored(ref: str, base_dir: Path) -> str:
    """``ref`` with a relative file made absolute against ``base_dir`` (verifier names, package references and
    malformed entries unchanged)."""
    if not is_user_ref(ref) or ref_problem(ref):
        return ref
    body, form = parse_ref(ref)
    path = ref_path(body, base_dir)
    if path is None:
        return ref
    return f"{path}:{split_ref(body)[1]}" + (f"@{form}" if form else "")


def _form_of(fn: Callable[..., Any]) -> Form | None:
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return None
    if "solution_str" in params or ("ground_truth" in params and "completions" not in params):
        return "verl"
    if "completions" in params or "prompts" in params:
        return "trl"
    return None


def _signature_problem(fn: Callable[..., Any], form: Form) -> str | None:
    """Why ``fn`` cannot take the call of its form (None when it can)."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return None  # a builtin or C callable: it is tried on records instead
    if form == "verl":
        try:
            sig.bind(data_source="", solution_str="", ground_truth="", extra_info={})
        except TypeError as err:
            return f"takes no verl call compute_score(data_source, solution_str, ground_truth, extra_info) ({err})"
        return None
    kwargs = any(p.kind is p.VAR_KEYWORD for p in sig.parameters.values())
    if not kwargs:  # TRL passes every dataset column, trainer_state, log_extra and log_metric: **kwargs takes them
        return "a TRL reward function takes **kwargs (TRL passes every dataset column and trainer_state by keyword)"
    return None


def _raised(err: BaseException, fn: Callable[..., Any]) -> str:
    """``<Type>: <message>`` and the deepest line of the user's file the traceback went through."""
    file = inspect.getsourcefile(fn) if not isinstance(fn, type) else None
    frames = [f for f in traceback.extract_tb(err.__traceback__) if file and f.filename == file]
    where = f" ({Path(frames[-1].filename).name} line {frames[-1].lineno}: {(frames[-1].line or '').strip()})"
    return first_line(err, 300, typed=True) + (where if frames else "")


@dataclass(frozen=True)
class UserReward:
    """A loaded user reward function: ``name`` (the metric prefix, ``<name>_rewards/mean``), ``form``."""

    ref: str
    name: str
    form: Form
    fn: Callable[..., Any]

    def _fail(self, what: str) -> UserCodeError:
        return UserCodeError(f"reward function {self.ref}: {what}")

    def _value(self, value: Any, i: int, metrics: dict[str, list[float]], n: int) -> float | None:
        if isinstance(value, Mapping):
            if "score" not in value:
                raise self._fail(f"returned a dict without 'score' for sample {i} (keys {sorted(value)[:5]})")
            for key, extra in value.items():
                if key != "score" and isinstance(extra, (int, float)) and not isinstance(extra, bool):
                    metrics.setdefault(f"{self.name}/{key}", [math.nan] * n)[i] = float(extra)
            value = value["score"]
        if value is None:
            return None
        if not isinstance(value, (int, float)) and not hasattr(value, "__float__"):  # bools count, as in TRL and verl
            raise self._fail(f"returned {type(value).__name__} {value!r:.60} for sample {i}, not a number")
        number = float(value)
        if math.isnan(number):
            return None  # TRL's "not applicable"
        if math.isinf(number):
            raise self._fail(f"returned {number} for sample {i}")
        return number

    def _call(self, *args: Any, **kwargs: Any) -> Any:
        try:
            out = self.fn(*args, **kwargs)
            if inspect.isawaitable(out):
                import asyncio  # only for async functions: importing it registers logging's atexit hook

                out = asyncio.run(_awaited(out))
            return out
        except UserCodeError:
            raise
        except Exception as err:
            raise self._fail(_raised(err, self.fn)) from err

    def score(
        self,
        prompts: Sequence[Any],
        completions: Sequence[str],
        labels: Sequence[str],
        extras: Sequence[Mapping[str, Any]],
        completion_ids: Sequence[Sequence[int]] | None = None,
        **context: Any,
    ) -> tuple[list[float | None], dict[str, list[float]]]:
        """One value per completion (None: not applicable) and the dict returns' other numeric keys as metrics
        ``<name>/<key>`` (NaN where a sample gave none). ``prompts`` are each record's prompt as given (text or
        chat messages), ``completions`` the decoded texts, ``extras`` each record's other columns; ``context`` is
        what TRL passes beside the columns (``trainer_state``, ``log_extra``, ``log_metric``)."""
        n = len(completions)
        if self.form == "trl":
            raw = self._call(**self._trl_kwargs(prompts, completions, labels, extras, completion_ids, context))
            if isinstance(raw, (str, bytes, Mapping)) or not hasattr(raw, "__len__"):
                raise self._fail(f"returned {type(raw).__name__}, not a list of {n} rewards")
            values = list(raw)
            if len(values) != n:
                raise self._fail(f"returned {len(values)} rewards for {n} completions")
        else:
            values = self._verl_values(completions, labels, extras)
        metrics: dict[str, list[float]] = {}
        return [self._value(v, i, metrics, n) for i, v in enumerate(values)], metrics

    def _trl_kwargs(
        self,
        prompts: Sequence[Any],
        completions: Sequence[str],
        labels: Sequence[str],
        extras: Sequence[Mapping[str, Any]],
        completion_ids: Sequence[Sequence[int]] | None,
        context: Mapping[str, Any],
    ) -> dict[str, Any]:
        given = [[dict(m) for m in p] if isinstance(p, (list, tuple)) else p for p in prompts]  # copies: user code
        # TRL shapes the batch's completions by its first prompt (is_conversational): messages for chat prompts
        chat = bool(given) and isinstance(given[0], list)
        shown = [[{"role": "assistant", "content": c}] if chat else c for c in completions]
        columns: list[str] = list(dict.fromkeys(k for e in extras for k in e))
        kwargs: dict[str, Any] = {k: [e.get(k) for e in extras] for k in columns if k not in _NOT_COLUMNS}
        kwargs.setdefault("label", list(labels))
        kwargs.update(prompts=given, completions=shown)
        # TRL always passes completion_ids; None where the caller has no token ids (verl's per-response call, validate)
        kwargs["completion_ids"] = None if completion_ids is None else [list(c) for c in completion_ids]
        kwargs["trainer_state"] = context.get("trainer_state")  # set after the columns, as TRL sets them
        kwargs["log_extra"] = context.get("log_extra", _ignore)
        kwargs["log_metric"] = context.get("log_metric", _ignore)
        return kwargs

    def _verl_values(
        self, completions: Sequence[str], labels: Sequence[str], extras: Sequence[Mapping[str, Any]]
    ) -> list[Any]:
        calls = [
            {
                "data_source": e.get("data_source", DEFAULT_DATA_SOURCE),
                "solution_str": c,
                "ground_truth": _ground_truth(e, label),
                "extra_info": _extra_info(e),
            }
            for c, label, e in zip(completions, labels, extras, strict=True)
        ]
        if inspect.iscoroutinefunction(self.fn):  # verl awaits each; here the batch at once
            import asyncio

            async def gather() -> list[Any]:
                return list(await asyncio.gather(*(self.fn(**kw) for kw in calls)))

            return list(self._call_batch(gather))
        return [self._call(**kw) for kw in calls]

    def _call_batch(self, run: Callable[[], Any]) -> Any:
        import asyncio

        try:
            return asyncio.run(run())
        except Exception as err:
            raise self._fail(_raised(err, self.fn)) from err


def _ground_truth(row: Mapping[str, Any], label: str) -> Any:
    """A verl row's ``reward_model.ground_truth`` as stored (a list or number stays one, as verl passes it), else
    the label the project read."""
    model = row.get("reward_model")
    if isinstance(model, Mapping) and model.get("ground_truth") is not None:
        return model["ground_truth"]
    return label


def _extra_info(row: Mapping[str, Any]) -> dict[str, Any]:
    """The row's ``extra_info`` (a copy) with what verl's reward manager adds to it, unless the row has it (on
    backend verl, verl's own values)."""
    info = dict(row["extra_info"]) if isinstance(row.get("extra_info"), Mapping) else {}
    return {**VERL_ADDED_INFO, **info}


def trainer_state(global_step: int, max_steps: int) -> Any:
    """A ``transformers.TrainerState`` at ``global_step`` of ``max_steps`` optimizer steps: the ``trainer_state``
    TRL passes, for a reward shaped by training progress on a backend that has no TRL trainer (embedded)."""
    from transformers import TrainerState

    return TrainerState(global_step=global_step, max_steps=max_steps)


async def _awaited(awaitable: Any) -> Any:
    return await awaitable


def _ignore(*_: Any, **__: Any) -> None:
    """TRL's ``log_extra`` / ``log_metric`` where the backend has no completions table (embedded): accepted and
    dropped (the function's own dict keys are the way to report a metric there)."""


def load_user_reward(
    ref: str, base_dir: Path | None = None, *, where: str = "rl_config.verifier_function"
) -> UserReward:
    """The user reward ``ref`` names, its form read from the signature or stated; one-line UserError otherwise."""
    problem = ref_problem(ref)
    if problem:
        raise UserError(f"{where}: {problem}")
    body, stated = parse_ref(ref)
    fn = import_object(body, where=where, base_dir=base_dir)
    if not callable(fn):
        raise UserError(f"{where}: {body} is a {type(fn).__name__}, not a function")
    form = stated or _form_of(fn)
    if form is None:
        raise UserError(
            f"{where}: {body}: its signature tells neither form; state it: {body}@trl (batched, TRL's reward_funcs) "
            f"or {body}@verl (per sample, verl's compute_score)"
        )
    problem = _signature_problem(fn, form)
    if problem:
        raise UserError(f"{where}: {body}: {problem}")
    return UserReward(ref, str(getattr(fn, "__name__", split_ref(body)[1])), form, fn)


@lru_cache(maxsize=64)
def cached_user_reward(ref: str) -> UserReward:
    """``load_user_reward(ref)`` once per process (refs are absolute by the time a trial scores)."""
    return load_user_reward(ref)
