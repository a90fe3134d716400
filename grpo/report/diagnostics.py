"""GRPO health flags per trial: small rules over a trial's learning curves, each written once.

Each rule reads the per-iteration metrics (the mean over seeds) of one trial and fires at most once,
at the iteration where it shows:

- ``entropy_collapse``: ``actor/entropy`` averaged over the last ``k`` iterations is at most
  ``ENTROPY_COLLAPSE_RATIO`` (10 %) of its average over the first ``k``. The policy has stopped
  exploring; GRPO's group advantages go to zero when every sample of a prompt is the same.
- ``kl_blowup``: ``actor/kl_loss`` is non-finite, or reaches ``KL_BLOWUP_NATS`` (1 nat per token), or
  ends at least ``KL_GROWTH`` (10x) above its first-``k`` average while being above ``KL_GROWTH_FLOOR``
  (0.2). The policy has run away from the reference model.
- ``length_blowup``: ``response_length/mean`` over the last ``k`` iterations is at least
  ``LENGTH_GROWTH`` (3x) its first-``k`` average: responses ramble (often the road to truncation).
- ``length_pinned``: ``response_length/truncated`` (the share of responses that hit ``max_tokens``
  without a stop token) averages at least ``TRUNCATED_SHARE`` (50 %) over the last ``k`` iterations, or,
  where that metric is not reported, ``response_length/mean`` is at least ``LENGTH_PINNED_FRACTION``
  (90 %) of ``max_tokens`` (the trial's ``config.generate_config.sampling_config.max_tokens``).
- ``zero_variance_groups``: ``grpo/zero_variance_groups`` (the share of prompt groups whose samples all
  got the same reward) averages at least ``ZERO_VARIANCE_SHARE`` (50 %) over the last ``k``
  iterations: those groups have zero advantage, so most of the batch gives no gradient.
- ``clip_saturation``: ``actor/pg_clipfrac`` averages at least ``CLIP_SATURATION`` (0.2) over the last
  ``k`` iterations: much of each update is clipped away, the steps are too large for ``clip_ratio``.
- ``reward_up_heldout_down``: held-out accuracy (``eval/acc_greedy``, else ``eval/acc``, over at least
  ``MIN_ITERATIONS`` evaluations) ends at least ``HELDOUT_DROP`` (0.05, or twice its binomial standard
  error on ``eval/prompts`` prompts, whichever is larger) below its peak, the peak lies before the last
  window, and the training reward (``grpo/score/mean``) rose by at least ``REWARD_RISE`` (0.05) from
  the first to the last window: reward hacking or overfitting.
- ``format_without_accuracy``: the format reward (``strict_format_rewards/mean`` or another
  ``*format*_rewards/mean``) rises by at least ``FORMAT_RISE`` (0.2) from the first ``k`` to the last
  ``k`` iterations while the training accuracy (``grpo/acc/mean``, a fraction; else the accuracy reward
  ``acc_rewards/mean``) rises by less than ``ACCURACY_FLAT`` (0.02): the policy learned the answer
  format, not the task (reward hacking on the easy verifier).

``k`` is a third of a curve's points, between 1 and 3. The trend rules need at least ``MIN_ITERATIONS``
(3) points; the others fire from the first iteration.

Each rule is written once, in ``RULES``: a function from the curves' window statistics of *all* trials
(``Curves``, computed at once with pandas) to the flags of the trials that break it, with a one-line
``explanation`` (the test) and ``meaning`` (what it tells a person). The same code answers for a whole
study (``diagnose``) and for one trial's curves (``check_curves``).

    from grpo.report.diagnostics import diagnose
    flags = diagnose(study, frames.metrics)   # {trial number: [Flag(name, detail, iteration, metric, value)]}
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np
import optuna
import pandas as pd

from grpo.report.trial_config import config_path, recorded_config
from grpo.trial_attrs import OVERRIDES

ENTROPY_COLLAPSE_RATIO = 0.1
KL_BLOWUP_NATS = 1.0
KL_GROWTH = 10.0
KL_GROWTH_FLOOR = 0.2
LENGTH_GROWTH = 3.0
LENGTH_PINNED_FRACTION = 0.9
TRUNCATED_SHARE = 0.5
ZERO_VARIANCE_SHARE = 0.5
CLIP_SATURATION = 0.2
HELDOUT_DROP = 0.05
REWARD_RISE = 0.05
FORMAT_RISE = 0.2
ACCURACY_FLAT = 0.02
MIN_ITERATIONS = 3

# Metric names per role: MindSpeed-RL's first, then the spellings an older log may use.
ENTROPY = ("actor/entropy", "grpo/entropy")
KL = ("actor/kl_loss", "grpo/kl")
REWARD = ("grpo/score/mean", "grpo/rewards/mean")
# Training accuracy: the fraction correct first; the accuracy *reward* (+1/-0.5/-1) where that is all there is.
ACCURACY = ("grpo/acc/mean", "acc_rewards/mean")
HELD_OUT = ("eval/acc_greedy", "eval/acc")
EVAL_PROMPTS = ("eval/prompts",)
FORMAT = ("strict_format_rewards/mean", "format_rewards/mean")
RESPONSE_LENGTH = ("response_length/mean",)
TRUNCATED = ("response_length/truncated",)
ZERO_VARIANCE = ("grpo/zero_variance_groups",)
CLIP_FRACTION = ("actor/pg_clipfrac",)
ROLES = {
    "entropy": ENTROPY,
    "kl": KL,
    "reward": REWARD,
    "acc": ACCURACY,
    "held_out": HELD_OUT,
    "prompts": EVAL_PROMPTS,
    "format": FORMAT,
    "length": RESPONSE_LENGTH,
    "truncated": TRUNCATED,
    "zero_var": ZERO_VARIANCE,
    "clip": CLIP_FRACTION,
}


@dataclass(frozen=True)
class Flag:
    """One diagnostic that fired: its rule ``name``, a one-line ``detail``, where it shows on which curve."""

    name: str
    detail: str
    iteration: int
    metric: str
    value: float


class Curves:
    """Window statistics of one role's curve (say ``kl``) for every trial at once, indexed by trial.

    ``values`` is indexed by (trial, iteration), sorted, and holds the points the role's rule reads.
    Columns of ``stats``: ``n`` points, ``k`` (the window: a third of ``n``, 1 to 3), ``start`` / ``end``
    (mean of the first / last ``k`` of ``windowed``, which defaults to ``values``), ``last_iteration`` /
    ``last_value``, ``tail_iteration`` / ``tail_value`` (the first point of the last window).
    """

    def __init__(self, name: str, values: pd.Series, windowed: pd.Series | None = None):
        windowed = values if windowed is None else windowed
        self.name = name
        self.values = values
        self.trials = values.index.get_level_values(0).to_numpy()
        self.iterations = values.index.get_level_values(1).to_numpy()
        grouped = values.groupby(level=0, sort=False)
        position = grouped.cumcount().to_numpy()
        n = grouped.transform("size").to_numpy()
        k = np.clip(n // 3, 1, 3)
        tail, last = position == n - k, position == n - 1
        y = values.to_numpy(dtype=float)
        self.stats = pd.DataFrame(
            {
                "n": grouped.size(),
                "k": pd.Series(k[last], index=self.trials[last]),
                "start": windowed[position < k].groupby(level=0, sort=False).mean(),
                "end": windowed[position >= n - k].groupby(level=0, sort=False).mean(),
                "last_iteration": pd.Series(self.iterations[last], index=self.trials[last]),
                "last_value": pd.Series(y[last], index=self.trials[last]),
                "tail_iteration": pd.Series(self.iterations[tail], index=self.trials[tail]),
                "tail_value": pd.Series(y[tail], index=self.trials[tail]),
            }
        )

    def first_where(self, mask: np.ndarray) -> pd.DataFrame:
        """Per trial, the first point where ``mask`` (aligned with ``values``) holds: ``iteration``, ``value``."""
        hit = pd.DataFrame(
            {"iteration": self.iterations[mask], "value": self.values.to_numpy(dtype=float)[mask]},
            index=self.trials[mask],
        )
        return hit[~hit.index.duplicated(keep="first")]

    def per_point(self, column: pd.Series) -> np.ndarray:
        """A per-trial ``column`` (indexed by trial) spread onto every point of that trial."""
        return column.reindex(self.trials).to_numpy(dtype=float)


# A rule: (curves by role, max_tokens by trial) -> {trial: Flag} for the trials that break it.
Check = Callable[[Mapping[str, Curves], Mapping[int, int | None]], dict[int, Flag]]


@dataclass(frozen=True)
class Rule:
    name: str
    explanation: str  # one line: the test, with its thresholds
    check: Check
    meaning: str = ""  # one line: what it tells a person tuning GRPO


def _entropy_collapse(curves: Mapping[str, Curves], caps: Mapping[int, int | None]) -> dict[int, Flag]:
    c = curves.get("entropy")
    if c is None:
        return {}
    s = c.stats
    fired = s[(s["n"] >= MIN_ITERATIONS) & (s["start"] > 0) & (s["end"] <= ENTROPY_COLLAPSE_RATIO * s["start"])]
    if fired.empty:
        return {}
    # Where it shows: the first point at or below the threshold (the window mean is, so one point is).
    at = c.first_where(c.values.to_numpy(dtype=float) <= ENTROPY_COLLAPSE_RATIO * c.per_point(fired["start"]))
    return {
        int(t): Flag(
            "entropy_collapse",
            f"{c.name} fell from {r.start:.3g} to {r.end:.3g} ({r.end / r.start:.0%})",
            int(at.at[t, "iteration"]),
            c.name,
            float(at.at[t, "value"]),
        )
        for t, r in fired.iterrows()
    }


def _kl_blowup(curves: Mapping[str, Curves], caps: Mapping[int, int | None]) -> dict[int, Flag]:
    c = curves.get("kl")  # NaN points are dropped, infinite ones kept: they are the blow-up
    if c is None:
        return {}
    y = c.values.to_numpy(dtype=float)
    s = c.stats  # windows over |kl| (see _curves)
    broken, high = c.first_where(~np.isfinite(y)), c.first_where(np.abs(y) >= KL_BLOWUP_NATS)
    grown = s[(s["n"] >= MIN_ITERATIONS) & (s["end"] > KL_GROWTH_FLOOR) & (s["end"] >= KL_GROWTH * s["start"])]
    out: dict[int, Flag] = {}
    for t, r in grown.iterrows():
        detail = f"{c.name} grew from {r.start:.3g} to {r.end:.3g}"
        out[int(t)] = Flag("kl_blowup", detail, int(r.last_iteration), c.name, float(r.last_value))
    for t, r in high.iterrows():  # reaching the limit is the clearer story: it replaces growth
        detail = f"{c.name} reached {r.value:.3g} at iteration {int(r.iteration)}"
        out[int(t)] = Flag("kl_blowup", detail, int(r.iteration), c.name, float(r.value))
    for t, r in broken.iterrows():  # a non-finite KL says most: it replaces both
        detail = f"{c.name} became {r.value} at iteration {int(r.iteration)}"
        out[int(t)] = Flag("kl_blowup", detail, int(r.iteration), c.name, math.nan)
    return out


def _length_blowup(curves: Mapping[str, Curves], caps: Mapping[int, int | None]) -> dict[int, Flag]:
    c = curves.get("length")
    if c is None:
        return {}
    s = c.stats
    fired = s[(s["n"] >= MIN_ITERATIONS) & (s["start"] > 0) & (s["end"] >= LENGTH_GROWTH * s["start"])]
    if fired.empty:
        return {}
    at = c.first_where(c.values.to_numpy(dtype=float) >= LENGTH_GROWTH * c.per_point(fired["start"]))
    return {
        int(t): Flag(
            "length_blowup",
            f"{c.name} grew from {r.start:.3g} to {r.end:.3g} tokens ({r.end / r.start:.1f}x)",
            int(at.at[t, "iteration"]),
            c.name,
            float(at.at[t, "value"]),
        )
        for t, r in fired.iterrows()
    }


def _length_pinned(curves: Mapping[str, Curves], caps: Mapping[int, int | None]) -> dict[int, Flag]:
    out: dict[int, Flag] = {}
    c = curves.get("length")
    if c is not None:
        s = c.stats
        cap = pd.Series({n: v for n, v in caps.items() if v}, dtype="float64").reindex(s.index)
        fired = s[s["end"] >= LENGTH_PINNED_FRACTION * cap]  # no cap: NaN, never fires
        for t, r in fired.iterrows():
            out[int(t)] = Flag(
                "length_pinned",
                f"{c.name} averages {r.end:.0f} of max_tokens {int(cap[t])} over the last {int(r.k)} iteration(s)",
                int(r.tail_iteration),
                c.name,
                float(r.tail_value),
            )
    share = curves.get("truncated")
    if share is not None:  # the direct measurement: it replaces the estimate from the mean length
        s = share.stats
        for t, r in s[s["end"] >= TRUNCATED_SHARE].iterrows():
            out[int(t)] = Flag(
                "length_pinned",
                f"{r.end:.0%} of responses hit max_tokens without a stop token over the last {int(r.k)} iteration(s)",
                int(r.tail_iteration),
                share.name,
                float(r.tail_value),
            )
    return out


def _share_above(
    role: str, name: str, threshold: float, text: Callable[[Curves, pd.Series], str]
) -> Callable[[Mapping[str, Curves], Mapping[int, int | None]], dict[int, Flag]]:
    """A rule that fires when a share's last-window mean reaches ``threshold``, at the first point that did."""

    def check(curves: Mapping[str, Curves], caps: Mapping[int, int | None]) -> dict[int, Flag]:
        c = curves.get(role)
        if c is None:
            return {}
        s = c.stats
        fired = s[s["end"] >= threshold]
        if fired.empty:
            return {}
        at = c.first_where((c.values.to_numpy(dtype=float) >= threshold) & np.isin(c.trials, fired.index))
        return {
            int(t): Flag(name, text(c, r), int(at.at[t, "iteration"]), c.name, float(at.at[t, "value"]))
            for t, r in fired.iterrows()
        }

    return check


