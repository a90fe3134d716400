"""The top of the report page: the study's facts, then the decision (the winner, how sure, what it cost).

``header`` lists the study (spec, base config and overrides, objectives, sampler, pruner, backend, seeds,
trials by state, time span); a retried trial counts once, in the state of its last run (the attempts its
retries superseded are Optuna FAIL records, not trials: ``chains.logical_trials``). ``decision``
answers "which settings, how sure": the winner with its value and interval over seeds, the runner-up with
its own, whether a paired test over their shared seeds can tell them apart (``grpo.report.stats``), and
the compute it took to find the winner (device-hours and wall time up to it, and in all). For several
objectives: the Pareto front, the chosen trade-off first. A confirmation stage promoted to another base
(``confirm.base``): whether the search's ranking held there (``promotion``: Kendall's tau and Spearman's
rho with bootstrap intervals over the seeds, one sentence, a table of both rankings).
"""

from __future__ import annotations

import collections
import datetime as dt
from typing import Any

from optuna.trial import FrozenTrial

from grpo.report import stats
from grpo.report._fmt import duration_text, escape, fmt, hours, num, plural, trial_link
from grpo.report._snapshot import StudySnapshot
from grpo.report.best import is_pbt
from grpo.report.chains import logical_trials, retry_chains
from grpo.report.collect import Frames, study_objectives
from grpo.report.decision import Compute, Decision
from grpo.report.promotion import CANNOT_TELL, HELD, Promotion
from grpo.trial_attrs import CONFIRMATION_OF, PROMOTED_BASE

STATE_ORDER = ("COMPLETE", "PRUNED", "FAIL", "RUNNING", "WAITING")


def _set_only(value: Any) -> Any:
    """``value`` without its unset entries (None, {}, []) at any depth: the rules a spec set, not every rule."""
    if not isinstance(value, dict):
        return value
    kept = {k: _set_only(v) for k, v in value.items()}
    return {k: v for k, v in kept.items() if v not in (None, {}, [])}


def _settings(value: dict[str, Any]) -> str:
    return ", ".join(f"{k}=({_settings(v)})" if isinstance(v, dict) else f"{k}={fmt(v)}" for k, v in value.items())


def _component_line(value: Any) -> str:
    """A sampler/pruner attr (a name, or a dict like ``{"name": "tpe", "seed": 0}``) as one line, with only the
    settings that are set: ``median (warmup_steps=2, collapse=(metric=eval/acc_greedy, below_base=0.1))``."""
    if isinstance(value, dict):
        rest = _settings({k: v for k, v in _set_only(value).items() if k != "name"})
        return f"{value.get('name', '?')}" + (f" ({rest})" if rest else "")
    return "-" if value is None else str(value)


