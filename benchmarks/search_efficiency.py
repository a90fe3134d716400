"""Search efficiency, measured: replay samplers and pruners over the tabular GRPO benchmark at zero cost.

The table (benchmarks/data/grpo_table.json.gz, built by benchmarks/build_grpo_table.py) holds real engine runs
of ``grpo_trainer_tiny_cpu`` on a grid (its header names the grid, the seeds and the run length; held-out
evaluation every 10). A replayed study is an Optuna study built the way the product builds it: the spec is
sweeps/quickstart.yaml (its objective as it ships: ``eval/acc_greedy`` reduced with ``mean_last_k``, k=3,
since 4fa2700; ``auc`` before) with its search replaced by the
grid's values as ``choice(...)`` expressions and its sampler/pruner swapped per combination, validated by
``grpo.sweep.spec.load.load_spec``; sampler and pruner come from ``grpo.sweep.spec.samplers.make_sampler/make_pruner``
and the parameters from ``SearchSpace.suggest``. Each trial looks its configuration up in the table and takes
one of its recorded seeds (the replay seed decides), then plays the driver's part (grpo/sweep/run/driver.py):

- after every iteration it reports the objective reduced over the curve so far, ``trial.report(v, step=it)``,
  from the first evaluation after iteration 0: the driver records the engine's iteration-0 line (the base
  policy's evaluation) but leaves it out of the objective (``_seed_value``);
- then, in the driver's order (grpo/sweep/run/stoppers.py), the collapse rule when the spec has
  ``pruner.collapse`` (``grpo.sweep.run.collapse.collapse_reason``, the driver's own function, on the run's
  curve with its iteration 0), the curve-aware stopper when it has ``pruner.curve``
  (``grpo.sweep.run.curve_stop.curve_decision`` against ``incumbent_of(study)``, the reducer passed as
  ``curve_stopper`` passes it), then ``trial.should_prune()``, never at the last iteration; a pruned trial is
  told PRUNED;
- a point that already ran is answered with ``grpo.sweep.study.repeats.answer_repeat`` (the driver's rule: told
  the earlier trial's result, not run), and 50 such in a row end the study (``MAX_DUPLICATES_IN_A_ROW``).
  ``--duplicates fail`` replays the driver before that rule (a repeat told FAIL, which TPE ignores).

Compute is counted in trial-iterations: a pruned trial costs the iterations it ran. A configuration's true
value is the mean over its recorded seeds of the objective; the incumbent of a replay is the complete trial
with the best observed (one-seed) value, scored by its configuration's true value. Over the replay seeds the
script reports, with 95 % bootstrap intervals: (a) the compute until the incumbent is within 1 % of the grid's
best true value; (b) the regret (best true value - incumbent's) at budgets of 8 and 16 full runs; (c) the
compute until the incumbent is as good as random search's at that budget, as a fraction of that budget
(random's target taken from the replay with the same seed). ``--true-value end_point`` makes the true value
the mean over seeds of the end point instead of the auc.

The winner is also judged on what a user deploys, with tuning and test seeds kept apart (Eimer et al. 2023):
the incumbent at 8 and 16 runs is scored by its end point (mean of the last 3 evaluations) averaged over
the configuration's seeds that the search did not see. Per arm, with benchmarks/_rliable.py (rliable,
Agarwal et al. 2021): the IQM over replays with its stratified-bootstrap interval, the paired difference to
random (replay seed s meets random's seed s) with its interval, and P(arm's winner beats random's). A replay
with no complete trial by then is scored as the worst configuration's end point.

GRPO-aware rule: ``pruner.collapse`` (grpo/sweep/run/collapse.py) stops a trial at an evaluation before the
last when its held-out greedy accuracy is more than 0.10 below its base policy's (iteration 0).

    nice -n 19 .venv/bin/python benchmarks/search_efficiency.py [--replays 100] [--jobs 2]
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import multiprocessing as mp
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import yaml

if TYPE_CHECKING:
    from optuna.trial import FrozenTrial

    from grpo.sweep.spec.models import SweepSpec

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
DEFAULT_TABLE = HERE / "data" / "grpo_table.json.gz"
SPEC_TEMPLATE = ROOT / "sweeps" / "quickstart.yaml"
METRIC = "eval/acc_greedy"
END_K = 3  # the end point: mean of the last 3 evaluations (mean_last_k, k=3, as sweeps/quickstart.yaml)
BUDGETS_RUNS = (8, 16)  # fixed budgets for (b) and (c), in full runs' worth of trial-iterations

Key = tuple[float, ...]


@dataclass(frozen=True)
class Combo:
    """One sampler + pruner combination: the spec's sampler/pruner sections, plus the replay-side rule."""

    label: str
    sampler: dict[str, Any]
    pruner: dict[str, Any]