_zero_variance_groups = _share_above(
    "zero_var",
    "zero_variance_groups",
    ZERO_VARIANCE_SHARE,
    lambda c, r: (
        f"{r.end:.0%} of prompt groups got one reward for all their samples over the last {int(r.k)} iteration(s)"
    ),
)
_clip_saturation = _share_above(
    "clip",
    "clip_saturation",
    CLIP_SATURATION,
    lambda c, r: f"{c.name} averages {r.end:.2f} over the last {int(r.k)} iteration(s)",
)


def _reward_up_heldout_down(curves: Mapping[str, Curves], caps: Mapping[int, int | None]) -> dict[int, Flag]:
    held, reward = curves.get("held_out"), curves.get("reward")
    if held is None or reward is None:
        return {}
    by_trial = held.values.groupby(level=0, sort=False)
    peak = by_trial.max()
    peak_at = pd.Series([i for _, i in by_trial.idxmax()], index=peak.index)
    prompts = curves["prompts"].stats["last_value"] if "prompts" in curves else pd.Series(dtype="float64")
    p = peak.clip(0.0, 1.0)  # an accuracy; clipped so a stray value outside [0, 1] cannot take a root of < 0
    noise = 2 * np.sqrt(p * (1 - p) / prompts.reindex(peak.index))  # binomial standard error, twice
    drop_needed = np.fmax(noise.to_numpy(dtype=float), HELDOUT_DROP)  # fmax: no prompt count -> HELDOUT_DROP
    h = held.stats.assign(peak=peak, peak_at=peak_at, needed=pd.Series(drop_needed, index=peak.index))
    both = h.join(reward.stats[["n", "start", "end"]].add_suffix("_reward"), how="inner")
    rise = both["end_reward"] - both["start_reward"]
    fired = both[
        (both["n"] >= MIN_ITERATIONS)
        & (both["n_reward"] >= MIN_ITERATIONS)
        & (both["peak_at"] < both["tail_iteration"])
        & (both["peak"] - both["end"] >= both["needed"])
        & (rise >= REWARD_RISE)
    ]
    if fired.empty:
        return {}
    y = held.values.to_numpy(dtype=float)
    after_peak = held.iterations > held.per_point(fired["peak_at"])  # NaN (not fired) compares False
    at = held.first_where(after_peak & (y <= held.per_point(fired["peak"] - fired["needed"])))
    return {
        int(t): Flag(
            "reward_up_heldout_down",
            f"{reward.name} rose by {rise[t]:+.3g} while {held.name} fell from {r.peak:.3g} "
            f"(iteration {int(r.peak_at)}) to {r.end:.3g}",
            int(at.at[t, "iteration"]),
            held.name,
            float(at.at[t, "value"]),
        )
        for t, r in fired.iterrows()
    }