def header(snap: StudySnapshot, frames: Frames, spec_path: str | None, decision: Decision) -> str:
    attrs = snap.user_attrs
    spec: dict[str, Any] = attrs["spec"] if isinstance(attrs.get("spec"), dict) else {}
    chains = retry_chains(snap.get_trials(deepcopy=False))
    logical = logical_trials(snap.get_trials(deepcopy=False), chains)
    counts = collections.Counter(t.state.name for t in logical)
    states = [s for s in STATE_ORDER if counts.get(s)] + sorted(set(counts) - set(STATE_ORDER))
    count_html = (
        ", ".join(f'<span class="state {escape(s)}">{counts[s]} {escape(s.lower())}</span>' for s in states)
        or "no trials yet"
    )
    trials_html = f"{len(frames.trials)} ({count_html})"
    if len(logical) != len(frames.trials):  # retried attempts (and retries that never ran) are not trials
        superseded = len(chains.successor)
        one = superseded == 1
        trials_html = (
            f"{len(logical)} ({count_html}) in {len(frames.trials)} Optuna trials: "
            f"{plural(superseded, 'failed attempt')} continued by {'its retry' if one else 'their retries'}"
            f" (Optuna keeps {'its FAIL record' if one else 'their FAIL records'}; the trials table lists each "
            "retried trial's runs together)"
        )
    objective_html = "; ".join(
        escape(f"{g.direction} {g.metric}" + (f" (reduce: {g.reduce})" if g.reduce else ""))
        for g in study_objectives(snap)
    )
    overrides = spec.get("overrides") or []
    base = attrs.get("base") or spec.get("base")
    base_html = escape(str(base)) if base else "-"
    if overrides:
        base_html += " with " + " ".join(f"<code>{escape(str(o))}</code>" for o in overrides)
    seeds = spec.get("seeds")
    confirm = spec.get("confirm") if isinstance(spec.get("confirm"), dict) else None
    seeds_text = f"{seeds} per trial" if seeds else "-"
    if confirm:
        top, fresh = confirm.get("top_k", "?"), confirm.get("seeds", "?")
        seeds_text += f"; confirmation stage: the best {top} rerun on {fresh} fresh seeds"
    rows = [
        ("Spec", escape(str(spec_path or attrs.get("spec_path") or "-"))),
        ("Base config", base_html),
        ("Objective", objective_html),
        ("Sampler", escape(_component_line(spec.get("sampler") or attrs.get("sampler")))),
        ("Pruner", escape(_component_line(spec.get("pruner") or attrs.get("pruner")))),
        ("Backend", escape(str(attrs.get("backend") or spec.get("backend") or "-"))),
        ("Seeds", escape(seeds_text)),
        ("Trials", trials_html),
        ("Time span", escape(_span(snap, decision.compute))),
        (
            "Report written",
            escape(f"{dt.datetime.now():%Y-%m-%d %H:%M:%S}")
            + (" (the sweep rewrites it as trials finish: reload to update)" if decision.compute.running else ""),
        ),
    ]
    facts = "".join(f"<dt>{k}</dt><dd>{v}</dd>" for k, v in rows)
    return f'<header id="summary"><h1>Study {escape(snap.study_name)}</h1><dl class="facts">{facts}</dl></header>'


def _span(snap: StudySnapshot, compute: Compute) -> str:
    starts = [t.datetime_start for t in snap.get_trials(deepcopy=False) if t.datetime_start]
    if not starts:
        return "-"
    first = min(starts)
    ends = [t.datetime_complete for t in snap.get_trials(deepcopy=False) if t.datetime_complete]
    end = "now (trials running)" if compute.running or not ends else f"{max(ends):%Y-%m-%d %H:%M:%S}"
    return f"{first:%Y-%m-%d %H:%M:%S} to {end} ({duration_text(compute.wall_s_total)})"


# ------------------------------------------------------------------------------------------ decision
def params_table(trial: FrozenTrial) -> str:
    if not trial.params:
        return "<p>(no parameters)</p>"
    rows = "".join(
        f"<tr><td><code>{escape(k)}</code></td><td>{escape(fmt(v))}</td></tr>" for k, v in trial.params.items()
    )
    return f'<table class="params"><tr><th>parameter</th><th>value</th></tr>{rows}</table>'


def _interval_text(trial: FrozenTrial, objective: int = 0) -> str:
    return stats.trial_interval(trial, objective).text()


def _stage(trial: FrozenTrial) -> str:
    of = trial.user_attrs.get(CONFIRMATION_OF)
    if not isinstance(of, int):
        return ""
    base = trial.user_attrs.get(PROMOTED_BASE)
    return f" (confirmation of trial #{of}" + (f" on {base})" if base else ")")