QUICKSTART_TPE = {"name": "tpe", "options": {"n_startup_trials": 3}}
TPE5 = {"name": "tpe", "options": {"n_startup_trials": 5}}
COLLAPSE: dict[str, Any] = {"collapse": {}}  # pruner.collapse with its defaults: eval/acc_greedy, 0.10 below the base
# pruner.curve as sweeps/quickstart.yaml sets it (grpo/sweep/run/curve_stop.py), with the collapse rule
CURVE: dict[str, Any] = {"curve": {"min_points": 5, "bounds": [0, 1]}, **COLLAPSE}
# sweeps/quickstart.yaml since 2026-12-07: TPE (3 start-up trials) + the median pruner (warm-up 30, 2 start-up
# trials) + the collapse rule, the best end point on unseen seeds at 8 and 16 runs on the 63-run table
# (benchmarks/results/search_efficiency_2026-12-07.txt, where the curve-stopper arm still carried the label).
DEFAULT_LABEL = "TPE + median + collapse rule"
COMBOS: list[Combo] = [
    Combo("random", {"name": "random"}, {"name": "none"}),
    Combo("TPE", QUICKSTART_TPE, {"name": "none"}),
    # The shipped studies before this benchmark's verdict: the quickstart's and kl_study's TPE + median.
    Combo(
        "TPE + median (quickstart before)",
        QUICKSTART_TPE,
        {"name": "median", "warmup_steps": 30, "options": {"n_startup_trials": 2}},
    ),
    Combo(
        "TPE + median (kl_study before)",
        {"name": "tpe"},
        {"name": "median", "warmup_steps": 20, "options": {"n_startup_trials": 3}},
    ),
    Combo("TPE + successive halving", QUICKSTART_TPE, {"name": "successive_halving", "warmup_steps": 20}),
    Combo("TPE + hyperband", QUICKSTART_TPE, {"name": "hyperband", "warmup_steps": 10}),
    Combo("GP", {"name": "gp"}, {"name": "none"}),
    Combo("random + collapse rule", {"name": "random"}, {"name": "none", **COLLAPSE}),
    Combo("TPE + collapse rule", QUICKSTART_TPE, {"name": "none", **COLLAPSE}),
    Combo(
        DEFAULT_LABEL,
        QUICKSTART_TPE,
        {"name": "median", "warmup_steps": 30, "options": {"n_startup_trials": 2}, **COLLAPSE},
    ),
    # The shipped default from 2026-12-03 to 2026-12-05 (3 random start-up trials) ...
    Combo(
        "TPE + hyperband + collapse rule (shipped default before)",
        QUICKSTART_TPE,
        {"name": "hyperband", "warmup_steps": 10, **COLLAPSE},
    ),
    # ... then to 4fa2700 (the least compute to random's best on the table rebuilt at 547876d) ...
    Combo(
        "TPE (5 startup) + hyperband + collapse rule (default before)",
        TPE5,
        {"name": "hyperband", "warmup_steps": 10, **COLLAPSE},
    ),
    # No early rungs, the curve-aware stopper (issue 31 item 1), with 3 start-up trials (shipped for part of
    # 2026-12-07, e285cc6) and 5 (4fa2700 to then), here beside its parts.
    Combo("TPE + curve + collapse rule", QUICKSTART_TPE, {"name": "none", **CURVE}),
    Combo("TPE (5 startup) + curve + collapse rule (4fa2700 to 2026-12-07)", TPE5, {"name": "none", **CURVE}),
    Combo("TPE (5 startup)", TPE5, {"name": "none"}),
    Combo("TPE (5 startup) + collapse rule", TPE5, {"name": "none", **COLLAPSE}),
    Combo("random + curve + collapse rule", {"name": "random"}, {"name": "none", **CURVE}),
    Combo("GP + curve + collapse rule", {"name": "gp"}, {"name": "none", **CURVE}),
]


# ---------------------------------------------------------------------------------------------- the table
@dataclass
class Run:
    seed: int
    evals: list[tuple[int, float]]  # (iteration, held-out greedy accuracy), iteration 0 = the base policy