def _format_without_accuracy(curves: Mapping[str, Curves], caps: Mapping[int, int | None]) -> dict[int, Flag]:
    fmt, acc = curves.get("format"), curves.get("acc")
    if fmt is None or acc is None:
        return {}
    both = fmt.stats.join(acc.stats.add_suffix("_acc"), how="inner")
    rise, gain = both["end"] - both["start"], both["end_acc"] - both["start_acc"]
    enough = (both["n"] >= MIN_ITERATIONS) & (both["n_acc"] >= MIN_ITERATIONS)
    fired = both[enough & (rise >= FORMAT_RISE) & (gain < ACCURACY_FLAT)]
    return {
        int(t): Flag(
            "format_without_accuracy",
            f"{fmt.name} rose by {rise[t]:+.2f} while {acc.name} changed by {gain[t]:+.2f}",
            int(r.last_iteration),
            fmt.name,
            float(r.last_value),
        )
        for t, r in fired.iterrows()
    }


RULES: tuple[Rule, ...] = (
    Rule(
        "entropy_collapse",
        f"actor/entropy falls to <= {ENTROPY_COLLAPSE_RATIO:.0%} of its starting value",
        _entropy_collapse,
        "the policy stopped exploring: every sample of a prompt is the same, so its group advantage is 0",
    ),
    Rule(
        "kl_blowup",
        f"actor/kl_loss is non-finite, reaches {KL_BLOWUP_NATS:g}, or ends >= {KL_GROWTH:g}x its start "
        f"while above {KL_GROWTH_FLOOR:g}",
        _kl_blowup,
        "the policy ran away from the reference model: raise init_kl_coef or lower the learning rate",
    ),
    Rule(
        "length_blowup",
        f"response_length/mean ends >= {LENGTH_GROWTH:g}x its starting value",
        _length_blowup,
        "responses grow without bound: longer answers are being rewarded, or the policy lost its stop token",
    ),
    Rule(
        "length_pinned",
        f"response_length/truncated stays >= {TRUNCATED_SHARE:.0%} (or, without it, response_length/mean "
        f">= {LENGTH_PINNED_FRACTION:.0%} of max_tokens)",
        _length_pinned,
        "most responses are cut off by max_tokens: they cannot be scored as answers; raise max_tokens",
    ),
    Rule(
        "zero_variance_groups",
        f"grpo/zero_variance_groups stays >= {ZERO_VARIANCE_SHARE:.0%}",
        _zero_variance_groups,
        "most prompt groups are all-right or all-wrong, so they give no gradient: the task is too easy or "
        "too hard for the policy, or n_samples_per_prompt is too small",
    ),
    Rule(
        "clip_saturation",
        f"actor/pg_clipfrac stays >= {CLIP_SATURATION:g}",
        _clip_saturation,
        "much of each update is clipped away: steps are too large for clip_ratio (lower the learning rate)",
    ),
    Rule(
        "reward_up_heldout_down",
        f"held-out accuracy ends >= {HELDOUT_DROP:g} (or 2 standard errors) below its peak while the training "
        f"reward rises by >= {REWARD_RISE:g}",
        _reward_up_heldout_down,
        "the policy is getting better at the training reward and worse at the task: reward hacking or overfitting",
    ),
    Rule(
        "format_without_accuracy",
        f"format reward rises by >= {FORMAT_RISE:g} while training accuracy rises by < {ACCURACY_FLAT:g}",
        _format_without_accuracy,
        "the policy learned the answer format, not the task: reward hacking on the easy verifier",
    ),
)


