"""A study as two pandas frames: one row per trial, and every per-iteration metric in long form.

``collect(study)`` works from the study storage and the trial dirs alone, so it answers for a finished
study, a running one, and one whose driver was killed: a trial dir that is missing is skipped, a
``metrics.jsonl`` whose last line was cut off mid-write is read up to that line.

    from grpo.report import collect
    frames = collect(study)
    frames.trials      # number, state, params_*, value (or values_*), seed_spread, duration_s, ...
    frames.metrics     # trial, seed, iteration, metric, value
    frames.metrics.query("metric == 'acc_rewards/mean'").pivot_table(index="iteration", columns="trial")

A retry is a new Optuna trial (``retry_of``: the failed attempt; Optuna keeps that FAIL record) that
resumes from the failed attempt's checkpoint and adopts its metrics up to it. ``grpo.report.chains`` links the
attempts into one logical trial: the trials frame names each trial's ``logical_trial`` (its first
attempt), the trial that ``superseded_by`` it, and where a retry resumed; the retry's own metrics hold
the whole curve (the driver copies the adopted lines into its ``metrics.jsonl``; a retry whose file
lacks them gets them from the attempt it resumed, up to the checkpoint it resumed at). ``disk_bytes``
and ``checkpoint_bytes`` are what each trial folder takes on disk (``grpo.report.disk``; NaN: unknown).
"""

from __future__ import annotations

import datetime as dt
import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeGuard

import optuna
import pandas as pd
from optuna.trial import FrozenTrial, TrialState

from grpo._fs import read_jsonl
from grpo.report._snapshot import StudySnapshot, snapshot
from grpo.report.chains import resumed_at, retry_chains
from grpo.report.diagnostics import Flag, diagnose
from grpo.report.disk import DiskReport, trial_usage
from grpo.trial_attrs import (
    ATTEMPT,
    BRANCH_OF,
    BRANCHED_AT,
    CONFIRMATION_OF,
    CPU_S,
    DEVICES,
    EXPLOITED,
    FAILURE_REASON,
    NODE,
    NPU_S,
    OVERRIDES,
    PBT_GENERATION,
    PBT_MEMBER,
    PROMOTED_BASE,
    PRUNED_REASON,
    RESUME_FROM,
    RETRY_OF,
    SEEDS,
    START_POINT,
    TRANSFERRED_FROM,
    TRIAL_DIR,
    VALUE_INTERVAL,
    VALUE_SPREAD,
    VALUES_PER_SEED,
    WALL_S,
)

METRIC_COLUMNS = ["trial", "seed", "iteration", "metric", "value"]

# The trial attrs copied into the trials frame as they are (strings or numbers).
# START_POINT and TRANSFERRED_FROM: where a trial tried first came from (the spec's start_points, another study).
_PLAIN_ATTRS = (
    WALL_S,
    CPU_S,
    NPU_S,
    FAILURE_REASON,
    PRUNED_REASON,
    NODE,
    ATTEMPT,
    RETRY_OF,
    CONFIRMATION_OF,
    START_POINT,
    TRANSFERRED_FROM,
)
# The throughput metric the backends report (MindSpeed-RL: tokens per second per NPU).
THROUGHPUT = "e2e_tps"


@dataclass(frozen=True)
class Frames:
    """``trials``: one row per trial; ``metrics``: long per-iteration metrics (``METRIC_COLUMNS``).

    ``flags`` maps a trial number to its GRPO diagnostics (``grpo.report.diagnostics.Flag``); the
    ``flags`` column of ``trials`` holds their names. ``disk``: how much of the trial folders the disk
    walk measured (``grpo.report.disk.DiskReport``; None when the frames were built without it).
    """

    trials: pd.DataFrame
    metrics: pd.DataFrame
    flags: dict[int, list[Flag]] = field(default_factory=dict)
    disk: DiskReport | None = None


def collect(study: optuna.Study) -> Frames:
    """Read ``study`` (storage + trial dirs) into ``Frames``; see the module docstring."""
    snap = snapshot(study)
    dirs = trial_dirs(snap)
    metrics = metrics_frame(snap, dirs)
    flags = diagnose(snap, metrics)
    disk = trial_usage(dirs)
    trials = trials_frame(snap, metrics, flags, dirs, disk)
    return Frames(trials=trials, metrics=metrics, flags=flags, disk=disk)