def compute_text(compute: Compute, best: FrozenTrial | None) -> str:
    """Device-hours and wall time up to the best trial and in all, as HTML."""
    unit = f"{compute.kind}-hours" if compute.kind != "CPU" else "CPU-hours (no accelerator held)"
    total = f"{hours(compute.device_s_total)} {unit}"
    if compute.wall_s_total is not None:
        total += f", {duration_text(compute.wall_s_total)} wall time"
    if best is None or compute.device_s_to_best is None:
        return f"<p>Compute in all: {escape(total)}.</p>"
    to_best = f"{hours(compute.device_s_to_best)} {unit}"
    if compute.wall_s_to_best is not None:
        to_best += f" and {duration_text(compute.wall_s_to_best)} wall time"
    return (
        f'<p class="compute">Compute to find it: <b>{escape(to_best)}</b> '
        f"({plural(compute.trials_to_best or 0, 'trial')} up to trial #{best.number}); "
        f"in all: {escape(total)}{' so far' if compute.running else ''}.</p>"
    )


def decision(snap: StudySnapshot, frames: Frames, decision: Decision, config_link: bool) -> str:
    head = '<section id="decision"><h2>The winner and how sure</h2>'
    best = decision.best
    if best is None:
        waiting = (
            "No segment of the population's last generation has completed yet: earlier segments are scored on "
            "partial curves, so none of them is the winner (see the lineage below)."
            if is_pbt(snap)
            else "No completed trial yet."
        )
        return head + f'<p class="note">{escape(waiting)}</p>' + compute_text(decision.compute, None) + "</section>"
    goals = study_objectives(snap)
    config = (
        '<p>Its config: <a href="best_config.yaml">best_config.yaml</a>; how to rerun it: '
        '<a href="#reproduce">Reproduce</a>.</p>'
        if config_link
        else '<p class="note">This trial recorded no config.</p>'
    )
    promoted = "".join(promotion(p) for p in decision.promotions)
    if decision.multi:
        return (
            head
            + _pareto_decision(snap, decision)
            + params_table(best)
            + promoted
            + config
            + _compute(decision)
            + "</section>"
        )
    verdict = decision.verdict
    assert verdict is not None  # one objective and a best trial: there is a verdict
    metric = goals[0].metric
    if verdict.tie:
        return head + _tie(verdict, metric) + config + _compute(decision) + "</section>"
    parts = [
        f'<p class="winner big">Winner: {trial_link(best.number)}{escape(_stage(best))}: '
        f'{escape(metric)} = <span class="interval">{escape(verdict.winner_interval.text())}</span></p>',
        params_table(best),
    ]
    if verdict.winner_interval.low is None:
        parts.append(
            '<p class="note">One seed gives no interval: run several (<code>seeds:</code> in the spec) or a '
            "confirmation stage (<code>confirm:</code>) to know how sure this is.</p>"
        )
    if verdict.runner_up is not None and verdict.runner_up_interval is not None and verdict.comparison is not None:
        runner = verdict.runner_up
        distinct = verdict.comparison.distinguishable
        label = (
            "Distinguishable"
            if distinct
            else ("Too few seeds to tell" if verdict.comparison.p_value is None else "Not distinguishable")
        )
        parts.append(
            f'<p class="runner-up">Runner-up: {trial_link(runner.number)}{escape(_stage(runner))}: {escape(metric)} = '
            f'<span class="interval">{escape(verdict.runner_up_interval.text())}</span></p>'
            f'<p class="verdict {"distinct" if distinct else "tied"}"><b>{label}:</b> '
            f"{escape(verdict.comparison.text())}.</p>"
        )
    else:
        parts.append("<p>No runner-up to compare with yet.</p>")
    pbt = is_pbt(snap)
    pool = "the confirmation trials" if verdict.confirmed else ("the last generation" if pbt else "all complete trials")
    parts.append(f'<p class="caption">Ranked by the mean over seeds among {pool}; intervals: {_ci_note()}.</p>')
    highest = decision.highest
    if highest is not None and highest.number != best.number and highest.values:
        parts.append(
            f'<p class="note">Trial {trial_link(highest.number)} has the best single stored value '
            f"({escape(num(highest.values[0]))} from {plural(len(stats.seed_values(highest)), 'seed')}); the winner "
            "is decided by the confirmation stage, which reran the best trials on more, fresh seeds.</p>"
        )
    if pbt:
        parts.append(
            '<p class="caption">A population-based study: only the last generation\'s segments (whose curves run '
            "from iteration 0 to the end) and the confirmation trials compete; an earlier segment's value is over a "
            "partial curve.</p>"
        )
    parts.append(promoted)
    parts.append(config)
    parts.append(_compute(decision))
    return head + "".join(parts) + "</section>"