@dataclass
class Table:
    keys: list[str]
    iters: int
    runs: dict[Key, list[Run]]
    header: dict[str, Any]
    base: float = 0.0
    true_value: dict[Key, float] = field(default_factory=dict)
    # per configuration and seed: the end point (mean of the last END_K evaluations), what a user deploys
    end_point: dict[Key, dict[int, float]] = field(default_factory=dict)

    def test_value(self, key: Key, seen_seed: int) -> float:
        """The end point of ``key`` averaged over its seeds other than the one the search saw (test seeds,
        Eimer et al. 2023); the search's own seed only when the configuration has no other."""
        other = [v for s, v in self.end_point[key].items() if s != seen_seed]
        return float(np.mean(other or list(self.end_point[key].values())))

    @property
    def best(self) -> float:
        return max(self.true_value.values())


def objective_points(run: Run) -> list[float]:
    """The curve the driver reduces: evaluations at iterations >= 1 (it never records iteration 0)."""
    return [v for it, v in run.evals if it >= 1]


def load_table(path: Path, true_value: str = "auc") -> Table:
    """The table; a configuration's true value is the mean over its seeds of ``true_value`` (auc, or
    end_point: mean of the last END_K evaluations)."""
    from grpo.sweep.spec.objectives import get_reducer

    with gzip.open(path, "rt", encoding="utf-8") as fh:
        raw = json.load(fh)
    keys = list(raw["header"]["grid"])
    table = Table(keys, int(raw["header"]["train_iters"]), {}, raw["header"])
    bases = []
    for rec in raw["runs"]:
        its, acc = rec["curves"]["iteration"], rec["curves"][METRIC]
        evals = [(int(i), float(v)) for i, v in zip(its, acc, strict=True) if v is not None]
        if not evals or evals[-1][0] != table.iters:
            continue  # an incomplete run (never written by the builder; defensive)
        key = tuple(float(rec["params"][k]) for k in keys)
        table.runs.setdefault(key, []).append(Run(int(rec["seed"]), evals))
        bases += [v for it, v in evals if it == 0]
    table.base = float(np.mean(bases))
    end = get_reducer("mean_last_k", END_K)
    table.end_point = {k: {r.seed: end.reduce(objective_points(r)) for r in rs} for k, rs in table.runs.items()}
    judge = get_reducer(true_value) if true_value == "auc" else end
    table.true_value = {
        k: float(np.mean([judge.reduce(objective_points(r)) for r in rs])) for k, rs in table.runs.items()
    }
    return table


# ------------------------------------------------------------------------------------------- the spec
def base_spec(table: Table, folder: Path) -> SweepSpec:
    """sweeps/quickstart.yaml with the grid as its search space and the table's run length, via load_spec."""
    from grpo.sweep.spec.load import load_spec

    data = yaml.safe_load(SPEC_TEMPLATE.read_text())
    values = {k: sorted({key[i] for key in table.runs}) for i, k in enumerate(table.keys)}
    data["search"] = {k: f"choice({', '.join(repr(v) for v in vs)})" for k, vs in values.items()}
    data["overrides"] = [
        f"megatron_training.train_iters={table.iters}",
        f"engine.eval_every={table.header['eval_every']}",
    ]
    data["concurrency"] = 1  # sequential replay: no constant liar, no trials in flight
    data["study"] = "search_efficiency_replay"
    data.pop("confirm", None)
    path = folder / "replay.yaml"
    path.write_text(yaml.safe_dump(data))
    spec = load_spec(path)
    if spec.directions != ["maximize"]:  # the incumbent bookkeeping below assumes a maximised objective
        raise SystemExit(f"{SPEC_TEMPLATE}: objective must be maximised for this replay")
    return spec


# ------------------------------------------------------------------------------------------- one replay
def max_duplicates() -> int:
    """The driver's limit of repeated points in a row before it calls the space exhausted."""
    try:
        from grpo.sweep.run.admit import MAX_DUPLICATES_IN_A_ROW
    except ImportError as err:  # the driver pulls in grpo.report; a half-edited tree should not stop the replay
        print(f"warning: grpo.sweep.run.driver not importable ({err}); using its limit of 50", file=sys.stderr)
        return 50
    return MAX_DUPLICATES_IN_A_ROW


@dataclass
class Trace:
    """One replayed study: after each trial, the compute spent and the incumbent's true value."""

    cost: list[int]
    incumbent: list[float]  # nan until a trial completes
    trials: int
    pruned: int
    test: list[float] = field(default_factory=list)  # the incumbent's end point on its unseen seeds; nan before
    stopped_by: dict[str, int] = field(default_factory=dict)  # collapse / curve / pruner: trials each stopped


