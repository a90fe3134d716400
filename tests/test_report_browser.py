"""The report in a real browser: headless Chromium opens index.html from disk, offline.

It must log no console message (no JS error, nothing blocked from the network), draw every plot (each
plot div holds plotly's SVG), leave the payload in user strings inert (no element was injected), and
render a screenshot. Skips only where Chromium is not installed (CI installs Debian's `chromium`).
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
    figures = re.findall(r'<div class="plot" id="plot-([\w-]+)"', page)
    assert len(figures) >= 7

    shot = tmp_path / "report.png"
    run = chromium(tmp_path / "profile", "--dump-dom", f"--screenshot={shot}", index.as_uri())
    assert run.returncode == 0, run.stderr[-2000:]
    console = [line for line in run.stderr.splitlines() if ":CONSOLE" in line]
    assert console == [], "console messages:\n" + "\n".join(console)
    dom = run.stdout
    # Every plot div was taken over by plotly and holds its SVG.
    for fig_id in figures:
        div = re.search(rf'<div class="plot[^"]*" id="plot-{fig_id}"[^>]*>(.*?)<script type="application/json"', dom, re.S)
        assert div, fig_id
        assert "js-plotly-plot" in div.group(0) and 'class="main-svg"' in div.group(1), fig_id
    # The payload stayed text: no <img src="x"> element, no extra <script> element.
    assert '<img src="x"' not in dom
    assert "&lt;img src=x" in dom
    assert len(re.findall(r"<script[\s>]", dom)) == len(re.findall(r"<script[\s>]", page))

    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 50_000
    width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    assert (width, height) == (1280, 2200)
    if os.environ.get("GRPO_REPORT_SCREENSHOT"):  # keep it to look at: GRPO_REPORT_SCREENSHOT=/tmp/report.png
        shutil.copy(shot, os.environ["GRPO_REPORT_SCREENSHOT"])