# ------------------------------------------------------------------------------------------ naming
def value_columns(study: optuna.Study) -> list[str]:
    """The objective value columns of Optuna's trials dataframe: ``value`` or ``values_0``, ``values_1``..."""
    names = study.metric_names
    if len(study.directions) == 1:
        return ["value" if names is None else f"value_{names[0]}"]
    return [f"values_{n}" for n in (names or range(len(study.directions)))]


def spread_columns(study: optuna.Study) -> list[str]:
    """``seed_spread`` (one objective) or ``seed_spread_0``, ``seed_spread_1``... (one per objective)."""
    n = len(study.directions)
    return ["seed_spread"] if n == 1 else [f"seed_spread_{i}" for i in range(n)]


@dataclass(frozen=True)
class Objective:
    """One objective of a study: the ``metric`` it reduces, ``maximize``/``minimize``, and the reducer."""

    metric: str
    direction: str
    reduce: str | None = None


def study_objectives(study: optuna.Study) -> list[Objective]:
    """The study's objectives, from its ``objectives`` attr (the spec's objectives, as the sweep stores them).

    A study made outside grpo-sweep has no such attr: its objectives are named ``objective 0``... with
    the study's directions.
    """
    stored = study.user_attrs.get("objectives") or []
    out = []
    for i, direction in enumerate(study.directions):
        entry = stored[i] if i < len(stored) and isinstance(stored[i], dict) else {}
        default = f"objective {i}" if len(study.directions) > 1 else "objective"
        out.append(
            Objective(
                metric=str(entry.get("metric") or default),
                direction="maximize" if direction == optuna.study.StudyDirection.MAXIMIZE else "minimize",
                reduce=entry.get("reduce"),
            )
        )
    return out


# -------------------------------------------------------------------------------------- trial dirs
def _candidates(trial: FrozenTrial, study_dir: str | None) -> list[str]:
    # Plain strings: pathlib costs more than the file system here at 10,000 trials.
    paths = []
    if trial.user_attrs.get(TRIAL_DIR):
        paths.append(os.path.normpath(str(trial.user_attrs[TRIAL_DIR])))
    if study_dir:
        path = os.path.join(study_dir, "trials", str(trial.number))
        if path not in paths:  # usually the same path as the attr
            paths.append(path)
    return paths


def _study_dir(study: optuna.Study) -> str | None:
    value = study.user_attrs.get("study_dir")
    return os.path.normpath(str(value)) if value else None


def trial_dir(trial: FrozenTrial, study: optuna.Study) -> Path | None:
    """The trial's dir: its ``trial_dir`` attr, else ``<study_dir>/trials/<number>``; None if neither exists."""
    return next((Path(p) for p in _candidates(trial, _study_dir(study)) if os.path.isdir(p)), None)


def trial_dirs(study: optuna.Study) -> dict[int, Path | None]:
    """``trial_dir`` of every trial of ``study``, listing each parent folder once instead of one
    ``stat`` per trial (10,000 trials on a network or overlay file system add up)."""
    listings: dict[str, set[str]] = {}

    def exists(path: str) -> bool:
        parent, name = os.path.split(path)
        if parent not in listings:
            try:
                with os.scandir(parent or ".") as entries:
                    listings[parent] = {entry.name for entry in entries if entry.is_dir()}
            except OSError:
                listings[parent] = set()
        return name in listings[parent]

    study_dir = _study_dir(study)
    out: dict[int, Path | None] = {}
    for t in study.get_trials(deepcopy=False):
        found = next((p for p in _candidates(t, study_dir) if exists(p)), None)
        out[t.number] = Path(found) if found else None
    return out


def _metric_files(directory: str) -> list[tuple[str, int | None]]:
    """A trial dir's ``metrics.jsonl`` files, each with the seed index its folder implies (None: top level).

    The driver writes every seed into the top-level file (each line carries ``"seed"``); per-seed
    subfolders (``seed<k>/``, ``runs/seed<k>/``) are read only when that file is absent.
    """
    top = os.path.join(directory, "metrics.jsonl")
    if os.path.isfile(top):
        return [(top, None)]
    found: list[tuple[str, int | None]] = []
    for pattern in ("seed*/metrics.jsonl", "runs/seed*/metrics.jsonl"):
        for path in sorted(Path(directory).glob(pattern)):
            suffix = path.parent.name[len("seed") :]
            found.append((str(path), int(suffix) if suffix.isdigit() else None))
    return found


def _seed_values(trial: FrozenTrial) -> list[Any]:
    seeds = trial.user_attrs.get(SEEDS)
    if isinstance(seeds, list):
        return seeds
    return []


