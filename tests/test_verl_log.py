"""verl's file-logger JSONL as a metric stream: rows survive the truncation a resume does."""

import json

from grpo.sweep.backends.verl.log import VerlLogTail, latest_checkpoint


def _write(path, steps, mode="a"):
    with path.open(mode) as handle:
        for step in steps:
            handle.write(json.dumps({"step": step, "data": {"critic/score/mean": step / 10, "note": "x"}}) + "\n")


def test_tail_keeps_rows_across_resume_truncation(tmp_path):
    log = tmp_path / "trial.jsonl"
    tail = VerlLogTail(log)
    assert tail.poll() == []
    _write(log, [1, 2, 3], mode="w")
    assert [s for s, _ in tail.poll()] == [1, 2, 3]
    # a resume from global_step_2 reopens the log with "wb" and logs from step 3 on
    _write(log, [3], mode="w")
    assert [s for s, _ in tail.poll()] == [3]
    _write(log, [4])
    assert [s for s, _ in tail.poll()] == [4]
    assert sorted(tail.rows) == [1, 2, 3, 4]
    assert tail.rows[1] == {"critic/score/mean": 0.1}  # non-numeric values dropped


def test_partial_line_waits(tmp_path):
    log = tmp_path / "trial.jsonl"
    log.write_text('{"step": 1, "data": {"a": 1}}\n{"step": 2, "da')
    tail = VerlLogTail(log)
    assert [s for s, _ in tail.poll()] == [1]
    with log.open("a") as handle:
        handle.write('ta": {"a": 2}}\n')
    assert tail.poll() == [(2, {"a": 2.0})]


def test_latest_checkpoint(tmp_path):
    assert latest_checkpoint(tmp_path) is None
    (tmp_path / "global_step_4" / "actor").mkdir(parents=True)
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("4")
    assert latest_checkpoint(tmp_path) == tmp_path / "global_step_4"