def replay(table: Table, spec: SweepSpec, combo: Combo, replay_seed: int, horizon: int, duplicate_mode: str) -> Trace:
    import optuna
    from optuna.trial import TrialState

    from grpo.sweep.run.collapse import collapse_reason
    from grpo.sweep.run.curve_stop import curve_decision, incumbent_of
    from grpo.sweep.spec.models import PrunerSpec, SamplerSpec
    from grpo.sweep.spec.samplers import make_pruner, make_sampler
    from grpo.sweep.spec.space import SearchSpace
    from grpo.sweep.study.repeats import answer_repeat

    spec = spec.model_copy(
        update={"sampler": SamplerSpec.model_validate(combo.sampler), "pruner": PrunerSpec.model_validate(combo.pruner)}
    )
    space = SearchSpace.from_spec(spec)
    reducer = spec.objectives[0].reducer()
    # max_resource as make_pruner(spec) reads it from the composed config (saves a Hydra compose per replay).
    study = optuna.create_study(
        study_name=f"replay-{combo.label}-{replay_seed}",  # Hyperband's bracket hash uses the name: keep it fixed
        directions=[optuna.study.StudyDirection[d.upper()] for d in spec.directions],  # ["maximize"] here
        sampler=make_sampler(spec, space, seed=replay_seed),
        pruner=make_pruner(spec, max_resource=table.iters),
    )
    rng = np.random.default_rng(replay_seed)
    ran: dict[Key, FrozenTrial] = {}  # point -> the trial that ran it
    cost, best_seen, best_true = 0, -math.inf, math.nan
    trace = Trace([], [], 0, 0)
    duplicates, limit = 0, max_duplicates()
    collapse, curve_rule = spec.pruner.collapse, spec.pruner.curve
    objective = spec.objectives[0]
    # as grpo/sweep/run/stoppers.py's curve_stopper passes it: None for the reducers that are the end value
    curve_reduce = None if objective.reduce in ("last", "final_fit") else objective.reducer()
    best_test = math.nan
    while cost < horizon and duplicates < limit:
        trial = study.ask()
        params = space.suggest(trial)
        key = tuple(float(params[k]) for k in table.keys)
        if key not in table.runs:  # a partial table: a grid point with no run yet, skipped like a repeat
            duplicates += 1
            study.tell(trial, state=TrialState.FAIL)
            continue
        if key in ran:  # the driver never reruns a point
            duplicates += 1
            if duplicate_mode == "fail":
                study.tell(trial, state=TrialState.FAIL)  # the driver before answer_repeat
            else:
                answer_repeat(study, trial, ran[key])
            continue
        duplicates = 0
        runs = table.runs[key]
        run = runs[int(rng.integers(len(runs)))]
        evals = dict(run.evals)
        seen: list[float] = []
        stopped_at, why = 0, ""
        for it in range(1, table.iters + 1):
            if it in evals:
                seen.append(evals[it])
            if seen:
                trial.report(reducer.reduce(seen), step=it)
            if it == table.iters:
                break  # a trial that ran all its iterations completes: never pruned at its last step
            if collapse is not None and it in evals and collapse_reason(collapse, [run.evals], it, table.iters):
                stopped_at, why = it, "collapse"
                break
            # The curve stopper (the driver asks it every iteration; its inputs change only at an evaluation).
            if curve_rule is not None and it in evals:
                points = [(i, v) for i, v in run.evals if i <= it]  # the base evaluation (iteration 0) first
                if len(points) >= curve_rule.min_points + 1:
                    decision = curve_decision(
                        points, table.iters, incumbent_of(study, True), curve_rule, True, curve_reduce
                    )
                    if decision.stop:
                        stopped_at, why = it, "curve"
                        break
            if trial.should_prune():
                stopped_at, why = it, "pruner"
                break
        trace.trials += 1
        if stopped_at:
            cost += stopped_at
            trace.pruned += 1
            trace.stopped_by[why] = trace.stopped_by.get(why, 0) + 1
            ran[key] = study.tell(trial, state=TrialState.PRUNED)
        else:
            cost += table.iters
            value = reducer.reduce(seen)
            ran[key] = study.tell(trial, value)
            if value > best_seen:
                best_seen, best_true = value, table.true_value[key]
                best_test = table.test_value(key, run.seed)
        trace.cost.append(cost)
        trace.incumbent.append(best_true)
        trace.test.append(best_test)
    return trace


_WORKER: dict[str, Any] = {}  # per replay process: the table and the spec, loaded once


def _init_worker(table_path: Path, true_value: str = "auc") -> None:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    table = load_table(table_path, true_value)
    with tempfile.TemporaryDirectory() as folder:
        _WORKER.update(table=table, spec=base_spec(table, Path(folder)))