_MAX_TOKENS: dict[tuple[str, int, int], int | None] = {}  # (config file, mtime, size) -> its max_tokens


def max_tokens(trial: optuna.trial.FrozenTrial, study: optuna.Study | None = None) -> int | None:
    """``generate_config.sampling_config.max_tokens`` of the trial's recorded config, if any.

    Read without opening the trial's file when its overrides say it (the study's ``base_config`` is the base
    with the spec's overrides; a trial's ``overrides`` are those plus its sampled keys): a 10,000-trial report
    opens no file for it. Else remembered per config file (path, mtime, size): the driver refreshes the report
    after every trial, and parsing every trial's YAML again each time would grow with the square of the trials."""
    from_overrides = _max_tokens_from_overrides(trial, study)
    if from_overrides is not _UNKNOWN:
        return from_overrides  # type: ignore[return-value]
    path = config_path(trial, study)
    key = None
    if path is not None:
        try:
            st = path.stat()
            key = (str(path), st.st_mtime_ns, st.st_size)
        except OSError:
            pass
        if key in _MAX_TOKENS:
            return _MAX_TOKENS[key]
    found = recorded_config(trial, study)
    value = _max_tokens(found.config if found is not None else None)
    if key is not None:
        _MAX_TOKENS[key] = value
    return value


