"""The `grpo-sweep` subcommands that work on a sweep spec: run, validate, status, best, report, export."""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState
from rich import box
from rich.console import Console
from rich.table import Table

from grpo._fs import atomic_write_text
from grpo.errors import UserError, first_line
from grpo.report.best import is_repeat
from grpo.report.chains import chain_text, is_placeholder, retry_chains
from grpo.report.stats import Interval, trial_interval
from grpo.sweep.spec.models import SweepSpec
from grpo.sweep.spec.space import format_params
from grpo.trial_attrs import (
    ATTEMPT,
    CONFIG_POINTER,
    CONFIRMATION_OF,
    FAILURE_REASON,
    PRUNED_REASON,
    RETRY_OF,
    SEEDS,
    VALUE_INTERVAL,
    VALUE_SPREAD,
    WALL_S,
)

REPORT_EVERY_S = 2.0  # the report is rewritten after a trial at most this often (and always at the end)
REPORT_SHARE = 0.2  # ... and takes at most this share of the driver's time (a 10,000-trial report is slow)


def _spec(args: argparse.Namespace, **cli: Any) -> SweepSpec:
    from grpo.sweep.spec.load import load_spec

    return load_spec(args.spec, **{k: v for k, v in cli.items() if v is not None})


def _existing_study(spec: SweepSpec) -> optuna.Study:
    from grpo.sweep.study.store import find_study

    study = find_study(spec)
    if study is None:
        raise UserError(f"{spec.path}: study '{spec.study}' has not been run yet (storage {spec.storage_label()})")
    return study


def report_dir(spec: SweepSpec) -> Path:
    return Path("reports") / spec.study


def cmd_run(args: argparse.Namespace) -> int:
    from grpo.sweep.commands.progress import LiveProgress
    from grpo.sweep.run.driver import forked, run_study

    spec = _spec(args, address=args.address, concurrency=args.concurrency, trials=args.trials)
    if args.fork:
        spec = forked(spec, args.fork)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    for warning in spec.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    from grpo.sweep.execution.connect import (
        join_remote,  # a remote cluster is joined before the study exists (one-line errors)
    )

    join_remote(spec.cluster.address, where="--address" if args.address else f"{spec.source}: cluster.address")
    console = Console(stderr=False)
    refresh = None if args.no_report else ThrottledReport(lambda study: _write_report(spec, study, report_dir(spec)))
    if args.quiet:
        run = run_study(spec, no_plan=args.no_plan, quiet=True, on_trial_finished=refresh)
    else:
        with LiveProgress(spec, console) as progress:
            run = run_study(spec, no_plan=args.no_plan, progress=progress, on_trial_finished=refresh)
    _print_summary(console, spec, run.study)
    if not args.no_report:
        path = _write_report(spec, run.study, report_dir(spec))
        console.print(f"report: {path}")
    if run.interrupted:
        console.print("interrupted: rerun the same command to resume")
        return 130
    if not any(t.state == TrialState.COMPLETE for t in run.study.get_trials(deepcopy=False)):
        print(
            f"error: {spec.source}: study '{spec.study}' ended with no complete trial (see the reasons above)",
            file=sys.stderr,
        )
        return 1
    return 0


def _write_report(spec: SweepSpec, study: optuna.Study, out: Path) -> Path:
    from grpo.report import write_report

    return write_report(study, out, spec_path=str(spec.path))


class ThrottledReport:
    """The report rewritten after finished trials while the study runs: at most once per ``REPORT_EVERY_S``,
    and never more than ``REPORT_SHARE`` of the time (the driver waits while it is written). A failure is a
    one-line warning (once per message): the study goes on, and the final report is written at the end."""

    def __init__(self, write: Callable[[optuna.Study], object], clock: Callable[[], float] = time.monotonic):
        self.write, self.clock = write, clock
        self.next_at = 0.0
        self.warned: set[str] = set()
        self.writes = 0

    def __call__(self, study: optuna.Study) -> None:
        now = self.clock()
        if now < self.next_at:
            return
        try:
            self.write(study)
            self.writes += 1
        except Exception as err:
            line = f"warning: the report was not refreshed: {first_line(err, 200, typed=True)}"
            if line not in self.warned:
                self.warned.add(line)
                print(line, file=sys.stderr, flush=True)
        took = self.clock() - now
        self.next_at = now + max(REPORT_EVERY_S, took / REPORT_SHARE)