def _replay_job(args: tuple[int, int, int, str]) -> tuple[int, int, Trace, float]:
    combo_index, replay_seed, horizon, duplicate_mode = args
    t0 = time.perf_counter()
    trace = replay(_WORKER["table"], _WORKER["spec"], COMBOS[combo_index], replay_seed, horizon, duplicate_mode)
    return combo_index, replay_seed, trace, time.perf_counter() - t0


# ------------------------------------------------------------------------------------------- statistics
def incumbent_at(trace: Trace, budget: int) -> float:
    """The incumbent's true value once ``budget`` trial-iterations are spent (trials finished within it)."""
    values = [v for c, v in zip(trace.cost, trace.incumbent, strict=True) if c <= budget and not math.isnan(v)]
    return values[-1] if values else math.nan


def test_at(trace: Trace, budget: int) -> float:
    """The end point, on the seeds the search never saw, of the incumbent once ``budget`` is spent."""
    values = [v for c, v in zip(trace.cost, trace.test, strict=True) if c <= budget and not math.isnan(v)]
    return values[-1] if values else math.nan


def cost_to_reach(trace: Trace, target: float) -> float:
    """Trial-iterations until the incumbent's true value is >= target (inf when it never is)."""
    for c, v in zip(trace.cost, trace.incumbent, strict=True):
        if not math.isnan(v) and v >= target - 1e-12:
            return float(c)
    return math.inf


def bootstrap(
    values: Sequence[float], stat: Callable[[np.ndarray], float], n: int = 2000
) -> tuple[float, float, float]:
    """The statistic and its 95 % percentile-bootstrap interval over replay seeds (seeded: same table, same text)."""
    x = np.asarray(values, dtype=float)
    rng = np.random.default_rng(0)
    boots = [stat(x[rng.integers(0, len(x), len(x))]) for _ in range(n)]
    # inverted_cdf picks order statistics: no interpolation between a finite cost and inf (never reached)
    lo, hi = np.percentile(boots, [2.5, 97.5], method="inverted_cdf")
    return stat(x), float(lo), float(hi)


def _median(x: np.ndarray) -> float:
    # inf (never reached) counts as larger than any finite cost
    return float(np.percentile(x, 50, method="inverted_cdf"))


def _mean(x: np.ndarray) -> float:
    return float(np.mean(x))


def _fmt(stat: tuple[float, float, float], digits: int = 0, scale: float = 1.0) -> str:
    def one(v: float) -> str:
        return "never" if math.isinf(v) else f"{v * scale:.{digits}f}"

    mid, lo, hi = stat
    return f"{one(mid)} [{one(lo)}, {one(hi)}]"


# ------------------------------------------------------------------------------------------- main
@dataclass
class Row:
    label: str
    to_best: tuple[float, float, float]
    reached: float
    regret: dict[int, tuple[float, float, float]]
    fraction: dict[int, tuple[float, float, float]]
    trials: float
    pruned: float
    no_answer: dict[int, float]  # share of replays with no complete trial at each budget
    # the winner's end point on unseen seeds: IQM [CI], paired difference to random [CI], P(beats random)
    end_point: dict[int, EndPoint] = field(default_factory=dict)
    compute_iqm: dict[int, tuple[float, float, float]] = field(default_factory=dict)
    stopped_by: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class EndPoint:
    iqm: tuple[float, float, float]
    minus_random: tuple[float, float, float]
    p_beats_random: float
    scores: list[float]


