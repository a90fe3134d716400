"""GRPO health flags per trial: four small rules over a trial's learning curves.

Each rule reads the per-iteration metrics (the mean over seeds) of one trial and fires at most once:

- ``entropy_collapse``: ``actor/entropy`` averaged over the last ``k`` iterations is at most
  ``ENTROPY_COLLAPSE_RATIO`` (10 %) of its average over the first ``k``. The policy has stopped
  exploring; GRPO's group advantages go to zero when every sample of a prompt is the same.
- ``kl_blowup``: ``actor/kl_loss`` is non-finite, or reaches ``KL_BLOWUP_NATS`` (1 nat per token), or
  ends at least ``KL_GROWTH`` (10x) above its first-``k`` average while being above ``KL_GROWTH_FLOOR``
  (0.2). The policy has run away from the reference model.
- ``format_without_accuracy``: the format reward (``strict_format_rewards/mean`` or another
  ``*format*_rewards/mean``) rises by at least ``FORMAT_RISE`` (0.2) from the first ``k`` to the last
  ``k`` iterations while ``acc_rewards/mean`` rises by less than ``ACCURACY_FLAT`` (0.02): the policy
  learned the answer format, not the task (reward hacking on the easy verifier).
- ``length_pinned``: ``response_length/mean`` over the last ``k`` iterations is at least
  ``LENGTH_PINNED_FRACTION`` (90 %) of ``max_tokens`` (the trial's
  ``config.generate_config.sampling_config.max_tokens``): most responses are cut off by the cap.

``k`` is a third of the iterations, between 1 and 3. The trend rules (entropy, format) need at least
``MIN_ITERATIONS`` (3) iterations; the others fire from the first iteration.

    from grpo.report.diagnostics import diagnose
    flags = diagnose(study, frames.metrics)   # {trial number: [Flag(name, detail, iteration, metric, value)]}
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import optuna
import pandas as pd

ENTROPY_COLLAPSE_RATIO = 0.1
KL_BLOWUP_NATS = 1.0
KL_GROWTH = 10.0
KL_GROWTH_FLOOR = 0.2
FORMAT_RISE = 0.2
ACCURACY_FLAT = 0.02
LENGTH_PINNED_FRACTION = 0.9
MIN_ITERATIONS = 3

# Metric names per role: MindSpeed-RL's first, then the spellings an older log may use.
ENTROPY = ("actor/entropy", "grpo/entropy")
KL = ("actor/kl_loss", "grpo/kl")
ACCURACY = ("acc_rewards/mean", "grpo/acc/mean")
FORMAT = ("strict_format_rewards/mean", "format_rewards/mean")
RESPONSE_LENGTH = ("response_length/mean",)

RULES = {
    "entropy_collapse": f"actor/entropy falls to <= {ENTROPY_COLLAPSE_RATIO:.0%} of its starting value",
    "kl_blowup": (
        f"actor/kl_loss is non-finite, reaches {KL_BLOWUP_NATS:g}, or ends >= {KL_GROWTH:g}x its start "
        f"while above {KL_GROWTH_FLOOR:g}"
    ),
    "format_without_accuracy": (
        f"format reward rises by >= {FORMAT_RISE:g} while acc_rewards/mean rises by < {ACCURACY_FLAT:g}"
    ),
    "length_pinned": f"response_length/mean stays >= {LENGTH_PINNED_FRACTION:.0%} of max_tokens",
}


@dataclass(frozen=True)
class Flag:
    """One diagnostic that fired: its rule ``name``, a one-line ``detail``, where it shows on which curve."""

    name: str
    detail: str
    iteration: int
    metric: str
    value: float


def max_tokens(trial: optuna.trial.FrozenTrial) -> int | None:
    """``generate_config.sampling_config.max_tokens`` from the trial's ``config`` attr, if recorded."""
    config = trial.user_attrs.get("config")
    try:
        value = config["generate_config"]["sampling_config"]["max_tokens"]
    except (KeyError, TypeError):
        return None
    return int(value) if isinstance(value, (int, float)) and value > 0 else None


