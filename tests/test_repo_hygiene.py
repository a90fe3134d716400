"""The repository as a newcomer meets it: no path of a development machine in code, docs or results (checkouts
come from an environment variable or an argument), and a README that is the short way in (what it is, the two
commands, the commands table, links) with every figure and its command in docs/benchmarks.md."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from grpo.sweep.spec.load import load_spec

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
BENCHMARKS = REPO / "docs" / "benchmarks.md"
# A development machine's places: its checkout (/work/main), its mirrors (/work/.mirror/...), a home folder.
MACHINE_PATH = re.compile(r"/work/|/\.mirror/|/home/[A-Za-z]|/Users/[A-Za-z]|(?<![\w.~])/root/")
QUICK_START = "bash .ci/setup && .venv/bin/grpo-sweep sweeps/quickstart.yaml"
TEST_COMMAND = "bash .ci/setup && .venv/bin/python -m pytest -q -n 2 --dist loadfile tests"
README_MAX_LINES = 120


def _tracked_text_files() -> list[Path]:
    try:
        listed = subprocess.run(["git", "-C", str(REPO), "ls-files", "-z"], capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout (an installed copy): no tracked files to read")
    files = []
    for name in listed.decode().split("\0"):
        path = REPO / name
        if not name or not path.is_file() or path.is_symlink() or path == Path(__file__):
            continue
        data = path.read_bytes()
        if b"\0" not in data[:8192]:  # text, not a binary (gzip tables, images)
            files.append(path)
    return files


def test_no_machine_path_in_code_docs_or_results():
    found = []
    for path in _tracked_text_files():
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if MACHINE_PATH.search(line):
                found.append(f"{path.relative_to(REPO)}:{number}: {line.strip()[:140]}")
    assert found == [], "paths of a development machine (cite the upstream source; take checkouts from an " \
        "environment variable or an argument):\n" + "\n".join(found)


def _links(markdown: str) -> list[str]:
    return [t for t in re.findall(r"\]\(([^)\s]+)\)", markdown) if not re.match(r"[a-z]+://|#|mailto:", t)]


@pytest.mark.parametrize("doc", ["README.md", "docs/benchmarks.md", "docs/usage.md"])
def test_every_relative_link_resolves(doc):
    path = REPO / doc
    for target in _links(path.read_text()):
        file = target.split("#", 1)[0]
        assert (path.parent / file).exists(), f"{doc}: link to {target}: no such file"


def test_the_readme_is_the_short_way_in():
    text = README.read_text()
    lines = text.splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines; figures and details go to docs/"
    assert QUICK_START in text and TEST_COMMAND in text  # exactly as .ci/run and users run them
    ci = (REPO / ".ci" / "run").read_text()
    assert TEST_COMMAND.split("&& ", 1)[1] in ci  # CI runs the README's test command
    headings = [line for line in lines if line.startswith("## ")]
    for wanted in ("## Install and quick start", "## Commands", "## Backends", "## Headline figures", "## Links"):
        assert wanted in headings, f"README.md: no {wanted!r} section"
    links = set(_links(text))
    backend_docs = sorted(p.relative_to(REPO).as_posix() for p in (REPO / "docs").glob("backend_*.md"))
    assert backend_docs and all(doc in links for doc in backend_docs), "the backend table links every backend doc"
    assert "docs/benchmarks.md" in links


def _tables(markdown: str) -> list[list[list[str]]]:
    """Each markdown table as rows of cells (the header first, the separator row left out)."""
    tables, current = [], []
    for line in [*markdown.splitlines(), ""]:
        if line.startswith("|"):
            if not re.fullmatch(r"\|(\s*:?-+:?\s*\|)+", line.strip()):
                current.append([cell.strip() for cell in line.strip().strip("|").split("|")])
        elif current:
            tables.append(current)
            current = []
    return tables


def test_every_figure_has_its_command():
    """The README keeps a short table of headline figures; each of its rows, and each row of every figure table in
    docs/benchmarks.md, names the command that prints the figure."""
    readme_tables = _tables(README.read_text())
    (headline,) = [t for t in readme_tables if t[0][-1] == "command" and t[0][0] == "what"]
    assert 3 <= len(headline) - 1 <= 10, "a short table: the rest lives in docs/benchmarks.md"
    assert max(len(t) for t in readme_tables) <= 12, "no long table in the README"
    figure_tables = [t for t in _tables(BENCHMARKS.read_text()) if t[0][-1] == "command"]
    assert figure_tables, "docs/benchmarks.md: no figure table"
    for table in [headline, *figure_tables]:
        for row in table[1:]:
            assert "`" in row[-1], f"a figure without its command: {row[0]}"


def test_the_readme_spec_sample_is_a_valid_spec(tmp_path):
    (sample,) = re.findall(r"```yaml\n(.*?)```", README.read_text(), re.S)
    path = tmp_path / "sample.yaml"
    path.write_text(sample)
    spec = load_spec(path)
    assert spec.search and spec.confirm is not None