def stored_interval(trial: FrozenTrial, objective: int = 0) -> Interval:
    """The trial's value with its 95 % interval over seeds: the ``value_interval`` the driver stored (no
    bootstrap per trial: ``status`` on 10,000 trials stays fast), computed for a trial stored without it."""
    if trial.values is None:
        return Interval(math.nan, None, None, 0)
    stored = trial.user_attrs.get(VALUE_INTERVAL)
    seeds = trial.user_attrs.get(SEEDS)
    n = len(seeds) if isinstance(seeds, list) else 1
    if isinstance(stored, list) and objective < len(stored):
        pair = stored[objective]
        low, high = (float(pair[0]), float(pair[1])) if isinstance(pair, list) and len(pair) == 2 else (None, None)
        return Interval(float(trial.values[objective]), low, high, n)
    return trial_interval(trial, objective)


def _short(interval: Interval) -> str:
    """A value for a table cell: ``0.41 [0.38, 0.44]``, or the bare value for one seed."""
    if interval.low is None or interval.high is None:
        return f"{interval.mean:.4g}"
    return f"{interval.mean:.4g} [{interval.low:.4g}, {interval.high:.4g}]"


def _print_summary(console: Console, spec: SweepSpec, study: optuna.Study) -> None:
    from grpo.report.best import best_trial, comparable
    from grpo.report.stats import verdict

    every = study.get_trials(deepcopy=False)
    trials = [t for t in every if not is_repeat(t)]
    by_state: dict[str, int] = {}
    for t in trials:
        by_state[t.state.name] = by_state.get(t.state.name, 0) + 1
    repeats = len(every) - len(trials)
    said = [f"{n} {s.lower()}" for s, n in sorted(by_state.items())]
    said += [f"{repeats} repeated proposal{'s' * (repeats != 1)} answered from earlier trials"] if repeats else []
    console.print(f"study {spec.study}: " + ", ".join(said))
    best = best_trial(study)
    if best is None or spec.multi_objective:
        return
    confirmed = any(t.user_attrs.get(CONFIRMATION_OF) is not None for t in trials)
    found = verdict(comparable(study, trials), study.directions[0])
    if found is not None and found.tie:  # every trial at the same value: no winner to name
        console.print(found.text(), highlight=False)
        return
    if found is not None and confirmed:  # the winner of the confirmation stage, against its runner-up
        console.print(found.text(), highlight=False)
        console.print(f"params: {found.winner.params}", highlight=False)
        return
    shown = stored_interval(best).text()
    console.print(f"best: trial {best.number} {spec.objectives[0].metric}={shown} {best.params}", highlight=False)


def _status_rows(study: optuna.Study) -> list[dict[str, Any]]:
    from grpo.report.lineage import population

    rows = []
    trials = [t for t in study.get_trials(deepcopy=False) if not is_repeat(t)]
    pop = population(study, None)  # the report's reading of the pbt attrs (None: not a pbt study)
    segments = pop.segments if pop is not None else {}
    chains = retry_chains(trials)  # an attempt and the retries that continued it: one logical trial
    by_number = {t.number: t for t in trials}
    for t in trials:  # repeats left out: the sampler's record of a point that already ran, not a result
        seeds = t.user_attrs.get(SEEDS)
        rows.append(
            {
                "number": t.number,
                "state": t.state.name,
                "values": t.values,
                # per objective [low, high] (95 % bootstrap over seeds), null for one seed
                "value_interval": t.user_attrs.get(VALUE_INTERVAL),
                "seeds": len(seeds) if isinstance(seeds, list) else None,
                "confirmation_of": t.user_attrs.get(CONFIRMATION_OF),  # a confirmation-stage rerun of that trial
                "params": t.params,
                "attempt": t.user_attrs.get(ATTEMPT, 1),
                "retry_of": t.user_attrs.get(RETRY_OF),  # the chain of one logical trial: #3 <- #5 <- #8
                # the chain's first attempt (None: a retry that never ran, queued again)
                "logical_trial": None if is_placeholder(t) else chains.root.get(t.number, t.number),
                "superseded_by": chains.successor.get(t.number),  # the retry that continued this attempt
                "chain": chain_text(t.number, chains, by_number) or None,  # "run 2 of trial #3, resumed at ..."
                "last_step": t.last_step,
                "wall_s": t.user_attrs.get(WALL_S),
                "reason": t.user_attrs.get(FAILURE_REASON) or t.user_attrs.get(PRUNED_REASON),
                # pbt: the population slot, generation and the checkpoint it continues (null outside pbt)
                "lineage": _lineage(segments.get(t.number)),
            }
        )
    return rows


