"""The search space of a sweep: Hydra sweep expressions turned into Optuna distributions.

Each ``search:`` entry is parsed with Hydra's own override parser (so the grammar is exactly the one
Hydra's Optuna sweeper users know) and mapped to an Optuna distribution the way
hydra-optuna-sweeper does:

==================================  =======================================================
``choice(a, b, c)``                 ``CategoricalDistribution([a, b, c])`` (numbers, strings, bools)
``range(start, stop[, step])``      ``IntDistribution(start, stop, step)`` -- **stop included**
                                    (floats in any argument: ``FloatDistribution(.., step=..)``)
``interval(lo, hi)``                ``FloatDistribution(lo, hi)``
``tag(log, interval(lo, hi))``      ``FloatDistribution(lo, hi, log=True)``
``tag(int, interval(lo, hi))``      ``IntDistribution(lo, hi)`` (``tag(int, log, ...)``: log=True)
==================================  =======================================================

``range`` includes its stop value, as in hydra-optuna-sweeper (which hands ``stop`` to Optuna as an
inclusive ``high``); this differs from Hydra's basic sweeper and Python, where ``range(1, 5)`` stops
at 4. A stop that is not on the step grid is lowered to the last point on it. The same values are
used by every sampler, grid included. ``shuffle(...)`` is refused: a shuffled choice list changes
between runs and would break resuming a study.

Keys are checked against the config schema (``grpo.config.known_keys``, did-you-mean on typos);
``layout`` and ``algorithm`` take names of ``configs/layout/*.yaml`` and ``configs/algorithm/*.yaml``.
An entry with ``when: {other.key: value}`` is conditional: it is sampled only in trials where ``other.key``
(itself searched) took that value.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from optuna.distributions import BaseDistribution, CategoricalDistribution, FloatDistribution, IntDistribution

from grpo.config import group_options, known_keys, suggest_key
from grpo.errors import UserError, did_you_mean
from grpo.sweep.spec.models import SearchEntry, SweepSpec

if TYPE_CHECKING:
    import optuna
    from hydra.core.override_parser.types import Override

LAYOUT_KEY = "layout"
GROUP_KEYS = (LAYOUT_KEY, "algorithm")  # config groups a spec picks by name: configs/<group>/<name>.yaml
KNOWN_TAGS = ("log", "int")


# --------------------------------------------------------------------------------- expressions
def parse_overrides(texts: list[str]) -> list[Override]:
    """Hydra's override parser; a parse error becomes a ValueError with Hydra's one-line reason."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    try:
        return OverridesParser.create().parse_overrides(texts)
    except HydraException as err:
        lines = [ln.strip() for ln in str(err).splitlines() if ln.strip() and not ln.startswith("See ")]
        raise ValueError(lines[-1] if lines else str(err)) from None


def _whole(x: float) -> bool:
    return float(x).is_integer()