def summarize(table: Table, traces: dict[int, list[Trace]], random_traces: list[Trace] | None) -> list[Row]:
    sys.path.insert(0, str(HERE))
    from _rliable import iqm_interval, p_improvement, paired_difference

    iters, best = table.iters, table.best
    targets = {b: [incumbent_at(t, b * iters) for t in random_traces] for b in BUDGETS_RUNS} if random_traces else {}
    # No complete trial by then: no answer, scored as the worst configuration's end point.
    worst_end = min(float(np.mean(list(v.values()))) for v in table.end_point.values())

    def end_scores(tr: Sequence[Trace], b: int) -> list[float]:
        return [worst_end if math.isnan(v) else v for v in (test_at(t, b * iters) for t in tr)]

    random_end = {b: end_scores(random_traces, b) for b in BUDGETS_RUNS} if random_traces else {}
    rows = []
    for i, tr in traces.items():
        to_best = [cost_to_reach(t, 0.99 * best) for t in tr]
        # A study with no complete trial by then has no answer: scored as the worst configuration.
        worst = min(table.true_value.values())
        at = {b: [incumbent_at(t, b * iters) for t in tr] for b in BUDGETS_RUNS}
        regret = {b: bootstrap([best - (worst if math.isnan(v) else v) for v in at[b]], _mean) for b in BUDGETS_RUNS}
        fraction = {
            # replay seed s of a row meets random's seed s (a row with fewer replays uses the first ones)
            b: bootstrap([cost_to_reach(t, x) / (b * iters) for t, x in zip(tr, targets[b], strict=False)], _median)
            for b in targets
        }
        end: dict[int, EndPoint] = {}
        compute_iqm: dict[int, tuple[float, float, float]] = {}
        for b in random_end:
            x = end_scores(tr, b)
            y = random_end[b][: len(x)]  # replay seed s meets random's seed s
            end[b] = EndPoint(iqm_interval(x), paired_difference(x, y), p_improvement(x, y), x)
            # never reached: censored at the replay's horizon (a share of horizon / budget)
            horizon = max(t.cost[-1] for t in tr) if tr else 0
            shares = [min(cost_to_reach(t, x), horizon) / (b * iters) for t, x in zip(tr, targets[b], strict=False)]
            compute_iqm[b] = iqm_interval(shares)
        stops: dict[str, float] = {}
        for t in tr:
            for why, n in t.stopped_by.items():
                stops[why] = stops.get(why, 0.0) + n / len(tr)
        rows.append(
            Row(
                COMBOS[i].label,
                bootstrap(to_best, _median),
                float(np.mean(np.isfinite(to_best))),
                regret,
                fraction,
                float(np.mean([t.trials for t in tr])),
                float(np.mean([t.pruned for t in tr])),
                {b: float(np.mean(np.isnan(at[b]))) for b in BUDGETS_RUNS},
                end,
                compute_iqm,
                stops,
            )
        )
    return rows