def _lineage(seg: Any) -> dict[str, Any] | None:
    if seg is None:
        return None
    return {
        "member": seg.member,
        "generation": seg.generation,
        "branch_of": seg.parent,
        "branched_at": seg.start if seg.parent is not None else None,
        "exploited": seg.exploited,
    }


def _from_cell(r: dict[str, Any]) -> str:
    """Where a row came from, compactly: a retry, a confirmation, or a pbt segment (m1 g2 <#4@20)."""
    said = [f"retry #{r['retry_of']}"] if r["retry_of"] is not None else []
    said += [f"conf #{r['confirmation_of']}"] if r["confirmation_of"] is not None else []
    if (lin := r["lineage"]) is not None:
        branch = "" if lin["branch_of"] is None else f" <#{lin['branch_of']}@{lin['branched_at']}"
        said.append(f"m{lin['member']} g{lin['generation']}{branch}{'*' * bool(lin['exploited'])}")
    return " ".join(said)


def cmd_status(args: argparse.Namespace) -> int:
    spec = _spec(args)
    study = _existing_study(spec)
    rows = _status_rows(study)
    if args.json:
        print(json.dumps({"study": spec.study, "trials": rows}, default=str, indent=2))
        return 0
    Console().print(status_table(spec, study, rows))
    return 0


REASON_CHARS = 22  # a reason longer than this is cut in the table; --json and the report keep all of it


def status_table(spec: SweepSpec, study: optuna.Study, rows: list[dict[str, Any]]) -> Table:
    """The status table, readable on 80 columns: seeds, wall time and the full reason live in --json."""
    # no vertical rules: on 80 columns every character goes to the cells
    table = Table(
        title=f"{spec.study} ({spec.tool_storage()})",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        show_edge=False,
        collapse_padding=True,
    )
    table.add_column("#", no_wrap=True, justify="right", min_width=2)
    table.add_column("state", no_wrap=True)
    table.add_column("value [CI]", min_width=6, overflow="fold")
    table.add_column("from", min_width=6, overflow="fold")  # retry of, confirms, pbt lineage
    table.add_column("params", min_width=14, overflow="fold")
    table.add_column("iter", no_wrap=True, justify="right", min_width=4)
    table.add_column("reason", no_wrap=True, overflow="ellipsis")
    by_number = {t.number: t for t in study.get_trials(deepcopy=False)}
    for r in rows:
        trial = by_number[r["number"]]
        value = ", ".join(_short(stored_interval(trial, i)) for i in range(len(r["values"]))) if r["values"] else ""
        reason = " ".join((r["reason"] or "").split())
        reason = reason if len(reason) <= REASON_CHARS else reason[: REASON_CHARS - 1] + "…"
        state = r["state"] if r["superseded_by"] is None else f"{r['state']} -> #{r['superseded_by']}"
        params = format_params(r["params"])
        table.add_row(str(r["number"]), state, value, _from_cell(r), params, str(r["last_step"] or ""), reason)
    if chains_note := _chains_note(rows):
        table.caption = chains_note
    return table


