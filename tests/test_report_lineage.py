"""Population-based (pbt) studies in the report: the lineage tree, the winner's schedule, best_trial's rule (only
the last generation competes), the export that replays a branched winner, and a promoted confirmation stage's
ranking check (grpo.report.lineage, grpo.report.best, grpo.report.reproduce, grpo.report.promotion).

The studies are written as the pbt driver records them (grpo/sweep/run/pbt.py: the trial attrs of
grpo.trial_attrs, the study's ``pbt`` attr); the tau/rho point estimates are checked against scipy's own."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import optuna
import pytest
import yaml
from optuna.distributions import FloatDistribution
from optuna.trial import TrialState, create_trial
from scipy import stats as sps

from grpo.report import collect, stats, write_report
from grpo.report.best import best_trial, candidates, pareto_front, ranked
from grpo.report.decision import study_decision
from grpo.report.lineage import lineage_figure, population, schedule_of
from grpo.report.page_summary import decision as decision_html
from grpo.report.promotion import CANNOT_TELL, HELD, NOT_HELD, kendall_tau, promotions, spearman_rho
from grpo.report.reproduce import config_yaml, exported_config
from grpo.report.trial_config import config_pointer
from grpo.trial_attrs import (
    BRANCH_OF,
    BRANCHED_AT,
    CONFIG_POINTER,
    CONFIRMATION_OF,
    EXPLOITED,
    PBT_GENERATION,
    PBT_MEMBER,
    PBT_SETTINGS,
    PROMOTED_BASE,
    SCHEDULE,
    SEEDS,
    TRIAL_DIR,
    VALUES_PER_SEED,
)

K, G, P = 3, 2, 2  # interval, generations, population: train_iters 6
SETTINGS = {
    "kind": "pbt",
    "population": P,
    "interval": K,
    "quantile": 0.5,
    "resample_probability": 0.25,
    "perturb": [0.8, 1.2],
    "train_iters": K * G,
    "generations": G,
}
LR, KL = "actor_config.lr", "rl_config.init_kl_coef"
DISTS = {LR: FloatDistribution(1e-6, 1e-3, log=True), KL: FloatDistribution(1e-3, 1e-1, log=True)}
BASE_CONFIG = {
    "actor_config": {"lr": 1e-5, "save": None},
    "rl_config": {"init_kl_coef": 0.01},
    "megatron_training": {"train_iters": K * G, "seed": 1234},
    "engine": {"task": "arithmetic"},
}
# Generation 0: member 0 tops it (0.85 over iterations 0-2), member 1 is the bottom. Generation 1: member 0
# continues trial 0 (#2), member 1 is replaced by a copy of trial 0, its lr explored (#3): the winner.
PLAN = [  # number, member, generation, value, params, parent, exploited
    (0, 0, 0, 0.85, {LR: 1e-5, KL: 0.01}, None, False),
    (1, 1, 0, 0.30, {LR: 4e-5, KL: 0.02}, None, False),
    (2, 0, 1, 0.70, {LR: 1e-5, KL: 0.01}, 0, False),
    (3, 1, 1, 0.80, {LR: 2e-5, KL: 0.01}, 0, True),
]


def _schedule(number: int) -> dict:
    if number == 3:  # trial 0's values, then the explored lr from the branch on
        return {LR: {"0": 1e-5, str(K): 2e-5}, KL: {"0": 0.01}}
    params = PLAN[number][4]
    return {LR: {"0": params[LR]}, KL: {"0": params[KL]}}


def _write_trial_dir(study_dir: Path, number: int, params: dict, parent: int | None, value: float) -> dict:
    """The trial folder as the sweep writes it: config.yaml (a branch's: its parent's checkpoint, its stop at
    the end of the generation, the lineage's schedule) and metrics.jsonl (ancestor rows adopted)."""
    trial_dir = study_dir / "trials" / str(number)
    trial_dir.mkdir(parents=True)
    config = json.loads(json.dumps(BASE_CONFIG))
    config["actor_config"]["lr"] = params[LR]
    config["rl_config"]["init_kl_coef"] = params[KL]
    config["actor_config"]["save"] = str(trial_dir / "runs" / "seed0" / "ckpt")
    config["engine"]["exit_interval"] = K
    config["schedule"] = {key: {int(at): v for at, v in points.items()} for key, points in _schedule(number).items()}
    if parent is not None:
        config["actor_config"]["load"] = str(study_dir / "trials" / str(parent) / "runs" / "seed0" / "ckpt")
        config["actor_config"]["no_load_optim"] = False
    (trial_dir / "config.yaml").write_text(yaml.safe_dump(config))
    rows = [{"iteration": i, "seed": 1234, "acc_rewards/mean": value * i / (K * G)} for i in range(1, K * G + 1)]
    generation = PLAN[number][2]
    rows = [r for r in rows if r["iteration"] <= (generation + 1) * K]
    (trial_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return {TRIAL_DIR: str(trial_dir), CONFIG_POINTER: config_pointer(trial_dir / "config.yaml", study_dir)}


def make_pbt_study(
    tmp_path: Path, plan=PLAN, settings: dict | None = SETTINGS, directions=("maximize",), name: str = "pbt"
) -> optuna.Study:
    study_dir = tmp_path / "studies" / name
    study_dir.mkdir(parents=True)
    storage = optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(str(study_dir / "j.log")))
    study = optuna.create_study(study_name=name, storage=storage, directions=list(directions))
    attrs = {
        "study_dir": str(study_dir),
        "base": "tiny",
        "base_config": BASE_CONFIG,
        "backend": "embedded",
        "objectives": [{"metric": "acc_rewards/mean", "direction": d} for d in directions],
    }
    if settings is not None:
        attrs[PBT_SETTINGS] = settings
    for key, value in attrs.items():
        study.set_user_attr(key, value)
    for number, member, generation, value, params, parent, exploited in plan:
        user_attrs = {PBT_MEMBER: member, PBT_GENERATION: generation, SCHEDULE: _schedule(number), SEEDS: [1234]}
        if parent is not None:
            user_attrs.update({BRANCH_OF: parent, BRANCHED_AT: generation * K, EXPLOITED: exploited})
        user_attrs.update(_write_trial_dir(study_dir, number, params, parent, value))
        values = [value] if len(directions) == 1 else [value, 1.0 - value if number else 0.0]
        study.add_trial(
            create_trial(
                values=values, params=params, distributions=DISTS, user_attrs=user_attrs, state=TrialState.COMPLETE
            )
        )
    return study


def section(page: str, id: str, until: str = "why") -> str:
    """The page from section ``id`` up to the section ``until`` that follows it (sections nest panels)."""
    start = page.index(f'<section id="{id}"')
    return page[start : page.index(f'<section id="{until}"', start)]


@pytest.fixture(scope="module")
def pbt(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("pbt")
    study = make_pbt_study(tmp)
    out = tmp / "report"
    return study, out, write_report(study, out).read_text()


# ------------------------------------------------------------------------------------------ best_trial
def test_only_the_last_generation_competes(pbt):
    study, _, _ = pbt
    # Trial 0 has the highest value, but over iterations 0-2 only: the winner is the last generation's best.
    assert max(study.trials, key=lambda t: t.value).number == 0
    assert best_trial(study).number == 3
    assert [t.number for t in ranked(study)] == [3, 2]
    assert {t.number for t in candidates(study)} == {2, 3}
    frames = collect(study)
    decision = study_decision(study, frames)
    assert decision.best.number == 3 and decision.runner_up.number == 2  # the verdict's pool follows the rule
    assert stats.verdict(study.trials, study.directions[0]).winner.number == 3  # as the sweep calls it: all trials
    row = frames.trials.set_index("number").loc[3]
    assert (row["pbt_member"], row["pbt_generation"], row["branch_of"], row["branched_at"], row["exploited"]) == (
        1,
        1,
        0,
        K,
        True,
    )


def test_the_trials_table_places_each_segment(pbt):
    _, _, page = pbt
    table = section(page, "trials", until="details")
    assert "<th>population</th>" in table
    assert "<td>m1 g1 &lt;- #0 (exploit)</td>" in table and "<td>m0 g1 &lt;- #0</td>" in table
    assert "<td>m0 g0</td>" in table


def test_without_the_pbt_attr_the_highest_generation_seen_is_the_last(tmp_path):
    study = make_pbt_study(tmp_path, settings=None)
    assert best_trial(study).number == 3


def test_mid_run_no_segment_wins_and_the_page_says_why(tmp_path):
    study = make_pbt_study(tmp_path, plan=PLAN[:2])  # generation 0 ended, generation 1 not yet
    assert best_trial(study) is None and ranked(study) == []
    frames = collect(study)
    body = decision_html(study, frames, study_decision(study, frames), config_link=False)
    assert "No segment of the population&#x27;s last generation has completed yet" in body
    page = write_report(study, tmp_path / "out").read_text()
    assert "No lineage has won yet" in section(page, "lineage")


def test_a_pbt_pareto_front_leaves_earlier_generations_out(tmp_path):
    # Two objectives (values [v, 1 - v], trial 0 [0.85, 0.0]): trial 0 would be on the front over all trials.
    study = make_pbt_study(tmp_path, directions=("maximize", "minimize"))
    assert 0 in {t.number for t in study.best_trials}
    assert [t.number for t in pareto_front(study)] == [3]
    assert best_trial(study).number == 3


def test_a_study_that_is_not_pbt_ranks_as_before(tmp_path):
    study = optuna.create_study(direction="maximize")
    for v in (0.2, 0.9, 0.5):
        study.add_trial(create_trial(value=v, params={LR: 1e-5}, distributions={LR: DISTS[LR]}))
    assert best_trial(study).number == 1 and [t.number for t in ranked(study)] == [1, 2, 0]
    page = write_report(study, tmp_path / "out").read_text()
    assert 'id="lineage"' not in page and 'href="#lineage"' not in page


# --------------------------------------------------------------------------------------------- lineage
def test_lineage_tree_and_sentence(pbt):
    study, _, page = pbt
    pop = population(study, best_trial(study))
    assert pop.path == [0, 3] and pop.winner == 3
    assert [s.number for s in pop.exploits] == [3] and len(pop.branches) == 2
    assert (pop.segments[3].start, pop.segments[3].end, pop.segments[0].end) == (K, 2 * K, K)
    figure = lineage_figure(pop)
    names = [trace["name"] for trace in figure["data"]]
    assert "exploited branch (copy of a top member, explored)" in names and "winner's lineage" in names
    winner = next(t for t in figure["data"] if t["name"] == "winner's lineage" and t["mode"] == "lines+markers")
    assert [y for y in winner["y"] if y is not None] == [0, 0, 0, 1, 1, 1]  # member 0's trial 0, then member 1
    exploit = next(t for t in figure["data"] if t["name"].startswith("exploit step"))
    assert exploit["x"][:2] == [K, K] and exploit["y"][:2] == [0, 1]  # trial 0's end to trial 3's start
    assert any("actor_config.lr = 2e-05" in h for h in winner["hovertext"])
    assert figure["layout"]["annotations"][0]["arrowcolor"] == "#000000"  # the exploit on the winner's path
    body = section(page, "lineage")
    assert 'href="#lineage"' in page and 'id="plot-lineage-tree"' in body
    assert (
        "2 members &times; 2 generations of 3 iterations: 4 segments, 2 branches from a checkpoint, 1 exploit step"
    ) in body
    assert (
        'The winning lineage: member 1, trial <a href="#trial-3">#3</a>, started as member 0\'s trial '
        '<a href="#trial-0">#0</a>; it copied member 0\'s checkpoint at iteration 3: '
        '<a href="#trial-0">#0</a> &rarr; <a href="#trial-3">#3</a>.'
    ) in body


def test_the_winners_schedule_is_plotted_and_tabulated(pbt):
    study, _, page = pbt
    assert schedule_of(best_trial(study), None, study.trials) == {KL: {0: 0.01}, LR: {0: 1e-5, K: 2e-5}}
    body = section(page, "lineage")
    assert 'id="plot-lineage-schedule"' in body
    assert f"<tr><td><code>{LR}</code></td><td>0 to 2</td><td>1e-05</td></tr>" in body
    assert f"<tr><td><code>{LR}</code></td><td>3 to 5</td><td>2e-05</td></tr>" in body


# ---------------------------------------------------------------------------------------------- export
def test_the_exported_config_replays_the_branched_winner_from_scratch(pbt):
    study, out, _ = pbt
    trial = study.trials[3]
    body = exported_config(trial, BASE_CONFIG, study)
    assert body["schedule"] == {LR: {0: 1e-5, K: 2e-5}, KL: {0: 0.01}}  # the whole lineage's values
    assert "load" not in body["actor_config"]  # the parent's checkpoint: the base has no starting weights
    assert "no_load_optim" not in body["actor_config"] and "save" not in body["actor_config"]
    assert "exit_interval" not in body["engine"]  # runs to train_iters, not to the end of the generation
    assert body["actor_config"]["lr"] == 2e-5
    text = (out / "best_config.yaml").read_text()  # what the report wrote beside itself: the same config
    assert text.startswith("# trial 3 of study pbt") and "# a pbt lineage, replayed from iteration 0" in text
    assert yaml.safe_load(text) == body
    # A base with starting weights and its own exit_interval gets them back.
    base = {**BASE_CONFIG, "actor_config": {"load": "/weights/tiny"}, "engine": {"exit_interval": 0}}
    again = exported_config(trial, base, study)
    assert again["actor_config"]["load"] == "/weights/tiny" and again["engine"]["exit_interval"] == 0
    assert "a pbt lineage" in config_yaml(study, trial, base)


# ------------------------------------------------------------------------------------------- promotion
SEARCH = [0.90, 0.80, 0.70]  # search trials 0, 1, 2 (maximize): the search ranks them 0 > 1 > 2
CONFIRM_SEEDS = [11, 12, 13]


def promoted_study(per_seed: list[list[float]], base: str = "qwen7b_npu") -> optuna.Study:
    study = optuna.create_study(study_name="promo", direction="maximize")
    study.set_user_attr("base", "tiny")
    for v in SEARCH:
        study.add_trial(
            create_trial(value=v, params={LR: 1e-5}, distributions={LR: DISTS[LR]}, user_attrs={SEEDS: [1]})
        )
    for source, values in enumerate(per_seed):
        attrs = {CONFIRMATION_OF: source, PROMOTED_BASE: base, SEEDS: CONFIRM_SEEDS, VALUES_PER_SEED: [values]}
        study.add_trial(
            create_trial(
                value=float(np.mean(values)), params={LR: 1e-5}, distributions={LR: DISTS[LR]}, user_attrs=attrs
            )
        )
    return study


def _decision_body(study: optuna.Study) -> str:
    frames = collect(study)
    return decision_html(study, frames, study_decision(study, frames), config_link=False)


def test_a_ranking_that_held():
    study = promoted_study([[0.61, 0.63, 0.62], [0.52, 0.55, 0.50], [0.41, 0.40, 0.44]])
    (p,) = promotions(study.trials, study.directions[0], "tiny")
    assert p.outcome == HELD and p.tau.value == 1.0 and (p.tau.low, p.tau.high) == (1.0, 1.0)
    assert p.rho.value == 1.0 and p.seeds == CONFIRM_SEEDS
    assert [(r.source, r.search_rank, r.rank) for r in p.rows] == [(0, 1, 1), (1, 2, 2), (2, 3, 3)]
    body = _decision_body(study)
    assert (
        "<b>Held:</b> The ranking on tiny held on qwen7b_npu: Kendall&#x27;s tau = 1.00 [1.00, 1.00], "
        "Spearman&#x27;s rho = 1.00 [1.00, 1.00] between the search ranking of the 3 confirmed trials and their "
        "mean over 3 paired seed(s) on qwen7b_npu (95% bootstrap intervals over the seeds); the search&#x27;s "
        "best, trial 0, is also the best there."
    ) in body
    assert "(confirmation of trial #0 on qwen7b_npu)" in body  # the winner's stage names the base


def test_a_ranking_that_flipped():
    study = promoted_study([[0.41, 0.40, 0.44], [0.52, 0.55, 0.50], [0.61, 0.63, 0.62]])
    (p,) = promotions(study.trials, study.directions[0], "tiny")
    assert p.outcome == NOT_HELD and p.tau.value == -1.0 and p.tau.high == -1.0 and p.rho.value == -1.0
    assert [r.rank for r in p.rows] == [3, 2, 1]
    body = _decision_body(study)
    assert "<b>Did not hold:</b> The ranking on tiny did not hold on qwen7b_npu: Kendall&#x27;s tau = -1.00" in body
    assert "the search&#x27;s best, trial 0, ranks 3 of 3 there" in body


def test_seeds_that_disagree_cannot_tell():
    # Trials 0 and 1 trade places seed by seed: the order of their means is the seeds' luck.
    study = promoted_study([[0.9, 0.1, 0.5], [0.1, 0.9, 0.5], [0.5, 0.5, 0.45]])
    (p,) = promotions(study.trials, study.directions[0], "tiny")
    assert p.outcome == CANNOT_TELL and p.tau.low < 0 < p.tau.high
    assert "Cannot tell whether the ranking on tiny held on qwen7b_npu (the interval of tau spans 0)" in p.sentence()
    one_seed = promoted_study([[0.6], [0.5], [0.4]])
    (q,) = promotions(one_seed.trials, one_seed.directions[0])
    assert q.outcome == CANNOT_TELL and "one paired seed gives no interval" in q.sentence()


def test_a_study_without_promotion_has_no_promotion_block():
    study = promoted_study([[0.61, 0.63, 0.62], [0.52, 0.55, 0.50]], base=None)  # type: ignore[arg-type]
    assert promotions(study.trials, study.directions[0]) == []
    assert 'class="promotion"' not in _decision_body(study)


def test_tau_and_rho_match_scipy():
    """The vectorised statistics against scipy's kendalltau (tau-b) and spearmanr, ties included."""
    rng = np.random.default_rng(3)
    x = np.array([0.9, 0.8, 0.8, 0.6, 0.5])
    ys = np.vstack([rng.normal(size=5), np.round(rng.normal(size=5), 0), x[::-1], x])
    for y, tau, rho in zip(ys, kendall_tau(x, ys), spearman_rho(x, ys), strict=True):
        assert tau == pytest.approx(sps.kendalltau(x, y).statistic)
        assert rho == pytest.approx(sps.spearmanr(x, y).statistic)
    assert np.isnan(kendall_tau(x, np.full((1, 5), 0.5))[0])  # no order on one side


def test_a_confirmed_lineage_wins_through_its_confirmation_trial(tmp_path):
    study = make_pbt_study(tmp_path)
    for source, per_seed in ((3, [0.82, 0.84, 0.83]), (2, [0.70, 0.71, 0.69])):  # the stage reruns the top 2
        attrs = {
            CONFIRMATION_OF: source,
            SCHEDULE: _schedule(source),
            SEEDS: CONFIRM_SEEDS,
            VALUES_PER_SEED: [per_seed],
        }
        study.add_trial(
            create_trial(
                value=float(np.mean(per_seed)),
                params=study.trials[source].params,
                distributions=DISTS,
                user_attrs=attrs,
            )
        )
    best = best_trial(study)
    assert best.number == 4 and best.user_attrs[CONFIRMATION_OF] == 3
    pop = population(study, best)
    assert pop.winner == 3 and pop.best == 4 and pop.path == [0, 3] and 4 not in pop.segments
    assert schedule_of(best, pop, study.trials)[LR] == {0: 1e-5, K: 2e-5}
    page = write_report(study, tmp_path / "out").read_text()
    assert '(confirmation trial <a href="#trial-4">#4</a> reran it from scratch)' in section(page, "lineage")


def test_one_confirmed_trial_or_no_shared_seed_cannot_tell():
    (p,) = promotions(promoted_study([[0.6, 0.62, 0.61]]).trials, optuna.study.StudyDirection.MAXIMIZE)
    assert p.outcome == CANNOT_TELL and p.tau is None and "a ranking needs two trials" in p.sentence()
    study = promoted_study([[0.6, 0.62, 0.61], [0.5, 0.52, 0.51]])
    trials = study.trials
    trials[4].user_attrs[SEEDS] = [21, 22, 23]  # the second confirmation ran other seeds
    (q,) = promotions(trials, study.directions[0])
    assert q.outcome == CANNOT_TELL and q.seeds == [] and "share no seed" in q.sentence()
