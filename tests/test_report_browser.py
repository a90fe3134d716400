"""The report in a real browser: headless Chromium opens index.html from disk, offline.

It must log no console message (no JS error, nothing blocked from the network), draw every plot (each
plot div holds plotly's SVG with drawn marks in it), leave the payload in user strings inert (no element
was injected), and paint a screenshot that is not blank. From the rendered DOM: the winner with its
interval over seeds, held-out accuracy curves with seed bands (filled areas in that subplot), the best
trial marked in the slice plot (a red star in every subplot and a legend entry 'best trial #n' whose
symbol is red, not white), and, for a 3-trial study, the "too few complete trials" note where the
importances would be. Skips only where Chromium is not installed (CI installs Debian's `chromium`).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess

import pytest
from report_fixtures import make_study

from grpo.report import write_report

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(CHROMIUM is None, reason="headless Chromium is not installed (apt-get install chromium)"),
]

# An element an unescaped string would inject, and one that would log to the console if it ran.
PAYLOAD = "<img src=x onerror=\"console.error('xss')\"><script>console.error('xss')</script>"
BEST_RED = "rgb(214, 39, 40)"  # _figure.BEST_COLOR as the browser writes it
WHITE = ("rgb(255, 255, 255)", "#fff", "#ffffff", "white")


def chromium(profile, *args: str, timeout: float = 180) -> subprocess.CompletedProcess:
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
           "--disable-background-networking", "--disable-component-update", "--disable-sync",
           "--disable-extensions", "--mute-audio", f"--user-data-dir={profile}", "--enable-logging=stderr", "--v=0",
           "--virtual-time-budget=15000", "--window-size=1400,3000", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


def held_out_subplot(dom: str) -> str:
    """The drawn marks of the 'held-out accuracy, greedy' subplot of the learning curves (its title names
    the subplot's index; plotly draws subplot n in the group ``x<n>y<n>``)."""
    curves = between(dom, 'id="plot-curves"', "</script>")
    k = re.search(r'<g class="annotation" data-index="(\d+)"(?:(?!<g class="annotation").)*?'
                  r'data-unformatted="held-out accuracy, greedy: eval/acc_greedy', curves, re.S)
    assert k, "no held-out accuracy subplot"
    n = int(k.group(1)) + 1
    ref = "xy" if n == 1 else f"x{n}y{n}"
    plot = re.search(rf'<g class="{ref}" transform="[^"]*" clip-path="[^"]*">(.*?)</g></g></g></g>', curves, re.S)
    assert plot, ref
    return plot.group(1)


def between(dom: str, start: str, end: str) -> str:
    i = dom.index(start)
    return dom[i : dom.index(end, i + len(start))]


@pytest.fixture(scope="module")
def rendered(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("browser")
    study = make_study(tmp, payload=PAYLOAD, running=True, confirm=True, health=True, environment=True)
    index = write_report(study, tmp / "report")
    shot = tmp / "report.png"
    run = chromium(tmp / "profile", "--dump-dom", f"--screenshot={shot}", index.as_uri())
    assert run.returncode == 0, run.stderr[-2000:]
    if os.environ.get("GRPO_REPORT_SCREENSHOT"):  # keep it to look at: GRPO_REPORT_SCREENSHOT=/tmp/report.png
        shutil.copy(shot, os.environ["GRPO_REPORT_SCREENSHOT"])
    return index.read_text(), run, shot


def test_report_renders_without_console_messages_and_draws_every_plot(rendered):
    page, run, shot = rendered
    figures = re.findall(r'<div id="plot-([\w-]+)" class="plotly-graph-div"', page)
    assert len(figures) >= 7
    console = [line for line in run.stderr.splitlines() if ":CONSOLE" in line]
    assert console == [], "console messages:\n" + "\n".join(console)
    dom = run.stdout
    # Every plot div was taken over by plotly and drew its data: an SVG with marks (points, lines, bars).
    for fig_id in figures:
        div = re.search(rf'<div id="plot-{fig_id}" class="[^"]*"[^>]*>(.*?)<script>', dom, re.S)
        assert div, fig_id
        assert "js-plotly-plot" in div.group(0) and 'class="main-svg"' in div.group(1), fig_id
        assert re.search(r'class="(point|js-line|bar|contour[^"]*)"|<path class="js-', div.group(1)), fig_id
    # The payload stayed text: no <img src="x"> element, no extra <script> element.
    assert '<img src="x"' not in dom
    assert "&lt;img src=x" in dom
    assert len(re.findall(r"<script[\s>]", dom)) == len(re.findall(r"<script[\s>]", page))
    assert not _blank(shot), "the screenshot is one colour: nothing was painted"


def test_the_winner_is_shown_with_its_interval(rendered):
    _, run, _ = rendered
    decision = between(run.stdout, '<section id="decision">', "</section>")
    winner = re.search(r'<p class="winner big">Winner: <a href="#trial-(\d+)">#\d+</a> \(confirmation of trial #5\): '
                       r'acc_rewards/mean = <span class="interval">([\d.]+) \[([\d.]+), ([\d.]+)\] \(3 seeds, 95% CI\)',
                       decision)
    assert winner, decision[:2000]
    mean, low, high = map(float, winner.groups()[1:])
    assert low <= mean <= high and low < high
    assert re.search(r'<p class="verdict distinct"><b>Distinguishable:</b>', decision)


def test_held_out_accuracy_curves_have_seed_bands(rendered):
    _, run, _ = rendered
    plot = held_out_subplot(run.stdout)
    fills = re.findall(r'<path class="js-fill" d="([^"]+)" style="([^"]*)"', plot)
    # Trial 0 (2 seeds) and the two confirmation trials (3 seeds) each have a band; one-seed trials none.
    assert len(fills) == 3, fills
    assert all(re.search(r"fill-opacity: 0\.1\d", style) for _, style in fills)
    assert all(len(d) > 20 for d, _ in fills)  # a drawn area, not an empty path


def test_the_best_trial_is_visibly_marked_in_every_slice(rendered):
    page, run, _ = rendered
    slices = between(run.stdout, 'id="plot-slice"', "</script>")
    params = 4
    stars = re.findall(r'<path class="point"[^>]*style="[^"]*fill: (rgb\([^)]*\))', slices)
    assert stars.count(BEST_RED) == params  # one red star per subplot
    legend = re.search(r'data-unformatted="best trial #(\d+)".*?<path class="scatterpts"[^>]*style="([^"]*)"', slices,
                       re.S)
    assert legend, "no 'best trial' legend entry"
    fill = re.search(r"fill: (rgb\([^)]*\))", legend.group(2)).group(1)
    assert fill == BEST_RED and fill not in WHITE
    winner = re.search(r'Winner: <a href="#trial-(\d+)"', page).group(1)
    assert legend.group(1) == winner


def test_a_three_trial_study_says_too_few_trials_instead_of_importances(tmp_path):
    study = make_study(tmp_path, limit=3)
    index = write_report(study, tmp_path / "report")
    run = chromium(tmp_path / "profile", "--dump-dom", index.as_uri())
    assert run.returncode == 0, run.stderr[-2000:]
    body = between(run.stdout, '<section id="importances0"', "</section>")
    assert re.search(r'<p class="note">Too few complete trials for parameter importances: 2 complete, at least 10 '
                     r"needed", body)
    assert "plotly-graph-div" not in body  # no confident bar drawn
    contour = between(run.stdout, '<section id="contour"', "</section>")
    assert '<p class="note">' in contour


def _blank(path) -> bool:
    """True when the image is a single colour (Pillow comes with tensorboard, a dependency)."""
    from PIL import Image

    image = Image.open(path).convert("RGB")
    return all(low == high for low, high in image.getextrema())


# A probe appended to a copy of the page: it uses the controls as a person would (select a colouring,
# move the smoothing slider) and writes what the curves then hold into the DOM for the test to read.
PROBE = """<script>
window.addEventListener('load', function () { setTimeout(function () {
  var controls = document.querySelector('.curve-controls');
  var select = controls.querySelector('select.colour-by');
  select.value = 'rl_config.init_kl_coef'; select.dispatchEvent(new Event('change'));
  var slider = controls.querySelector('input.smoothing');
  slider.value = '0.9'; slider.dispatchEvent(new Event('input'));
  var gd = document.getElementById('plot-curves'), out = document.createElement('pre');
  out.id = 'probe';
  out.textContent = JSON.stringify({
    traces: gd.data.map(function (t) { return {meta: t.meta || null, line: t.line ? t.line.color : null,
                                               fill: t.fillcolor || null, y: t.y}; }),
    colours: gd.layout.meta.colours['rl_config.init_kl_coef'],
    key: controls.querySelector('.colour-key').textContent});
  document.body.appendChild(out);
}, 0); });
</script>"""


def test_the_curve_controls_recolour_and_smooth_in_the_browser(rendered, tmp_path):
    import html
    import json

    page, _, _ = rendered
    probe = tmp_path / "probe.html"
    probe.write_text(page.replace("</body>", PROBE + "</body>"))
    run = chromium(tmp_path / "profile", "--dump-dom", probe.as_uri())
    assert run.returncode == 0, run.stderr[-2000:]
    found = re.search(r'<pre id="probe">(.*?)</pre>', run.stdout, re.S)
    assert found, "the probe did not run"
    state = json.loads(html.unescape(found.group(1)))
    colours = state["colours"]
    lines = [t for t in state["traces"] if t["meta"] and t["meta"]["k"] == "line"]
    bands = [t for t in state["traces"] if t["meta"] and t["meta"]["k"] == "band"]
    assert lines and bands
    assert all(t["line"] == colours[t["meta"]["t"]] for t in lines)  # every curve in its parameter's colour
    assert all(t["fill"].startswith("rgba(") for t in bands)
    assert "0.001" in state["key"] and "0.064" in state["key"]  # the colour key: the parameter's range
    # Smoothing: the original page's points, replaced by their moving average (the first point stays).
    original = json.loads(re.search(r'Plotly.newPlot\(\s*"plot-curves",\s*(\[.*?\]),\s*\{"', page, re.S).group(1))
    smoothed = 0
    for before, after in zip(original, state["traces"], strict=True):
        if before.get("meta", {}).get("s") and len(before["y"]) > 2 and len(set(before["y"])) > 1:
            assert after["y"][0] == pytest.approx(before["y"][0])
            smoothed += after["y"] != pytest.approx(before["y"])
    assert smoothed > 10