def _chains_note(rows: list[dict[str, Any]]) -> str | None:
    """The table's caption when some trial was retried: how many logical trials the rows are."""
    superseded = sum(1 for r in rows if r["superseded_by"] is not None)
    if not superseded:
        return None
    logical = len({r["logical_trial"] for r in rows} - {None})
    return (
        f"{logical} logical trials: 'FAIL -> #n' is an attempt that its retry #n continued (from the attempt's "
        "checkpoint where it had one); Optuna keeps the attempt's FAIL record"
    )


def cmd_best(args: argparse.Namespace) -> int:
    from grpo.report.best import best_trial, pareto_front

    spec = _spec(args)
    out = Path(args.export) if args.export else None
    if out is not None and out.suffix != ".yaml":
        raise UserError(
            f"--export {args.export}: the file name must end in .yaml (grpo-train reads it by its name: "
            f"--config-name {out.stem or 'best'} finds {out.stem or 'best'}.yaml)"
        )
    study = _existing_study(spec)
    trial = best_trial(study)
    if trial is None:
        raise UserError(f"{spec.path}: study '{spec.study}' has no completed trial yet")
    if spec.multi_objective:
        front = [
            {
                "number": t.number,
                "values": t.values,
                "value_interval": t.user_attrs.get(VALUE_INTERVAL),
                "params": t.params,
            }
            for t in pareto_front(study)
        ]
        print(json.dumps(front, indent=2, default=str))
    else:
        interval = stored_interval(trial)
        shown = {
            "number": trial.number,
            "value": trial.values[0],
            "interval": None if interval.low is None else [interval.low, interval.high],
            "seeds": interval.n,
            "text": interval.text(),
            "params": trial.params,
            "spread": trial.user_attrs.get(VALUE_SPREAD),
            "confirmation_of": trial.user_attrs.get(CONFIRMATION_OF),
        }
        print(json.dumps(shown, indent=2, default=str))
    if out is not None:
        from grpo.report.reproduce import config_yaml, run_line
        from grpo.report.trial_config import changed_note, recorded_config

        base = study.user_attrs.get("base_config")
        text = config_yaml(study, trial, base if isinstance(base, dict) else None, path=out)
        if text is None:
            pointer = trial.user_attrs.get(CONFIG_POINTER)
            if isinstance(pointer, dict):
                where = spec.study_dir / str(pointer.get("path"))
                raise UserError(f"{spec.path}: trial {trial.number}: its config file {where} is missing or unreadable")
            raise UserError(f"{spec.path}: trial {trial.number} records no config to export")
        found = recorded_config(trial, study)
        if found is not None and found.changed:
            print(f"warning: {changed_note(found, trial)}", file=sys.stderr)
        atomic_write_text(out, text)
        print(f"wrote {out}; run it with: {run_line(out)}", file=sys.stderr)
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    spec = _spec(args)
    study = _existing_study(spec)
    out = Path(args.out) if args.out else report_dir(spec)
    print(_write_report(spec, study, out))
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from grpo.report import export

    spec = _spec(args)
    study = _existing_study(spec)
    out = Path(args.out) if args.out else report_dir(spec) / "export"
    for path in export(study, args.format, out):
        print(path)
    return 0


def cmd_dashboard(args: argparse.Namespace) -> int:
    """optuna-dashboard on the study's own storage object (our journal lock, our RDB settings); the same as
    ``optuna-dashboard <tool storage>``, which it prints for reuse."""
    try:
        from optuna_dashboard import run_server
    except ImportError as err:
        raise UserError(f"dashboard: optuna-dashboard is not installed ({err}); pip install optuna-dashboard") from None
    from grpo.sweep.study.store import make_storage

    spec = _spec(args)
    _existing_study(spec)  # a study that was never run: one line, nothing created
    print(f"optuna-dashboard {spec.tool_storage()} (study {spec.study}) on http://{args.host}:{args.port}/", flush=True)
    run_server(make_storage(spec), host=args.host, port=args.port)
    return 0