def parse_expression(key: str, expression: str) -> BaseDistribution:
    """The Optuna distribution of one sweep expression; a ValueError says what is wrong with it."""
    from hydra.core.override_parser.types import ChoiceSweep, IntervalSweep, RangeSweep

    text = str(expression).strip()
    if not text:
        raise ValueError("empty expression")
    try:
        override = parse_overrides([f"{key}={text}"])[0]
    except ValueError as err:
        raise ValueError(f"cannot parse {text} as a Hydra sweep expression ({err})") from None
    if not override.is_sweep_override():
        raise ValueError(
            f"{text} is a single value, not a sweep; use choice(...), range(...) or interval(...), "
            "or put a fixed value under overrides"
        )
    value = override.value()
    tags = set(getattr(value, "tags", set()) or set())
    unknown = sorted(tags - set(KNOWN_TAGS))
    if unknown:
        raise ValueError(f"unknown tag {unknown[0]} in {text} (known tags: {', '.join(KNOWN_TAGS)})")
    if getattr(value, "shuffle", False):
        raise ValueError(f"shuffle() is not supported ({text}): a shuffled order breaks resuming the study")

    if isinstance(value, IntervalSweep):
        low, high = value.start, value.end
        if not all(isinstance(end, (int, float)) and math.isfinite(end) for end in (low, high)):
            raise ValueError(f"interval ends must be finite numbers ({text})")
        if low is None or high is None or not low < high:
            raise ValueError(f"interval start must be below its end ({text})")
        log = "log" in tags
        if log and low <= 0:
            raise ValueError(f"a log interval needs a start > 0 ({text})")
        if "int" in tags:
            if not (_whole(low) and _whole(high)):
                raise ValueError(f"tag(int, ...) needs whole-number ends ({text})")
            return IntDistribution(int(low), int(high), log=log)
        return FloatDistribution(float(low), float(high), log=log)

    if tags:
        raise ValueError(f"tags apply to interval(...) only ({text})")

    if isinstance(value, RangeSweep):
        start, stop, step = value.start, value.stop, value.step
        if not all(isinstance(v, (int, float)) and math.isfinite(v) for v in (start, stop, step)):
            raise ValueError(f"range needs finite numbers ({text})")
        if start is None or stop is None or step is None or step <= 0 or not start < stop:
            raise ValueError(f"range needs start < stop and a positive step ({text})")
        if isinstance(start, int) and isinstance(stop, int) and isinstance(step, int):
            high = start + ((stop - start) // step) * step  # stop included when on the grid
            return IntDistribution(start, high, step=step)
        d_start, d_step = Decimal(str(start)), Decimal(str(step))
        n = int((Decimal(str(stop)) - d_start) // d_step)
        return FloatDistribution(float(start), float(d_start + n * d_step), step=float(step))

    if isinstance(value, ChoiceSweep):
        choices = list(override.sweep_iterator())
        bad = [c for c in choices if not isinstance(c, (str, int, float, bool))]
        if bad:
            raise ValueError(f"choice values must be numbers, strings or booleans (got {bad[0]!r} in {text})")
        values = [c for c in choices if isinstance(c, (str, int, float, bool))]  # all of them (narrowed for typing)
        doubles = [c for i, c in enumerate(values) if c in values[:i]]
        if doubles:
            raise ValueError(f"choice lists {doubles[0]!r} twice ({text})")
        if not values:
            raise ValueError(f"{text} has no values")
        return CategoricalDistribution(values)

    raise ValueError(f"{text} is not a sweep expression Optuna can sample")


MAX_GRID_POINTS = 100_000  # more than this is never enumerated (``range(1, 10**12)`` is counted, not listed)


def distribution_size(dist: BaseDistribution) -> int | None:
    """How many values a discrete distribution can take; None for a continuous one."""
    if isinstance(dist, CategoricalDistribution):
        return len(dist.choices)
    if isinstance(dist, IntDistribution):
        return (dist.high - dist.low) // dist.step + 1
    if isinstance(dist, FloatDistribution) and dist.step is not None:
        return round((dist.high - dist.low) / dist.step) + 1
    return None


def distribution_values(dist: BaseDistribution) -> list[Any] | None:
    """Every value a discrete distribution can take, in order; None for a continuous one, or for one with
    more than ``MAX_GRID_POINTS`` values (too many to list)."""
    size = distribution_size(dist)
    if size is None or size > MAX_GRID_POINTS:
        return None
    if isinstance(dist, CategoricalDistribution):
        return list(dist.choices)
    if isinstance(dist, IntDistribution):
        return list(range(dist.low, dist.high + 1, dist.step))
    assert isinstance(dist, FloatDistribution) and dist.step is not None
    return [round(dist.low + i * dist.step, 12) for i in range(size)]


def distribution_ends(dist: BaseDistribution) -> list[Any]:
    """The values that bound a distribution: every choice of a categorical one, the two ends of the others."""
    if isinstance(dist, CategoricalDistribution):
        return list(dist.choices)
    if isinstance(dist, (IntDistribution, FloatDistribution)):
        return [dist.low, dist.high]
    return []


def format_value(value: Any) -> str:
    """A value spelt as a Hydra override value (``true``, ``0.001``, ``kl``, ``'a b'``)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, (int, float)):
        return repr(value)
    text = str(value)
    bare = re.fullmatch(r"[A-Za-z_][A-Za-z0-9_\-./]*", text)
    if bare and text.lower() not in ("true", "false", "null", "nan", "inf"):
        return text
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def format_params(params: dict[str, Any]) -> str:
    """``clip_ratio=0.2, kl_penalty=kl``: a trial's parameters by their last key part (floats to 3 digits)."""
    return ", ".join(
        f"{k.split('.')[-1]}={v:.3g}" if isinstance(v, float) else f"{k.split('.')[-1]}={v}" for k, v in params.items()
    )


# ------------------------------------------------------------------------------------------- keys
NATIVE_PREFIX = "verl."  # the config's free-form verl section (backend verl's own keys, by verl's path)
TRL_PREFIX = "trl.args."  # the config's trl section: TRL GRPOConfig fields (backend trl validates them)


def layout_names() -> list[str]:
    """The layouts a spec may pick: stems of ``layout/*.yaml`` over the config search path."""
    return group_options("layout")


def _matches(key: str, pattern: str) -> bool:
    """``model.qwen25_7b.num_layers`` matches the schema's ``model.*.num_layers``."""
    a, b = key.split("."), pattern.split(".")
    return len(a) == len(b) and all(q in ("*", p) for p, q in zip(a, b, strict=True))


def check_key(key: str, layout_value: Any = None) -> str | None:
    """The problem with a config key (unknown key, with did-you-mean), or None when it is valid.

    For ``layout`` (``algorithm``) with ``layout_value`` given, the value must name a file of configs/layout/
    (configs/algorithm/).
    """
    if key in GROUP_KEYS:
        if layout_value is not None:
            return _check_layouts([layout_value], key)
        return None
    if any(key.startswith(p) and len(key) > len(p) for p in (NATIVE_PREFIX, TRL_PREFIX)):
        return None  # verl's own config path: backend verl validates it by composing verl's config
    keys = known_keys()
    if key in keys or any("*" in k and _matches(key, k) for k in keys):
        return None
    hint = suggest_key(key)
    return f"{key}: unknown config key" + (f"; did you mean {hint}?" if hint and hint != key else "")


def _check_layouts(values: list[Any], group: str = LAYOUT_KEY) -> str | None:
    names = group_options(group)
    for value in values:
        if value not in names:
            hint = did_you_mean(str(value), names, cutoff=0.5)
            more = f"; did you mean {hint}?" if hint else f" (available: {', '.join(names) or 'none'})"
            return f"unknown {group} {value} (no configs/{group}/{value}.yaml){more}"
    return None


# ------------------------------------------------------------------------------------------ space
@dataclass(frozen=True)
class Param:
    """One searched key: its expression, distribution, and the condition under which it is sampled."""

    key: str
    expression: str
    distribution: BaseDistribution
    when: dict[str, tuple[Any, ...]] = field(default_factory=dict)  # parent key -> accepted values


@dataclass
class SearchSpace:
    """The parameters of a sweep in sampling order (a conditional parameter after the ones it depends on)."""

    params: list[Param]

    @classmethod
    def from_spec(cls, spec: SweepSpec) -> SearchSpace:
        """Parse and check ``spec.search``; one UserError listing every problem (file + ``search.<key>``)."""
        return cls.from_entries(spec.search, source=spec.source)

    @classmethod
    def from_entries(cls, entries: Mapping[str, SearchEntry | str], source: str = "sweep spec") -> SearchSpace:
        problems: list[str] = []
        parsed: dict[str, Param] = {}
        raw: dict[str, SearchEntry] = {
            k: e if isinstance(e, SearchEntry) else SearchEntry.model_validate(e) for k, e in entries.items()
        }
        for key, entry in raw.items():
            where = f"{source}: search.{key}"
            problem = check_key(key)
            if problem:
                problems.append(f"{source}: search.{problem}")
                continue
            try:
                dist = parse_expression(key, entry.values)
            except ValueError as err:
                problems.append(f"{where}: {err}")
                continue
            if key in GROUP_KEYS:
                if not isinstance(dist, CategoricalDistribution):
                    problems.append(f"{where}: {key}s are names: use choice(name, ...)")
                    continue
                problem = _check_layouts(list(dist.choices), key)
                if problem:
                    problems.append(f"{where}: {problem}")
                    continue
            parsed[key] = Param(key, entry.values, dist)

        for key, entry in raw.items():
            if key not in parsed or not entry.when:
                continue
            when: dict[str, tuple[Any, ...]] = {}
            for parent, accepted in entry.when.items():
                where = f"{source}: search.{key}.when.{parent}"
                values = tuple(accepted) if isinstance(accepted, list) else (accepted,)
                if parent == key:
                    problems.append(f"{where}: a parameter cannot depend on itself")
                elif parent not in raw:
                    hint = did_you_mean(parent, raw)
                    problems.append(
                        f"{where}: conditions must name another searched key"
                        + (f"; did you mean {hint}?" if hint else f" (searched: {', '.join(raw)})")
                    )
                elif parent in parsed:
                    possible = distribution_values(parsed[parent].distribution)
                    if possible is None:
                        problems.append(f"{where}: {parent} is continuous; conditions need a choice or range")
                    else:
                        missing = [v for v in values if v not in possible]
                        if missing:
                            shown = ", ".join(format_value(v) for v in possible)
                            problems.append(
                                f"{where}: {parent} never takes {format_value(missing[0])} (it takes {shown})"
                            )
                when[parent] = values
            parsed[key] = Param(key, entry.values, parsed[key].distribution, when)

        ordered, cycle = _sampling_order(list(parsed.values()))
        if cycle:
            problems.append(f"{source}: search.{cycle[0]}.when: conditions form a cycle ({' -> '.join(cycle)})")
        if problems:
            raise UserError(problems[0], problems=problems)
        return cls(ordered)

    # ---------------------------------------------------------------- queries
    def __len__(self) -> int:
        return len(self.params)

    @property
    def keys(self) -> list[str]:
        return [p.key for p in self.params]

    @property
    def has_conditionals(self) -> bool:
        return any(p.when for p in self.params)

    def distributions(self) -> dict[str, BaseDistribution]:
        """Key -> Optuna distribution, every parameter (conditional ones included)."""
        return {p.key: p.distribution for p in self.params}

    def continuous_keys(self) -> list[str]:
        return [p.key for p in self.params if distribution_size(p.distribution) is None]

    def grid_size(self) -> int | None:
        """How many points the full grid has (conditional parameters counted as always active: an upper
        bound); None when a dimension is continuous. Counted, never enumerated."""
        total = 1
        for p in self.params:
            size = distribution_size(p.distribution)
            if size is None:
                return None
            total *= size
        return total

    @staticmethod
    def is_active(param: Param, chosen: Mapping[str, Any]) -> bool:
        """A parameter is sampled when every parent it names was sampled with an accepted value."""
        return all(parent in chosen and chosen[parent] in values for parent, values in param.when.items())

    def suggest(self, trial: optuna.trial.BaseTrial) -> dict[str, Any]:
        """Ask ``trial`` for every active parameter, in order; returns key -> value (active ones only)."""
        chosen: dict[str, Any] = {}
        for p in self.params:
            if not self.is_active(p, chosen):
                continue
            d = p.distribution
            if isinstance(d, CategoricalDistribution):
                chosen[p.key] = trial.suggest_categorical(p.key, d.choices)
            elif isinstance(d, IntDistribution):
                chosen[p.key] = trial.suggest_int(p.key, d.low, d.high, step=d.step, log=d.log)
            elif isinstance(d, FloatDistribution):
                chosen[p.key] = trial.suggest_float(p.key, d.low, d.high, step=d.step, log=d.log)
        return chosen

    def to_overrides(self, params: Mapping[str, Any]) -> list[str]:
        """Hydra overrides for a parameter set, in space order: ``["rl_config.init_kl_coef=0.01", ...]``."""
        unknown = [k for k in params if k not in self.keys]
        if unknown:
            raise KeyError(f"{unknown[0]} is not a parameter of this search space")
        return [f"{p.key}={format_value(params[p.key])}" for p in self.params if p.key in params]

    def grid_values(self) -> dict[str, list[Any]] | None:
        """Key -> every value, for Optuna's GridSampler; None when a dimension is continuous."""
        values = {p.key: distribution_values(p.distribution) for p in self.params}
        return None if any(v is None for v in values.values()) else values  # type: ignore[return-value]

    def grid_points(self) -> list[dict[str, Any]] | None:
        """Every distinct parameter set (active parameters only); None when a dimension is continuous or
        the grid has more than ``MAX_GRID_POINTS`` points."""
        size = self.grid_size()
        values = self.grid_values()
        if values is None or size is None or size > MAX_GRID_POINTS:
            return None
        points: list[dict[str, Any]] = [{}]
        for p in self.params:
            grown: list[dict[str, Any]] = []
            for point in points:
                if self.is_active(p, point):
                    grown += [{**point, p.key: v} for v in values[p.key]]
                else:
                    grown.append(point)
            points = grown
        return points


def _sampling_order(params: list[Param]) -> tuple[list[Param], list[str]]:
    """Spec order, except that each parameter comes after those its ``when`` names; a cycle is returned."""
    pending = list(params)
    done: list[Param] = []
    names = {p.key for p in params}
    while pending:
        placed = {d.key for d in done}
        ready = [p for p in pending if all(q in placed or q not in names for q in p.when)]
        if not ready:
            waiting = {p.key for p in pending}
            cycle, node = [pending[0].key], pending[0]
            while True:
                nxt = next(q for q in node.when if q in waiting)
                if nxt in cycle:
                    return done + pending, [*cycle[cycle.index(nxt) :], nxt]
                cycle.append(nxt)
                node = next(p for p in params if p.key == nxt)
        done.append(ready[0])
        pending.remove(ready[0])
    return done, []