def _finite_number(value: object) -> TypeGuard[int | float]:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def metrics_frame(study: optuna.Study, dirs: dict[int, Path | None] | None = None) -> pd.DataFrame:
    """Every trial's ``metrics.jsonl`` as a long frame (``METRIC_COLUMNS``), sorted by trial, seed, iteration.

    A line that is not a JSON object with an ``iteration`` (the half-written last line of a running or
    killed trial) is skipped, and so is any non-numeric value. A line without ``"seed"`` gets the
    trial's first seed (its ``seeds`` attr; 0 when unknown), or, in a ``seed<k>/`` subfolder, the k-th.
    When a resumed run wrote an iteration twice, the later line wins. A metric written as ``NaN`` is
    kept (it is a divergence), a metric absent from a line is not.
    """
    dirs = trial_dirs(study) if dirs is None else dirs
    records: list[tuple[int, int, int, str, float]] = []
    for trial in study.get_trials(deepcopy=False):
        directory = dirs.get(trial.number)
        if directory is None:
            continue
        seeds = _seed_values(trial)
        for path, index in _metric_files(str(directory)):
            k = index or 0
            default_seed = seeds[k] if k < len(seeds) else k
            for row in read_jsonl(path):
                iteration, seed = row.get("iteration"), row.get("seed")
                if not _finite_number(iteration):
                    continue
                line_seed = int(seed) if _finite_number(seed) else default_seed
                records.extend(
                    (trial.number, line_seed, int(iteration), name, float(value))
                    for name, value in row.items()
                    if type(value) in (int, float) and name not in ("iteration", "seed")  # bool is not a number
                )
    records = _adopt_history(study, records)
    frame = pd.DataFrame.from_records(records, columns=METRIC_COLUMNS)
    frame = frame.astype({"trial": "int64", "seed": "int64", "iteration": "int64", "value": "float64"})
    frame["metric"] = frame["metric"].astype(str)
    # The later line wins: a stable sort keeps file order within (trial, seed, iteration, metric).
    frame = frame.sort_values(["trial", "seed", "iteration"], kind="stable")
    keys = ["trial", "seed", "iteration", "metric"]
    if frame.duplicated(subset=keys).any():
        frame = frame.drop_duplicates(subset=keys, keep="last")
    return frame.reset_index(drop=True)


def _adopt_history(
    study: optuna.Study, records: list[tuple[int, int, int, str, float]]
) -> list[tuple[int, int, int, str, float]]:
    """A retry's curve from the start: for each seed it resumed at iteration N whose own lines start after
    N (the driver copies the adopted lines; a retry made before it did, or a file lost, lacks them), the
    lines up to N of the attempt it resumed from are added under the retry's number."""
    resumed = {}
    for t in study.get_trials(deepcopy=False):
        of, at = _int_or_none(t.user_attrs.get(RETRY_OF)), resumed_at(t)
        if of is not None and at and t.user_attrs.get(RESUME_FROM):
            resumed[t.number] = (of, at)
    if not resumed:
        return records
    first: dict[tuple[int, int], int] = {}
    for trial, seed, iteration, _, _ in records:
        if trial in resumed and iteration < first.get((trial, seed), iteration + 1):
            first[(trial, seed)] = iteration
    by_trial: dict[int, list[tuple[int, int, int, str, float]]] = {}
    for record in records:
        by_trial.setdefault(record[0], []).append(record)
    added: list[tuple[int, int, int, str, float]] = []
    for number in sorted(resumed):  # a chain in order: an adopted history is there for the next retry
        of, at = resumed[number]
        for seed, upto in at.items():
            start = first.get((number, seed))
            if start is not None and start <= upto:
                continue  # the retry has its history
            rows = [(number, s, i, m, v) for (_, s, i, m, v) in by_trial.get(of, []) if s == seed and i <= upto]
            added.extend(rows)
            by_trial.setdefault(number, []).extend(rows)
    return added + records  # before the retry's own lines: where both have an iteration, its own wins


# ---------------------------------------------------------------------------------- trials frame
_OPTUNA_ATTRS = ("number", "value", "datetime_start", "datetime_complete", "duration", "params", "state")


