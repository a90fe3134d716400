"""What the model says: samples.jsonl read back, the first and last evaluation, shown escaped."""

from __future__ import annotations

import json
import re

import pytest
from report_fixtures import PAYLOAD, make_study

from grpo.report import write_report
from grpo.report.samples import PER_KIND, first_and_last, read_samples, samples_file, trial_samples


def _write(path, rows, tail=""):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows) + tail)


def _row(iteration, kind="greedy", response="<answer>7</answer>", **extra):
    return {"iteration": iteration, "kind": kind, "prompt": "What is 3+4?", "label": "7", "response": response,
            "reward": 1.0, "correct": True, **extra}


def test_first_and_last_evaluation_at_most_a_few_per_kind(tmp_path):
    rows = [_row(i, kind) for i in (0, 10, 20) for kind in ("sampled", "greedy") for _ in range(5)]
    path = tmp_path / "runs" / "seed0" / "samples.jsonl"
    _write(path, rows, tail='{"iteration": 30, "kind": "gre')  # a line cut off by a kill
    got = first_and_last(read_samples(path))
    assert list(got) == [0, 20]
    for samples in got.values():
        assert [s.kind for s in samples] == ["greedy"] * PER_KIND + ["sampled"] * PER_KIND  # greedy first


def test_the_first_seed_that_wrote_samples_is_read(tmp_path):
    _write(tmp_path / "runs" / "seed1" / "samples.jsonl", [_row(0, response="seed one")])
    _write(tmp_path / "runs" / "seed10" / "samples.jsonl", [_row(0, response="seed ten")])
    assert samples_file(tmp_path) == tmp_path / "runs" / "seed1" / "samples.jsonl"
    _write(tmp_path / "runs" / "seed0" / "samples.jsonl", [_row(0, response="seed zero")])
    assert trial_samples(tmp_path)[0][0].response == "seed zero"
    assert trial_samples(tmp_path / "missing") == {} and trial_samples(None) == {}


def test_bad_values_are_read_as_missing(tmp_path):
    path = tmp_path / "samples.jsonl"
    _write(path, [_row(0, reward="high", correct="yes"), _row(True), {"kind": "greedy"}])
    [sample] = read_samples(path)
    assert sample.reward is None and sample.correct is None


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("samples")
    study = make_study(tmp, payload=PAYLOAD, health=True)
    return write_report(study, tmp / "report").read_text()


def test_the_page_shows_the_winner_and_the_format_hacker_first_escaped(page):
    body = re.search(r'<section id="samples">.*?</section>', page, re.S).group(0)
    blocks = re.findall(r'<details class="samples"( open)?><summary>Trial <a href="#trial-(\d+)">#\d+</a> \(([^)]*)\)',
                        body)
    assert blocks[0] == (" open", "5", "winner")
    assert blocks[1] == ("", "6", "runner-up; flagged: reward_up_heldout_down")
    assert ("", "4", "flagged: length_pinned, format_without_accuracy") in blocks
    assert len(blocks) <= 6
    winner = body[: body.index("</details>")]
    assert "iterations 0 and 6" in winner
    assert "&lt;answer&gt;7&lt;/answer&gt;" in winner  # model output, escaped
    assert '<tr class="right"><td>6</td><td>greedy</td>' in winner and '<tr class="wrong"><td>0</td>' in winner
    hacker = body[body.index('href="#trial-4"'):]
    assert "&lt;answer&gt;&lt;/answer&gt;" in hacker[: hacker.index("</details>")]  # the tags, no answer
    assert PAYLOAD not in body and "&lt;script&gt;alert(1)&lt;/script&gt;" in body