def diagnose(study: optuna.Study, metrics: pd.DataFrame) -> dict[int, list[Flag]]:
    """Every trial's flags (only trials with at least one flag appear); see the module docstring."""
    if metrics.empty:
        return {}
    roles = {
        role: _pick(metrics, names)
        for role, names in (
            ("entropy", ENTROPY),
            ("kl", KL),
            ("acc", ACCURACY),
            ("format", FORMAT),
            ("length", RESPONSE_LENGTH),
        )
    }
    wanted = [m for m in roles.values() if m is not None]
    if not wanted:
        return {}
    part = metrics[metrics["metric"].isin(wanted)]
    # Mean over seeds: one value per trial, iteration and metric.
    wide = part.groupby(["trial", "iteration", "metric"], sort=True)["value"].mean().unstack("metric")
    caps = {t.number: max_tokens(t) for t in study.get_trials(deepcopy=False)}
    # Rows are sorted by trial: slice plain numpy arrays per trial (a pandas groupby costs ~1 ms a group).
    trials = wide.index.get_level_values(0).to_numpy()
    iterations = wide.index.get_level_values(1).to_numpy()
    columns = {role: wide[name].to_numpy(dtype=float) for role, name in roles.items() if name in wide}
    starts = np.flatnonzero(np.r_[True, trials[1:] != trials[:-1]])
    ends = np.r_[starts[1:], len(trials)]
    suspects = _suspects(wide, roles, caps)
    out: dict[int, list[Flag]] = {}
    for a, b in zip(starts.tolist(), ends.tolist()):
        number = int(trials[a])
        if number not in suspects:
            continue
        series = {role: values[a:b] for role, values in columns.items()}
        flags = check_curves(iterations[a:b], series, roles, caps.get(number))
        if flags:
            out[number] = flags
    return out


_EPS = 1e-9  # the screen below is a little more lenient than the rules, so it never misses a flag