def _tie(verdict: stats.Verdict, metric: str) -> str:
    """No winner is crowned among trials that all reach the same value (every one at -1, say: a reward that
    never paid): the page says so, and the trial it marks is only the first of them."""
    return (
        f'<p class="winner big tie">No winner: the trials tie. All {verdict.tie} trials ranked reach '
        f'{escape(metric)} = <span class="interval">{escape(verdict.winner_interval.text())}</span>; '
        "the search could not tell their settings apart (a reward that never varies gives every trial the same "
        "value: see GRPO health).</p>"
        f'<p class="note">Plots and the config below mark trial {trial_link(verdict.winner.number)}, the first of '
        "them, only as an example.</p>"
    )


def promotion(p: Promotion) -> str:
    """Whether the search's ranking held on a promoted base: the sentence, then both rankings side by side."""
    kind = "held" if p.outcome == HELD else ("unknown" if p.outcome == CANNOT_TELL else "flipped")
    rows = "".join(
        f"<tr><td>{trial_link(r.source)}</td><td>{escape(num(r.search_value))}</td><td>{r.search_rank}</td>"
        f"<td>{trial_link(r.trial)}</td><td>{escape(num(r.mean))}</td><td>{r.rank}</td></tr>"
        for r in p.rows
    )
    where = escape(p.search_base or "search")
    table = (
        f'<table class="params promotion-ranks"><tr><th>search trial</th><th>value ({where})</th><th>rank</th>'
        f"<th>confirmation trial</th><th>mean on {escape(p.base)}</th><th>rank</th></tr>{rows}</table>"
        if p.rows
        else ""
    )
    return (
        f'<div class="promotion" data-base="{escape(p.base)}"><h3>Promoted to {escape(p.base)}</h3>'
        f'<p class="promotion-verdict {kind}"><b>{escape(p.outcome.capitalize())}:</b> {escape(p.sentence())}</p>'
        f"{table}</div>"
    )


def _ci_note() -> str:
    return (
        f"{stats.CONFIDENCE:.0%} percentile bootstrap of the mean over the trial's seeds; the paired test compares "
        "the two trials seed by seed on the seeds both ran"
    )


def _compute(decision: Decision) -> str:
    return compute_text(decision.compute, decision.best)


def _pareto_decision(snap: StudySnapshot, decision: Decision) -> str:
    best = decision.best
    assert best is not None
    goals = study_objectives(snap)
    values = "; ".join(f"{g.metric} = {_interval_text(best, i)}" for i, g in enumerate(goals))
    chosen = ' class="chosen"'
    rows = "".join(
        f"<tr{chosen if t.number == best.number else ''}><td>{trial_link(t.number)}</td>"
        + "".join(f"<td>{escape(num(v))}</td>" for v in (t.values or []))
        + "</tr>"
        for t in decision.front
    )
    head = "".join(f"<th>{escape(g.metric)} ({escape(g.direction)})</th>" for g in goals)
    return (
        f'<p class="winner big">Chosen trade-off: {trial_link(best.number)}: <span class="interval">'
        f"{escape(values)}</span></p>"
        f"<p>{plural(len(decision.front), 'Pareto-optimal trial')} (no other trial is at least as good on every "
        f"objective and better on one); the chosen one is the front's best on {escape(goals[0].metric)}.</p>"
        f'<table class="params front"><tr><th>trial</th>{head}</tr>{rows}</table>'
    )
