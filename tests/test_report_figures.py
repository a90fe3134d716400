"""The report's own figures: importances with their spread, slices, learning curves with seed bands, cost."""

from __future__ import annotations

import re

import pytest
from report_fixtures import PAYLOAD, make_study

from grpo.report import collect, importance, write_report
from grpo.report._figure import BEST_COLOR
from grpo.report.best import complete_trials
from grpo.report.cost import cost_figure, cost_front
from grpo.report.curves import learning_curves, param_colours
from grpo.report.decision import study_decision
from grpo.report.slices import slice_figure

PARAMS = ["layout", "rl_config.clip_ratio", "rl_config.init_kl_coef", "rl_config.n_samples_per_prompt"]


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    """The fixture study (4 complete trials) with the payload in a parameter value."""
    study = make_study(tmp_path_factory.mktemp("figures"), payload=PAYLOAD)
    frames = collect(study)
    return study, frames, study_decision(study, frames)


@pytest.fixture(scope="module")
def bigger(tmp_path_factory):
    """16 complete trials whose accuracy depends on init_kl_coef alone."""
    study = make_study(tmp_path_factory.mktemp("importances"), extra=12)
    return study, collect(study)


# ------------------------------------------------------------------------------------- importances
def test_importances_wait_for_enough_complete_trials(small, tmp_path):
    study, _, _ = small
    note = importance.importances(study, complete_trials(study))
    assert note == importance.too_few(4)
    assert "Too few complete trials for parameter importances: 4 complete, at least 10 needed" in note
    page = write_report(study, tmp_path).read_text()
    body = re.search(r'<section id="importances0".*?</section>', page, re.S).group(0)
    assert "Too few complete trials" in body and "plotly-graph-div" not in body


def test_importances_find_the_parameter_that_matters_with_a_bootstrap_spread(bigger):
    study, _ = bigger
    result = importance.importances(study, complete_trials(study))
    assert isinstance(result, importance.Importances)
    assert result.complete == result.used == 16 and result.resamples == importance.RESAMPLES
    assert result.top(1) == ["rl_config.init_kl_coef"]
    assert sum(result.value) == pytest.approx(1.0)
    assert all(lo <= hi for lo, hi in zip(result.low, result.high, strict=True))
    assert any(hi - lo > 0.01 for lo, hi in zip(result.low, result.high, strict=True))  # a real spread
    bars = importance.figure(result)["data"][0]
    assert bars["y"][-1] == "rl_config.init_kl_coef"  # plotly draws the last bar on top
    assert len(bars["error_x"]["array"]) == len(bars["error_x"]["arrayminus"]) == len(result.params)
    assert "10 bootstrap resamples" in result.caption() and "all 16 complete trials" in result.caption()


def test_importances_use_a_capped_sample_of_a_big_study(bigger, monkeypatch):
    study, _ = bigger
    monkeypatch.setattr(importance, "MAX_TRIALS", 12)
    result = importance.importances(study, complete_trials(study))
    assert result.used == 12 and result.complete == 16
    assert "a uniform sample of 12 of the 16 complete trials" in result.caption()


# ------------------------------------------------------------------------------------------ slices
def test_the_best_trial_is_a_red_star_in_every_slice(small):
    study, _, decision = small
    trials = complete_trials(study)
    figure = slice_figure(trials, PARAMS, 0, "acc_rewards/mean", decision.best, decision.runner_up)
    stars = [t for t in figure["data"] if t["name"] == "best trial #5"]
    assert len(stars) == len(PARAMS)  # one per subplot, each on its own axes
    assert len({(t["xaxis"], t["yaxis"]) for t in stars}) == len(PARAMS)
    assert all(t["marker"]["color"] == BEST_COLOR and t["marker"]["color"].lower() not in ("#fff", "#ffffff", "white")
               for t in stars)
    assert [t["showlegend"] for t in stars].count(True) == 1
    assert all(t["y"] == [pytest.approx(0.9)] for t in stars)
    assert "rl_config.clip_ratio = 0.25" in stars[0]["hovertemplate"]
    runner = [t for t in figure["data"] if t["name"].startswith("runner-up #")]
    assert len(runner) == len(PARAMS) and runner[0]["name"] == "runner-up #0"
    # The two-seed trial 0 gets a whisker over its seeds; categorical axes keep the choices' order.
    points = next(t for t in figure["data"] if t["name"] == "trials" and t["xaxis"] == stars[1]["xaxis"])
    at = [t.number for t in trials].index(0)
    assert points["error_y"]["arrayminus"][at] == pytest.approx(0.025)
    assert figure["layout"]["xaxis"]["type"] == "category"
    assert figure["layout"]["xaxis"]["categoryarray"] == ["tp1_pp1_cpu", PAYLOAD]
    assert figure["layout"]["xaxis3"]["type"] == "log"