def markdown(rows: list[Row], iters: int) -> str:
    cols = [
        "sampler + pruner",
        "trial-iters to within 1 % of best (median)",
        "reached",
        *(f"regret at {b} runs (mean)" for b in BUDGETS_RUNS),
        *(f"compute to random's best at {b} runs (x {b * iters}, median)" for b in BUDGETS_RUNS),
        "trials / pruned",
    ]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in rows:
        cells = [r.label, _fmt(r.to_best), f"{r.reached:.0%}"]
        cells += [_fmt(r.regret[b], 4) for b in BUDGETS_RUNS]
        cells += [_fmt(r.fraction[b], 2) if b in r.fraction else "n/a" for b in BUDGETS_RUNS]
        cells.append(f"{r.trials:.1f} / {r.pruned:.1f}")
        lines.append("| " + " | ".join(cells) + " |")
    if any(r.end_point for r in rows):
        cols = ["sampler + pruner"]
        for b in BUDGETS_RUNS:
            cols += [
                f"winner's end point at {b} runs, unseen seeds (IQM)",
                "minus random's (paired mean)",
                "P(beats random)",
                f"compute to random's best at {b} runs (IQM, never = horizon)",
            ]
        cols.append("stopped by (mean per replay)")
        lines += ["", "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
        for r in rows:
            cells = [r.label]
            for b in BUDGETS_RUNS:
                e = r.end_point.get(b)
                if e is None:
                    cells += ["n/a"] * 4
                    continue
                cells += [_fmt(e.iqm, 4), _fmt(e.minus_random, 4), f"{e.p_beats_random:.2f}", _fmt(r.compute_iqm[b], 2)]
            cells.append(", ".join(f"{k} {v:.1f}" for k, v in sorted(r.stopped_by.items())) or "-")
            lines.append("| " + " | ".join(cells) + " |")
    for r in rows:
        for b, share in r.no_answer.items():
            if share:
                lines.append(
                    f"\n{r.label}: {share:.0%} of replays had no complete trial at {b} runs (regret: worst config)"
                )
    return "\n".join(lines)


def verdict(rows: list[Row]) -> list[str]:
    """The issue's target in words: the default reaches random's best with <= 1/3 of its compute, and is best."""
    out = []
    default = next((r for r in rows if r.label == DEFAULT_LABEL), None)
    if default is not None and default.fraction:
        for b, (mid, lo, hi) in default.fraction.items():
            met = "met" if mid <= 1 / 3 else "NOT met"
            out.append(
                f"target at {b} runs: {default.label} needs {_fmt((mid, lo, hi), 2)} of random's compute "
                f"to match random's best (median [95 % CI]): {met} (target <= 0.33)"
            )
    b = BUDGETS_RUNS[-1]
    ranked = sorted(rows, key=lambda r: r.regret[b][0])
    top = ranked[0]
    tied = [r.label for r in ranked[1:] if r.regret[b][1] <= top.regret[b][2]]
    out.append(
        f"lowest mean regret at {b} runs: {top.label} ({top.regret[b][0]:.4f}); intervals overlapping it: "
        + (", ".join(tied) if tied else "none")
    )
    for b in BUDGETS_RUNS:
        scored = [r for r in rows if b in r.end_point and r.label != "random"]
        if not scored:
            continue
        top = max(scored, key=lambda r: r.end_point[b].iqm[0])
        e = top.end_point[b]
        above = "above 0" if e.minus_random[1] > 0 else "not above 0"
        out.append(
            f"best end point at {b} runs (IQM over replays, unseen seeds): {top.label} {_fmt(e.iqm, 4)}, "
            f"minus random {_fmt(e.minus_random, 4)} ({above}), P(beats random) {e.p_beats_random:.2f}"
        )
        others = [r for r in rows if b in r.fraction and r.label != "random"]
        cheapest = min(others, key=lambda r: (r.fraction[b][0], r.compute_iqm[b][0]))
        out.append(
            f"least compute to random's best at {b} runs: {cheapest.label} median {_fmt(cheapest.fraction[b], 2)}, "
            f"IQM {_fmt(cheapest.compute_iqm[b], 2)}"
        )
    fastest = min(rows, key=lambda r: r.to_best[0])
    out.append(
        f"least compute to within 1 % of best: {fastest.label} (median {_fmt(fastest.to_best)} trial-iterations)"
    )
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--table", type=Path, default=DEFAULT_TABLE)
    ap.add_argument("--replays", type=int, default=100, help="replay seeds per combination (>= 50 for docs/benchmarks.md)")
    ap.add_argument("--gp-replays", type=int, default=50, help="replay seeds for GP (a GP fit per proposal is slow)")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--horizon-runs", type=int, default=24, help="stop a replay after this many full runs' worth")
    ap.add_argument("--only", nargs="*", help="combination labels to run (default: all; random always runs)")
    ap.add_argument(
        "--true-value",
        choices=["auc", "end_point"],
        default="auc",
        help="what a configuration's true value is for regret and compute shares: the mean over its seeds of the "
        f"auc, or of the end point (mean of the last {END_K} evaluations); the end point on unseen seeds is "
        "reported either way",
    )
    ap.add_argument(
        "--duplicates",
        choices=["answer", "fail", "both"],
        default="answer",
        help="a repeated point: told the earlier result as the driver does (answer), or FAIL as it did before",
    )
    ap.add_argument(
        "--summary",
        default=str(HERE / "results" / "search_summary.json"),
        help="merge the compute shares into this file ('' to skip)",
    )
    ap.add_argument(
        "--summary-part",
        default="tabular",
        help="the summary's part to replace: 'tabular' for the shipped table, another name for a second landscape",
    )
    args = ap.parse_args(argv)
    sys.path.insert(0, str(ROOT))

    table = load_table(args.table, args.true_value)
    n_runs = sum(len(r) for r in table.runs.values())
    iters, best = table.iters, table.best
    horizon = args.horizon_runs * iters
    shown = args.table.relative_to(ROOT) if args.table.is_relative_to(ROOT) else args.table
    print(
        f"table: {shown}: {n_runs} runs of {len(table.runs)} configurations, {iters} iterations, commit "
        f"{table.header['git_commit'][:10]}, built {table.header.get('updated', table.header['created'])}"
    )
    print(f"base policy held-out greedy accuracy (iteration 0): {table.base:.3f}")
    objective = yaml.safe_load(SPEC_TEMPLATE.read_text())["objective"]
    print(
        f"search objective (from {SPEC_TEMPLATE.relative_to(ROOT)}): {objective}; true value: {args.true_value} "
        f"of {METRIC} over the evaluations at iterations >= 1, mean over seeds; end point: mean of the last "
        f"{END_K} evaluations"
    )
    ranked = sorted(table.true_value.items(), key=lambda kv: -kv[1])
    for n, (key, value) in enumerate(ranked, 1):
        per_seed = ", ".join(f"{get_auc(r):.3f}" for r in table.runs[key])
        ends = ", ".join(f"{table.end_point[key][r.seed]:.3f}" for r in table.runs[key])
        knobs = " ".join(f"{k.split('.')[-1]}={v:g}" for k, v in zip(table.keys, key, strict=True))
        print(f"  {n:2d}. {knobs}: {value:.4f} (auc by seed: {per_seed}; end point by seed: {ends})")
    near = sum(v >= 0.99 * best for v in table.true_value.values())
    print(f"grid best {best:.4f}; within 1 % of it (>= {0.99 * best:.4f}): {near} configuration(s)\n")

    random_index = next(i for i, c in enumerate(COMBOS) if c.label == "random")
    unknown = set(args.only or []) - {c.label for c in COMBOS}
    if unknown:
        print(f"error: --only: no such combination(s): {sorted(unknown)}", file=sys.stderr)
        return 2
    combos = [i for i, c in enumerate(COMBOS) if not args.only or c.label in args.only or i == random_index]
    modes = ["fail", "answer"] if args.duplicates == "both" else [args.duplicates]
    for mode in modes:
        n_replays = {
            i: min(args.replays, args.gp_replays) if COMBOS[i].sampler["name"] == "gp" else args.replays for i in combos
        }
        # the slow GP replays first, so the two processes finish together
        jobs = [
            (i, s, horizon, mode)
            for i in sorted(combos, key=lambda i: COMBOS[i].sampler["name"] != "gp")
            for s in range(n_replays[i])
        ]
        traces: dict[int, dict[int, Trace]] = {i: {} for i in combos}
        seconds = dict.fromkeys(combos, 0.0)
        t0 = time.perf_counter()
        with mp.get_context("spawn").Pool(
            args.jobs, initializer=_init_worker, initargs=(args.table, args.true_value)
        ) as pool:
            for n, (i, s, trace, sec) in enumerate(pool.imap_unordered(_replay_job, jobs, chunksize=2), 1):
                traces[i][s] = trace
                seconds[i] += sec
                if n % 50 == 0:  # progress on stderr: the Markdown on stdout stays clean
                    print(
                        f"{mode}: {n}/{len(jobs)} replays, {time.perf_counter() - t0:.0f}s", file=sys.stderr, flush=True
                    )
        ordered = {i: [traces[i][s] for s in range(n_replays[i])] for i in combos}
        rows = summarize(table, ordered, ordered.get(random_index))
        if mode == "answer" and args.summary:
            write_tabular_summary(rows, Path(args.summary), n_replays, table, args.summary_part)
        what = {
            "fail": "a repeated point is told FAIL and skipped, as the driver did before answer_repeat",
            "answer": "a repeated point is told the earlier trial's result, as grpo/sweep/study/repeats.py does",
        }[mode]
        print(f"### duplicates: {mode} ({what})\n")
        print(markdown(rows, iters))
        print(
            f"\n{args.replays} replay seeds per row ({args.gp_replays} for GP), [95 % bootstrap interval over them]; "
            f"1 run = {iters} "
            f"trial-iterations; a replay stops at {args.horizon_runs} runs' worth ({horizon}) or when the driver's "
            "limit of repeated points in a row is hit; 'never': not reached in the replay(s) that decide the statistic."
        )
        for line in verdict(rows):
            print(f"- {line}")
        spent = ", ".join(f"{COMBOS[i].label} {seconds[i]:.0f}s" for i in combos)
        print(f"\nreplay time ({time.perf_counter() - t0:.0f}s wall, {args.jobs} processes): {spent}\n")
    return 0


def write_tabular_summary(
    rows: list[Row], path: Path, n_replays: dict[int, int], table: Table, part_name: str = "tabular"
) -> None:
    """Per arm, merged into results/search_summary.json: the compute share to random's best at 8 and 16 runs
    (median [95 % CI], the issue's format), its IQM, and the winner's end point on unseen seeds."""
    sys.path.insert(0, str(HERE))
    from _rliable import merge_summary

    labels = {c.label: i for i, c in enumerate(COMBOS)}
    part: dict[str, Any] = {}
    for r in rows:
        arm: dict[str, Any] = {f"compute_share_{b}": list(r.fraction[b]) for b in BUDGETS_RUNS if b in r.fraction}
        for b, e in r.end_point.items():
            arm[f"compute_share_iqm_{b}"] = list(r.compute_iqm[b])
            arm[f"end_point_{b}"] = {
                "iqm": list(e.iqm),
                "minus_random": list(e.minus_random),
                "p_beats_random": e.p_beats_random,
            }
        part[r.label] = arm | {"replays": n_replays[labels[r.label]]}
    part["_table"] = {
        "commit": table.header["git_commit"],
        "overrides": table.header.get("overrides", []),
        "grid": table.header["grid"],
        "seeds": table.header["seeds"],
        "train_iters": table.iters,
        "end_point": f"mean of the last {END_K} evaluations of {METRIC}, over the seeds the search did not see",
    }
    merge_summary(part_name, part, ROOT, path)  # "default" is the lead's call (the real part names its arms)


def get_auc(run: Run) -> float:
    from grpo.sweep.spec.objectives import get_reducer

    return get_reducer("auc").reduce(objective_points(run))


if __name__ == "__main__":
    raise SystemExit(main())
