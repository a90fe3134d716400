"""The `grpo-sweep` subcommands that work on a sweep spec: run, validate, status, best, report, export."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import yaml
from optuna.trial import TrialState
from rich.console import Console
from rich.table import Table

from grpo.errors import UserError


def _spec(args, **cli):
    from grpo.sweep.spec import load_spec

    return load_spec(args.spec, **{k: v for k, v in cli.items() if v is not None})


def _existing_study(spec):
    from grpo.sweep.study_store import find_study

    study = find_study(spec)
    if study is None:
        raise UserError(f"{spec.path}: study '{spec.study}' has not been run yet (storage {spec.storage_url()})")
    return study


def report_dir(spec) -> Path:
    return Path("reports") / spec.study


def cmd_run(args) -> int:
    import optuna

    from grpo.sweep.driver import run_study
    from grpo.sweep.progress import LiveProgress

    spec = _spec(args, address=args.address, concurrency=args.concurrency, trials=args.trials)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    for warning in getattr(spec, "warnings", []) or []:
        print(f"warning: {warning}", file=sys.stderr)
    console = Console(stderr=False)
    progress = None if args.quiet else LiveProgress(spec, console)
    if progress is not None:
        with progress:
            study = run_study(spec, fork=args.fork, no_plan=args.no_plan, progress=progress)
    else:
        study = run_study(spec, fork=args.fork, no_plan=args.no_plan, quiet=True)
    if args.fork:
        from grpo.sweep.driver import forked

        spec = forked(spec, args.fork)
    _print_summary(console, spec, study)
    if not args.no_report:
        path = _write_report(spec, study, report_dir(spec))
        console.print(f"report: {path}")
    if study.user_attrs.get("interrupted"):
        console.print("interrupted: rerun the same command to resume")
        return 130
    return 0


def _write_report(spec, study, out: Path) -> Path:
    from grpo.report import write_report

    return write_report(study, out, spec_path=str(spec.path))


def _print_summary(console: Console, spec, study) -> None:
    trials = study.get_trials(deepcopy=False)
    by_state: dict[str, int] = {}
    for t in trials:
        by_state[t.state.name] = by_state.get(t.state.name, 0) + 1
    console.print(f"study {spec.study}: " + ", ".join(f"{n} {s.lower()}" for s, n in sorted(by_state.items())))
    if len(spec.objectives) == 1:
        done = [t for t in trials if t.state == TrialState.COMPLETE]
        if done:
            best = study.best_trial
            console.print(f"best: trial {best.number} {spec.objectives[0].metric}={best.value:.4g} {best.params}")


def _status_rows(study) -> list[dict]:
    rows = []
    for t in study.get_trials(deepcopy=False):
        rows.append(
            {
                "number": t.number,
                "state": t.state.name,
                "values": t.values,
                "params": t.params,
                "attempt": t.user_attrs.get("attempt", 1),
                "last_step": t.last_step,
                "wall_s": t.user_attrs.get("wall_s"),
                "reason": t.user_attrs.get("failure_reason") or t.user_attrs.get("pruned_reason"),
            }
        )
    return rows


def cmd_status(args) -> int:
    spec = _spec(args)
    study = _existing_study(spec)
    rows = _status_rows(study)
    if args.json:
        print(json.dumps({"study": spec.study, "trials": rows}, default=str, indent=2))
        return 0
    table = Table(title=f"{spec.study} ({spec.storage_url()})")
    for col in ("#", "state", "value", "params", "iter", "wall s", "reason"):
        table.add_column(col)
    for r in rows:
        value = ", ".join(f"{v:.4g}" for v in r["values"]) if r["values"] else ""
        params = ", ".join(
            f"{k.split('.')[-1]}={v:.3g}" if isinstance(v, float) else f"{k.split('.')[-1]}={v}"
            for k, v in r["params"].items()
        )
        wall = f"{r['wall_s']:.0f}" if r["wall_s"] else ""
        table.add_row(
            str(r["number"]), r["state"], value, params, str(r["last_step"] or ""), wall, (r["reason"] or "")[:80]
        )
    Console().print(table)
    return 0


def cmd_best(args) -> int:
    spec = _spec(args)
    study = _existing_study(spec)
    done = [t for t in study.get_trials(deepcopy=False) if t.state == TrialState.COMPLETE]
    if not done:
        raise UserError(f"{spec.path}: study '{spec.study}' has no completed trial yet")
    if len(spec.objectives) > 1:
        best = study.best_trials
        print(
            json.dumps(
                [{"number": t.number, "values": t.values, "params": t.params} for t in best], indent=2, default=str
            )
        )
        trial = best[0]
    else:
        trial = study.best_trial
        print(
            json.dumps(
                {
                    "number": trial.number,
                    "value": trial.value,
                    "params": trial.params,
                    "spread": trial.user_attrs.get("value_spread"),
                },
                indent=2,
                default=str,
            )
        )
    if args.export:
        config = dict(trial.user_attrs.get("config") or {})
        out = Path(args.export)
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_suffix(out.suffix + ".tmp")
        tmp.write_text(_best_yaml(config, trial, spec))
        tmp.replace(out)
        print(f"wrote {out}", file=sys.stderr)
    return 0


def _best_yaml(config: dict, trial, spec) -> str:
    """The best trial's full config as a grpo_trainer YAML that grpo-train loads (--config-path/name)."""
    header = (
        f"# best trial {trial.number} of study {spec.study} ({spec.path})\n"
        f"# params: {json.dumps(trial.params, default=str)}\n"
    )
    body = dict(config)
    for run_key in ("save", "load"):  # per-trial paths: a new run chooses its own
        body.get("actor_config", {}).pop(run_key, None)
    return header + yaml.safe_dump(body, sort_keys=False)