# ------------------------------------------------------------------------------------------ curves
@pytest.fixture(scope="module")
def curves(tmp_path_factory):
    study = make_study(tmp_path_factory.mktemp("curves"), payload=PAYLOAD, confirm=True, health=True)
    frames = collect(study)
    decision = study_decision(study, frames)
    return study, decision, learning_curves(study, frames, decision.best)


def _panel_axes(figure: dict, title_start: str) -> str:
    """The x axis ref ("x3") of the subplot whose title starts with ``title_start``."""
    titles = [a["text"] for a in figure["layout"]["annotations"]]
    k = next(i for i, t in enumerate(titles) if t.startswith(title_start))
    return "x" if k == 0 else f"x{k + 1}"


def test_curves_draw_every_grpo_panel(curves):
    _, _, figure = curves
    titles = [a["text"] for a in figure["layout"]["annotations"]]
    expected = ["objective: acc_rewards/mean (last so far)", "held-out accuracy, greedy: eval/acc_greedy",
                "held-out accuracy, sampled: eval/acc", "training reward: grpo/score/mean",
                "training accuracy: grpo/acc/mean", "format reward: strict_format_rewards/mean",
                "KL to the reference: actor/kl_loss", "entropy: actor/entropy", "clip fraction: actor/pg_clipfrac",
                "grad norm: actor/grad_norm", "response length: response_length/mean",
                "truncated responses: response_length/truncated", "zero-variance groups: grpo/zero_variance_groups"]
    assert titles == expected


def test_held_out_curves_have_seed_bands(curves):
    _, decision, figure = curves
    x = _panel_axes(figure, "held-out accuracy, greedy")
    data = figure["data"]
    bands = [i for i, t in enumerate(data) if t.get("name", "").startswith("seed band #") and t["xaxis"] == x]
    # Trial 0 ran 2 seeds, the two confirmation trials 3: three bands; one-seed trials have none.
    assert sorted(data[i]["name"] for i in bands) == ["seed band #0", "seed band #10", "seed band #11"]
    for i in bands:
        band, lower = data[i], data[i - 1]
        assert band["fill"] == "tonexty" and lower["meta"]["k"] == "edge" and lower["xaxis"] == x
        assert band["x"][0] == 0  # the base policy's evaluation
        assert all(lo <= hi for lo, hi in zip(lower["y"], band["y"], strict=True))
        assert any(lo < hi for lo, hi in zip(lower["y"], band["y"], strict=True))
    mean = next(t for t in data if t["xaxis"] == x and t["meta"] == {"t": "10", "k": "line", "s": 1})
    assert "mean of 3 seeds" in mean["hovertemplate"]
    assert decision.best.number == 10
    assert mean["line"]["color"] == "#000000" and mean["line"]["width"] > 3  # the best trial: black and wide


def test_hovering_a_curve_shows_the_trials_parameters_escaped(curves):
    _, _, figure = curves
    line = next(t for t in figure["data"] if t.get("meta", {}).get("k") == "line" and t["meta"]["t"] == "4")
    assert "rl_config.clip_ratio = 0.22" in line["hovertemplate"]
    assert "layout = &lt;script&gt;alert(1)&lt;/script&gt;" in line["hovertemplate"]
    assert PAYLOAD not in line["hovertemplate"]


def test_pruned_trials_are_faint_and_flags_are_marked_where_they_fired(curves):
    _, _, figure = curves
    pruned = [t for t in figure["data"] if t.get("meta", {}).get("t") == "2" and t["meta"]["k"] == "line"]
    assert pruned and all(t["opacity"] < 0.5 and t["line"]["dash"] == "dash" for t in pruned)
    complete = next(t for t in figure["data"] if t.get("meta", {}).get("t") == "1" and t["meta"]["k"] == "line")
    assert complete["opacity"] == 1.0
    marks = [t for t in figure["data"] if t["name"] == "health flag"]
    x = _panel_axes(figure, "held-out accuracy, greedy")
    held = next(t for t in marks if t["xaxis"] == x)
    assert "trial 6: reward_up_heldout_down at iteration 6" in held["text"]