def validate_spec(args: argparse.Namespace) -> int:
    """Dry run: the search space, grid size, feasibility of sampled points, layouts, estimated compute."""
    from grpo.config import derive
    from grpo.sweep.backends import load_backend
    from grpo.sweep.commands.layout_table import layout_table
    from grpo.sweep.run.preflight import preflight
    from grpo.sweep.spec.load import load_spec
    from grpo.sweep.spec.space import SearchSpace

    spec = load_spec(args.target)
    space = SearchSpace.from_spec(spec)
    backend = load_backend(spec)
    searches_layout = "layout" in space.distributions()
    try:
        checks = preflight(spec, space, backend, no_plan=False, check_all=True)
    except UserError:
        if searches_layout:  # still show, layout by layout, why each is refused
            Console().print(layout_table(spec, backend))
        raise
    for line in checks.warnings:  # what this machine lacks to launch trials (they may launch elsewhere)
        print(f"warning: {line}", file=sys.stderr)
    console = Console()
    console.print(
        f"[bold]{spec.study}[/bold]: base {spec.base}, backend {spec.backend}, {spec.trials} trials, "
        f"concurrency {spec.concurrency}, seeds {spec.seeds}, storage {spec.storage_label()}"
    )
    table = Table(title="search space")
    table.add_column("key")
    table.add_column("distribution")
    table.add_column("when")
    for key, dist in space.distributions().items():
        when = spec.search[key].when
        table.add_row(key, repr(dist), json.dumps(when) if when else "")
    console.print(table)
    for note in checks.notes:  # the user's dataset and reward functions as read
        console.print(note, highlight=False, markup=False)
    size = space.grid_size()
    console.print(f"grid points: {f'{size:,}' if size is not None else 'continuous (no grid)'}")
    checked = checks.checked
    feasible = [p for p, problems in checked if not problems]
    console.print(
        f"checked {len(checked)} points: {len(feasible)} feasible, {len(checked) - len(feasible)} pruned before launch"
    )
    for params, problems in checked:
        if problems:
            console.print(f"  [yellow]infeasible[/yellow] {params}: {problems[0]}", markup=True, highlight=False)
    if searches_layout:
        console.print(layout_table(spec, backend))
    if spec.transfer is not None:
        console.print(f"transfer: study {spec.transfer.study}'s best {len(checks.transfer)}, tried first:")
        for point in checks.transfer:
            console.print(f"  trial {point.source_trial} ({point.source_value:.4g}): {point.params}", highlight=False)
    base = checks.base_cfg
    iters = base.megatron_training.train_iters
    if spec.scheduler is not None:
        from grpo.sweep.run.pbt import Settings, explored_keys

        pop = Settings.of(spec.scheduler, iters)
        spec = spec.model_copy(update={"trials": pop.trials})
        console.print(
            f"pbt: {pop.population} members x {pop.generations} generations of {pop.interval} iterations = "
            f"{pop.trials} segment trials; every {pop.interval} iterations the bottom {pop.quantile:g} branch from "
            f"the top, exploring {', '.join(explored_keys(space.keys)) or 'nothing'}"
        )
        iters = pop.interval  # per segment
    # The search may vary the rollouts (n_samples_per_prompt, global_batch_size): their range over the feasible
    # points checked (the base config's value need not be one of them).
    rollouts = sorted({derive(c).rollouts_per_iteration for c in checks.configs or [base]})
    shown = f"{rollouts[0]}" if len(rollouts) == 1 else f"{rollouts[0]}-{rollouts[-1]}"
    console.print(
        f"per trial: {iters} iterations x {shown} rollouts x {spec.seeds} seed(s) run at once; "
        f"study: {spec.trials} trials ~ {spec.trials * spec.seeds * iters} GRPO iterations"
    )
    if spec.confirm is not None:
        c = spec.confirm
        console.print(
            f"confirmation stage: the top {c.top_k} trial(s) again on {c.seeds} fresh seeds each (run at once) ~ "
            f"{c.top_k * c.seeds * iters} more GRPO iterations "
            f"(+{c.top_k * c.seeds / (spec.trials * spec.seeds):.0%} of the search)"
        )
    for w in spec.warnings:
        console.print(f"[yellow]warning[/yellow]: {w}")
    return 0