def cmd_report(args) -> int:
    spec = _spec(args)
    study = _existing_study(spec)
    out = Path(args.out) if args.out else report_dir(spec)
    print(_write_report(spec, study, out))
    return 0


def cmd_export(args) -> int:
    from grpo.report import export

    spec = _spec(args)
    study = _existing_study(spec)
    out = Path(args.out) if args.out else report_dir(spec) / "export"
    for path in export(study, args.format, out):
        print(path)
    return 0


def validate_spec(args) -> int:
    """Dry run: the search space, grid size, feasibility of sampled points, layouts, estimated compute."""
    from grpo.config import derive, load_config
    from grpo.sweep.backends.registry import load_backend
    from grpo.sweep.preflight import preflight
    from grpo.sweep.space import SearchSpace
    from grpo.sweep.spec import load_spec

    spec = load_spec(args.target)
    space = SearchSpace.from_spec(spec)
    backend = load_backend(spec.backend)
    try:
        checked = preflight(spec, space, backend, no_plan=False, check_all=True)
    except UserError:
        if "layout" in space.distributions():  # still show, layout by layout, why each is refused
            from grpo.plan import layout_table

            Console().print(layout_table(spec))
        raise
    console = Console()
    console.print(
        f"[bold]{spec.study}[/bold]: base {spec.base}, backend {spec.backend}, {spec.trials} trials, "
        f"concurrency {spec.concurrency}, seeds {spec.seeds}, storage {spec.storage_url()}"
    )
    table = Table(title="search space")
    table.add_column("key")
    table.add_column("distribution")
    table.add_column("when")
    for key, dist in space.distributions().items():
        when = spec.search[key].when if hasattr(spec.search[key], "when") else None
        table.add_row(key, repr(dist), json.dumps(when) if when else "")
    console.print(table)
    grid = space.grid_points()
    console.print(f"grid points: {len(grid) if grid is not None else 'continuous (no grid)'}")
    feasible = [p for p, problems in checked if not problems]
    console.print(
        f"checked {len(checked)} points: {len(feasible)} feasible, {len(checked) - len(feasible)} pruned before launch"
    )
    for params, problems in checked:
        if problems:
            console.print(f"  [yellow]infeasible[/yellow] {params}: {problems[0]}", markup=True, highlight=False)
    if "layout" in space.distributions():
        try:
            from grpo.plan import layout_table

            console.print(layout_table(spec))
        except ImportError:
            pass
    base = load_config(spec.base, list(spec.overrides))
    d = derive(base)
    iters = base.megatron_training.train_iters
    console.print(
        f"per trial: {iters} iterations x {d.rollouts_per_iteration} rollouts x {spec.seeds} seed(s); "
        f"study: {spec.trials} trials ~ {spec.trials * spec.seeds * iters} GRPO iterations"
    )
    for w in getattr(spec, "warnings", []) or []:
        console.print(f"[yellow]warning[/yellow]: {w}")
    return 0