_UNKNOWN = object()
MAX_TOKENS_KEY = "generate_config.sampling_config.max_tokens"


def _max_tokens_from_overrides(trial: optuna.trial.FrozenTrial, study: optuna.Study | None) -> object:
    """max_tokens from the study's base config and the trial's overrides; ``_UNKNOWN`` when they cannot say
    (no base config or overrides recorded, or a config-group override, which may set anything)."""
    overrides = trial.user_attrs.get(OVERRIDES)
    base = study.user_attrs.get("base_config") if study is not None else None
    if not isinstance(overrides, list) or not isinstance(base, dict):
        return _UNKNOWN
    value: object = _max_tokens(base)
    for override in overrides:
        key, sep, text = str(override).partition("=")
        key = key.lstrip("+~")
        if not sep or "." not in key:  # a group choice (model=..., layout=...): read the trial's own config
            return _UNKNOWN
        if key == MAX_TOKENS_KEY:
            try:
                value = int(text)
            except ValueError:
                return _UNKNOWN
    return value


def _max_tokens(config: dict | None) -> int | None:
    try:
        value = config["generate_config"]["sampling_config"]["max_tokens"]  # type: ignore[index]
    except (KeyError, TypeError):
        return None
    return int(value) if isinstance(value, (int, float)) and value > 0 else None


