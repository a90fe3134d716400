"""The report in a real browser: headless Chromium opens index.html from disk, offline.

It must log no console message (no JS error, nothing blocked from the network), draw every plot (each
plot div holds plotly's SVG with drawn marks in it), leave the payload in user strings inert (no element
was injected), and paint a screenshot that is not blank. Skips only where Chromium is not installed (CI
installs Debian's `chromium`).
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


def chromium(profile, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
           "--disable-background-networking", "--disable-component-update", "--disable-sync",
           "--disable-extensions", "--mute-audio", f"--user-data-dir={profile}", "--enable-logging=stderr", "--v=0",
           "--virtual-time-budget=10000", "--window-size=1280,2200", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


def test_report_renders_in_headless_chromium(tmp_path):
    study = make_study(tmp_path, payload=PAYLOAD, running=True)
    index = write_report(study, tmp_path / "report")
    page = index.read_text()
    figures = re.findall(r'<div id="plot-([\w-]+)" class="plotly-graph-div"', page)
    assert len(figures) >= 7

    shot = tmp_path / "report.png"
    run = chromium(tmp_path / "profile", "--dump-dom", f"--screenshot={shot}", index.as_uri())
    assert run.returncode == 0, run.stderr[-2000:]
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
    if os.environ.get("GRPO_REPORT_SCREENSHOT"):  # keep it to look at: GRPO_REPORT_SCREENSHOT=/tmp/report.png
        shutil.copy(shot, os.environ["GRPO_REPORT_SCREENSHOT"])


def _blank(path) -> bool:
    """True when the image is a single colour (Pillow comes with tensorboard, a dependency)."""
    from PIL import Image

    image = Image.open(path).convert("RGB")
    return all(low == high for low, high in image.getextrema())