def _windows(values: pd.Series) -> pd.DataFrame:
    """Per trial (level 0 of the index): ``n`` values, the mean of the first and of the last ``k`` (the
    rules' window), computed for all trials at once."""
    grouped = values.groupby(level=0, sort=False)
    position = grouped.cumcount().to_numpy()
    n = grouped.transform("size").to_numpy()
    k = np.clip(n // 3, 1, 3)
    return pd.DataFrame(
        {
            "n": grouped.size(),
            "start": values[position < k].groupby(level=0, sort=False).mean(),
            "end": values[position >= n - k].groupby(level=0, sort=False).mean(),
        }
    )


def _suspects(wide: pd.DataFrame, names: dict[str, str | None], caps: dict[int, int | None]) -> set[int]:
    """Trials that may break a rule, screened for all trials at once with the rules' own window means.

    ``check_curves`` then decides (and words) each flag for these trials only: calling it for each of
    10,000 trials costs more than the rest of the diagnostics.
    """

    def finite(role):
        name = names.get(role)
        if name is None or name not in wide:
            return None
        column = wide[name]
        return column[np.isfinite(column.to_numpy())]

    out: set[int] = set()
    entropy = finite("entropy")
    if entropy is not None and len(entropy):
        w = _windows(entropy)
        hit = (
            (w["n"] >= MIN_ITERATIONS)
            & (w["start"] > 0)
            & (w["end"] <= ENTROPY_COLLAPSE_RATIO * w["start"] * (1 + _EPS))
        )
        out.update(w.index[hit].tolist())
    if names.get("kl") is not None and names["kl"] in wide:
        kl = wide[names["kl"]]
        kl = kl[kl.notna()].abs()
        if len(kl):
            broken = kl.groupby(level=0, sort=False).max() >= KL_BLOWUP_NATS * (1 - _EPS)  # inf counts here too
            w = _windows(kl)
            grown = (
                (w["n"] >= MIN_ITERATIONS)
                & (w["end"] > KL_GROWTH_FLOOR * (1 - _EPS))
                & (w["end"] >= KL_GROWTH * w["start"] * (1 - _EPS))
            )
            out.update(broken.index[broken].tolist())
            out.update(w.index[grown].tolist())
    fmt, acc = finite("format"), finite("acc")
    if fmt is not None and acc is not None and len(fmt) and len(acc):
        f, a = _windows(fmt), _windows(acc)
        both = f.add_suffix("_f").join(a.add_suffix("_a"), how="inner")
        hit = (
            (both["n_f"] >= MIN_ITERATIONS)
            & (both["n_a"] >= MIN_ITERATIONS)
            & (both["end_f"] - both["start_f"] >= FORMAT_RISE - _EPS)
            & (both["end_a"] - both["start_a"] < ACCURACY_FLAT + _EPS)
        )
        out.update(both.index[hit].tolist())
    length = finite("length")
    if length is not None and len(length):
        w = _windows(length)
        cap = pd.Series({n: c for n, c in caps.items() if c}, dtype="float64").reindex(w.index)
        hit = w["end"] >= LENGTH_PINNED_FRACTION * cap * (1 - _EPS)
        out.update(w.index[hit].tolist())  # no cap: NaN, never a hit
    return {int(n) for n in out}


def _pick(metrics: pd.DataFrame, names: tuple[str, ...]) -> str | None:
    present = set(metrics["metric"].unique())
    for name in names:
        if name in present:
            return name
    if names is FORMAT:  # any other format verifier, e.g. `boxed_format_rewards/mean`
        for name in sorted(present):
            if "format" in name and name.endswith("_rewards/mean"):
                return name
    return None


def _window(n: int) -> int:
    return max(1, min(3, n // 3))


def check_curves(
    iterations: np.ndarray, series: dict[str, np.ndarray], names: dict[str, str | None], cap: int | None
) -> list[Flag]:
    """The flags of one trial from its curves (``series[role]`` aligned with ``iterations``; NaN = missing)."""
    flags = []
    entropy = _finite(iterations, series.get("entropy"))
    if entropy is not None and len(entropy[1]) >= MIN_ITERATIONS:
        its, ys = entropy
        k = _window(len(ys))
        start, end = ys[:k].mean(), ys[-k:].mean()
        if start > 0 and end <= ENTROPY_COLLAPSE_RATIO * start:
            at = int(np.argmax(ys <= ENTROPY_COLLAPSE_RATIO * start))
            flags.append(
                Flag(
                    "entropy_collapse",
                    f"{names['entropy']} fell from {start:.3g} to {end:.3g} ({end / start:.0%})",
                    int(its[at]),
                    names["entropy"],
                    float(ys[at]),
                )
            )

    kl = series.get("kl")
    if kl is not None:
        flag = _kl_flag(iterations, kl, names["kl"])
        if flag:
            flags.append(flag)

    fmt, acc = _finite(iterations, series.get("format")), _finite(iterations, series.get("acc"))
    if fmt is not None and acc is not None and min(len(fmt[1]), len(acc[1])) >= MIN_ITERATIONS:
        k_f, k_a = _window(len(fmt[1])), _window(len(acc[1]))
        rise = fmt[1][-k_f:].mean() - fmt[1][:k_f].mean()
        gain = acc[1][-k_a:].mean() - acc[1][:k_a].mean()
        if rise >= FORMAT_RISE and gain < ACCURACY_FLAT:
            flags.append(
                Flag(
                    "format_without_accuracy",
                    f"{names['format']} rose by {rise:+.2f} while {names['acc']} changed by {gain:+.2f}",
                    int(fmt[0][-1]),
                    names["format"],
                    float(fmt[1][-1]),
                )
            )

    length = _finite(iterations, series.get("length"))
    if length is not None and cap:
        its, ys = length
        k = _window(len(ys))
        tail = ys[-k:].mean()
        if tail >= LENGTH_PINNED_FRACTION * cap:
            flags.append(
                Flag(
                    "length_pinned",
                    f"{names['length']} averages {tail:.0f} of max_tokens {cap} over the last {k} iteration(s)",
                    int(its[-k]),
                    names["length"],
                    float(ys[-k]),
                )
            )
    return flags


def _kl_flag(iterations: np.ndarray, kl: np.ndarray, name: str) -> Flag | None:
    present = ~np.isnan(kl)
    its, ys = iterations[present], kl[present]
    if len(ys) == 0:
        return None
    bad = ~np.isfinite(ys)
    if bad.any():
        at = int(np.argmax(bad))
        return Flag("kl_blowup", f"{name} became {ys[at]} at iteration {its[at]}", int(its[at]), name, math.nan)
    high = np.abs(ys) >= KL_BLOWUP_NATS
    if high.any():
        at = int(np.argmax(high))
        return Flag(
            "kl_blowup", f"{name} reached {ys[at]:.3g} at iteration {its[at]}", int(its[at]), name, float(ys[at])
        )
    k = _window(len(ys))
    start, end = np.abs(ys[:k]).mean(), np.abs(ys[-k:]).mean()
    if len(ys) >= MIN_ITERATIONS and end > KL_GROWTH_FLOOR and end >= KL_GROWTH * start:
        return Flag("kl_blowup", f"{name} grew from {start:.3g} to {end:.3g}", int(its[-1]), name, float(ys[-1]))
    return None


def _finite(iterations: np.ndarray, values: np.ndarray | None):
    """(iterations, values) where the value is finite, or None when there is none."""
    if values is None:
        return None
    keep = np.isfinite(values)
    if not keep.any():
        return None
    return iterations[keep], values[keep]