def trials_frame(
    study: optuna.Study,
    metrics: pd.DataFrame,
    flags: dict | None = None,
    dirs: dict[int, Path | None] | None = None,
    disk: DiskReport | None = None,
) -> pd.DataFrame:
    """One row per trial: Optuna's trials dataframe (number, value(s), params_*, state, times) plus

    ``seeds`` (replicates), ``seed_values`` (JSON: per objective, the value of each seed),
    ``value_interval`` (JSON: per objective, [low, high] over seeds or null), ``confirmation_of`` (the
    search trial a confirmation trial re-ran with more seeds), ``throughput`` (mean ``e2e_tps`` over
    iterations and seeds, where reported),
    ``seed_spread`` (std over seeds, one column per objective), ``duration_s`` (a running trial: so far),
    ``wall_s``, ``cpu_s``, ``npu_s``, ``compute_s`` (NPU-seconds where the trial held NPUs, else
    CPU-seconds, else wall seconds), ``last_iteration``, ``failure_reason``, ``pruned_reason``,
    ``node``, ``devices``, ``attempt``, ``retry_of``, ``start_point`` (the index in the spec's start_points),
    ``transferred_from`` (``"<study>#<trial>"``: the source study's configuration), ``overrides`` (space-separated),
    ``trial_dir`` and ``flags`` (comma-separated diagnostics); the retry chain (``grpo.report.chains``):
    ``logical_trial`` (the chain's first attempt; the trial itself outside a chain), ``superseded_by``
    (the retry that continued a failed attempt), ``resumed_from`` and ``resumed_at_iteration`` (the
    attempt a retry resumed and the lowest checkpoint iteration its seeds resumed at); a pbt segment's
    ``pbt_member``, ``pbt_generation``, ``branch_of``, ``branched_at`` and ``exploited``, a promoted
    confirmation trial's ``promoted_base`` (None elsewhere); the disk its folder
    takes (``grpo.report.disk``): ``disk_bytes``, ``checkpoint_bytes`` (NaN: no folder, or not measured)
    and ``disk_partial`` (part of the folder could not be read: a lower bound).
    """
    snap = snapshot(study)
    trials = snap.get_trials(deepcopy=False)
    dirs = trial_dirs(snap) if dirs is None else dirs
    values = value_columns(snap)
    optuna_frame = snap.trials_dataframe(attrs=_OPTUNA_ATTRS)
    if optuna_frame.empty:
        optuna_frame = pd.DataFrame(
            columns=["number", *values, "datetime_start", "datetime_complete", "duration", "state"]
        )
    optuna_frame = optuna_frame.drop(columns=["duration"])
    for col in values:
        optuna_frame[col] = pd.to_numeric(optuna_frame[col], errors="coerce").astype("float64")

    last_iteration = metrics.groupby("trial")["iteration"].max().to_dict() if len(metrics) else {}
    tps = metrics[metrics["metric"] == THROUGHPUT] if len(metrics) else metrics
    throughput = tps.groupby("trial")["value"].mean().to_dict() if len(tps) else {}
    now = dt.datetime.now()
    extras = pd.DataFrame(
        [
            _extras(t, snap, now, last_iteration.get(t.number), (flags or {}).get(t.number, []), dirs.get(t.number))
            for t in trials
        ],
        columns=_EXTRA_COLUMNS + spread_columns(snap),
    )
    extras["throughput"] = [throughput.get(t.number) for t in trials]
    chains = retry_chains(trials)
    extras["logical_trial"] = [chains.root.get(t.number, t.number) for t in trials]
    extras["superseded_by"] = [chains.successor.get(t.number) for t in trials]
    resumed = [resumed_at(t) if t.user_attrs.get(RESUME_FROM) else {} for t in trials]
    extras["resumed_from"] = [
        _int_or_none(t.user_attrs.get(RETRY_OF)) if r else None for t, r in zip(trials, resumed, strict=True)
    ]
    extras["resumed_at_iteration"] = [min(r.values()) if r else None for r in resumed]
    for column, key in _PBT_COLUMNS.items():  # a pbt segment's place in the population (grpo.report.lineage)
        extras[column] = [_int_or_none(t.user_attrs.get(key)) for t in trials]
    extras["exploited"] = [
        bool(t.user_attrs[EXPLOITED]) if t.user_attrs.get(EXPLOITED) is not None else None for t in trials
    ]
    extras["promoted_base"] = [
        str(t.user_attrs[PROMOTED_BASE]) if t.user_attrs.get(PROMOTED_BASE) is not None else None for t in trials
    ]
    disk = trial_usage(dirs) if disk is None else disk
    usage = [disk.usage.get(t.number) for t in trials]
    extras["disk_bytes"] = [u.total if u is not None else None for u in usage]
    extras["checkpoint_bytes"] = [u.checkpoints if u is not None else None for u in usage]
    extras["disk_partial"] = [u is not None and not u.complete for u in usage]
    frame = pd.concat([optuna_frame.reset_index(drop=True), extras.reset_index(drop=True)], axis=1)
    numeric: tuple[str, ...] = ("duration_s", "wall_s", "cpu_s", "npu_s", "compute_s", "last_iteration", "throughput")
    numeric += ("superseded_by", "resumed_from", "resumed_at_iteration", "disk_bytes", "checkpoint_bytes")
    for col in (*numeric, *spread_columns(snap)):
        frame[col] = pd.to_numeric(frame[col], errors="coerce").astype("float64")
    frame["number"] = frame["number"].astype("int64")
    return frame