def test_curves_can_be_coloured_by_every_searched_parameter(curves):
    study, _, figure = curves
    meta = figure["layout"]["meta"]
    assert set(meta["colours"]) == {"trial", *PARAMS}
    shown = {t["meta"]["t"] for t in figure["data"] if "meta" in t}
    for colouring in meta["colours"].values():
        assert shown <= set(colouring)
    # Numbers on a colour scale (log scale for a log parameter: equal ratios, equal steps), choices a palette.
    kl = meta["colours"]["rl_config.init_kl_coef"]
    by_value = {t.params["rl_config.init_kl_coef"]: kl[str(t.number)] for t in study.trials if t.number < 7}
    assert by_value[0.001] == "#440154"  # Viridis' start: the smallest value
    assert len(set(by_value.values())) == len(by_value)
    layouts = meta["colours"]["layout"]
    assert layouts["4"] != layouts["0"] and layouts["0"] == layouts["1"]
    assert meta["keys"]["layout"][1] == [PAYLOAD, layouts["4"]]


def test_a_conditional_parameter_is_grey_where_a_trial_does_not_have_it(small):
    study, _, _ = small
    trials = study.trials
    colours, key = param_colours(trials[:2], "rl_config.clip_ratio")
    assert len(set(colours.values())) == 2 and key[0][0] == "0.1"
    trials[1].params.pop("rl_config.clip_ratio")  # a copy: load_study returns fresh objects
    colours, key = param_colours(trials[:2], "rl_config.clip_ratio")
    assert colours[1] == "#bbbbbb" and key[-1] == ("not set", "#bbbbbb")


def test_the_page_has_the_colour_and_smoothing_controls(small, tmp_path):
    study, _, _ = small
    page = write_report(study, tmp_path).read_text()
    controls = re.search(r'<div class="curve-controls" data-plot="plot-curves">.*?</div>', page, re.S).group(0)
    options = re.findall(r'<option value="([^"]*)">', controls)
    assert options == ["trial", *PARAMS]
    assert '<input type="range" class="smoothing"' in controls


# -------------------------------------------------------------------------------------------- cost
def test_cost_front_keeps_the_trials_no_cheaper_trial_beats():
    points = [(10, 0.5, 0), (20, 0.4, 1), (30, 0.7, 2), (40, 0.7, 3), (50, 0.9, 4), (5, 0.1, 5)]
    assert cost_front(points, better=-1.0) == [(5, 0.1, 5), (10, 0.5, 0), (30, 0.7, 2), (50, 0.9, 4)]
    assert cost_front(points, better=1.0) == [(5, 0.1, 5)]  # minimising: the cheapest is also the best


def test_cost_figure_draws_the_front_and_the_best_trial(small):
    study, frames, decision = small
    figure = cost_figure(study, frames, decision.best)
    front = next(t for t in figure["data"] if t["name"] == "cost front")
    # Trials 1, 4 and 5 used 54 CPU-seconds each, trial 0 108: trial 5 is both cheapest and best.
    assert front["text"] == ["trial 5"] and front["x"] == [pytest.approx(54.0)]
    assert any(t["name"] == "best trial #5" for t in figure["data"])


def test_the_red_parallel_coordinates_line_is_the_best_trials_own():
    """Optuna does not draw the lines in trial order: the red line must still be the best trial's."""
    import optuna
    import optuna.visualization as ov

    from grpo.report.plots import _best_line_on_top

    study = optuna.create_study(direction="maximize", sampler=optuna.samplers.RandomSampler(seed=0))
    dists = {"lr": optuna.distributions.FloatDistribution(1e-5, 1e-3, log=True),
             "clip": optuna.distributions.CategoricalDistribution([0.1, 0.2, 0.3])}
    for value, x, clip in [(0.75, 5.6e-5, 0.1), (0.73, 2.0e-5, 0.3), (0.756, 1.4e-5, 0.1), (0.755, 1.5e-5, 0.1),
                           (0.60, 4.6e-4, 0.2)]:
        study.add_trial(optuna.trial.create_trial(value=value, params={"lr": x, "clip": clip}, distributions=dists))
    best = study.best_trial
    fig = _best_line_on_top(ov.plot_parallel_coordinate(study), study, best, None)
    red = [t for t in fig.data if t.name == f"best trial #{best.number}"]
    assert len(red) == 1 and red[0].customdata[0][1] == "0.756"
    assert fig.data[-1] is red[0] or fig.data[-1].name == red[0].name