def evaluate(
    wide: pd.DataFrame, names: Mapping[str, str | None], caps: Mapping[int, int | None]
) -> dict[int, list[Flag]]:
    """Every rule over ``wide`` (index (trial, iteration), sorted; a column per metric name; NaN = missing).

    ``names[role]`` is the metric each role reads. Returns the flags of the trials with at least one,
    in ``RULES`` order.
    """
    curves = _curves(wide, names)
    out: dict[int, list[Flag]] = {}
    for rule in RULES:
        for number, flag in sorted(rule.check(curves, caps).items()):
            out.setdefault(number, []).append(flag)
    return dict(sorted(out.items()))


def _curves(wide: pd.DataFrame, names: Mapping[str, str | None]) -> dict[str, Curves]:
    out: dict[str, Curves] = {}
    for role, name in names.items():
        if name is None or name not in wide:
            continue
        column = wide[name].astype("float64")
        values = column.to_numpy()
        if role == "kl":  # NaN is missing, +-inf is kept (the rule flags it); windows over |kl|
            column = column[~np.isnan(values)]
            if len(column):
                out[role] = Curves(name, column, windowed=column.abs())
            continue
        column = column[np.isfinite(values)]
        if len(column):
            out[role] = Curves(name, column)
    return out


def diagnose(study: optuna.Study, metrics: pd.DataFrame) -> dict[int, list[Flag]]:
    """Every trial's flags (only trials with at least one flag appear); see the module docstring."""
    if metrics.empty:
        return {}
    present = set(metrics["metric"].unique())
    names = {role: _pick(present, candidates) for role, candidates in ROLES.items()}
    wanted = [m for m in names.values() if m is not None]
    if not wanted:
        return {}
    part = metrics[metrics["metric"].isin(wanted)]
    # Mean over seeds: one value per trial, iteration and metric.
    wide = part.groupby(["trial", "iteration", "metric"], sort=True)["value"].mean().unstack("metric")
    caps = {t.number: max_tokens(t, study) for t in study.get_trials(deepcopy=False)}
    return evaluate(wide, names, caps)


def check_curves(
    iterations: np.ndarray, series: Mapping[str, np.ndarray], names: Mapping[str, str | None], cap: int | None
) -> list[Flag]:
    """The flags of one trial from its curves (``series[role]`` aligned with ``iterations``; NaN = missing)."""
    index = pd.MultiIndex.from_arrays([np.zeros(len(iterations), dtype=int), np.asarray(iterations)])
    wide = pd.DataFrame({names[role]: np.asarray(values, dtype=float) for role, values in series.items()}, index=index)
    return evaluate(wide, {role: names[role] for role in series}, {0: cap}).get(0, [])


def _pick(present: set[str], names: tuple[str, ...]) -> str | None:
    for name in names:
        if name in present:
            return name
    if names is FORMAT:  # any other format verifier, e.g. `boxed_format_rewards/mean`
        for name in sorted(present):
            if "format" in name and name.endswith("_rewards/mean"):
                return name
    return None