_PBT_COLUMNS = {
    "pbt_member": PBT_MEMBER,
    "pbt_generation": PBT_GENERATION,
    "branch_of": BRANCH_OF,
    "branched_at": BRANCHED_AT,
}

_EXTRA_COLUMNS = [
    "seeds",
    "seed_values",
    "value_interval",
    "confirmation_of",
    "duration_s",
    "wall_s",
    "cpu_s",
    "npu_s",
    "compute_s",
    "last_iteration",
    "failure_reason",
    "pruned_reason",
    "node",
    "devices",
    "attempt",
    "retry_of",
    "start_point",
    "transferred_from",
    "overrides",
    "trial_dir",
    "flags",
]


def _extras(trial: FrozenTrial, study: StudySnapshot, now: dt.datetime, last_iteration, flags, directory) -> list:
    attrs = trial.user_attrs
    plain = {key: attrs.get(key) for key in _PLAIN_ATTRS}
    seeds = attrs.get(SEEDS)
    n_seeds = len(seeds) if isinstance(seeds, list) else (seeds if isinstance(seeds, int) else None)
    per_seed = attrs.get(VALUES_PER_SEED)
    spreads = _per_objective(attrs.get(VALUE_SPREAD), len(study.directions))
    duration = _duration_s(trial, now)
    if last_iteration is None and trial.intermediate_values:
        last_iteration = max(trial.intermediate_values)
    overrides = attrs.get(OVERRIDES)
    devices = attrs.get(DEVICES)
    row = {
        "seeds": n_seeds,
        "seed_values": json.dumps(per_seed) if per_seed is not None else None,
        "value_interval": json.dumps(attrs[VALUE_INTERVAL]) if attrs.get(VALUE_INTERVAL) is not None else None,
        "confirmation_of": _int_or_none(plain["confirmation_of"]),
        "duration_s": duration,
        "compute_s": compute_seconds(
            plain["npu_s"], plain["cpu_s"], plain["wall_s"] if plain["wall_s"] is not None else duration
        ),
        "last_iteration": last_iteration,
        "devices": ",".join(map(str, devices))
        if isinstance(devices, list)
        else (None if devices is None else str(devices)),
        "overrides": " ".join(map(str, overrides)) if isinstance(overrides, list) else overrides,
        "trial_dir": str(directory) if directory is not None else attrs.get(TRIAL_DIR),
        "flags": ", ".join(f.name for f in flags) if flags else "",
        **{k: (None if plain[k] is None else str(plain[k])) for k in ("failure_reason", "pruned_reason", "node")},
        **{k: plain[k] for k in ("wall_s", "cpu_s", "npu_s")},
        "attempt": _int_or_none(plain["attempt"]),
        "retry_of": _int_or_none(plain["retry_of"]),
        "start_point": _int_or_none(plain["start_point"]),
        "transferred_from": None if plain["transferred_from"] is None else str(plain["transferred_from"]),
    }
    return [row[c] for c in _EXTRA_COLUMNS] + spreads


def _per_objective(value, n: int) -> list:
    """A scalar or per-objective list attr as ``n`` floats (None where missing)."""
    items = value if isinstance(value, list) else [value]
    out = []
    for i in range(n):
        v = items[i] if i < len(items) else None
        out.append(float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None)
    return out


def _int_or_none(value):
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _duration_s(trial: FrozenTrial, now: dt.datetime) -> float | None:
    start, end = trial.datetime_start, trial.datetime_complete
    if start is None:
        return None
    if end is None:
        if trial.state != TrialState.RUNNING:
            return None
        end = now if start.tzinfo is None else dt.datetime.now(start.tzinfo)
    return max(0.0, (end - start).total_seconds())


def compute_seconds(npu_s, cpu_s, wall_s) -> float | None:
    """Device-seconds a trial used: NPU-seconds when it held NPUs, else CPU-seconds, else wall seconds."""
    for value in (npu_s, cpu_s, wall_s):
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0:
            return float(value)
    return None
