"""Population-based branching end to end on the real engine: a pbt study of the tiny GRPO model through a local
Ray and a journal, where every branch really continues from its parent's checkpoint, the lineage's curve is
stitched from its ancestors, and the exported winner replays its whole schedule with the engine from scratch.
Then the driver is SIGKILLed while a population runs and rerun: no segment lost or run twice."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest
import yaml
from optuna.trial import TrialState
from sweep_helpers import load, run_cli, start_cli, write_spec

from grpo.config import config_from_dict
from grpo.engine import train
from grpo.trial_attrs import BRANCH_OF, BRANCHED_AT, EXPLOITED, PBT_GENERATION, PBT_MEMBER, PBT_SETTINGS, SCHEDULE

LR, CLIP = "actor_config.lr", "rl_config.clip_ratio"


def pbt_spec(folder: Path, name: str, population: int = 3, train_iters: int = 6, interval: int = 2) -> Path:
    path = write_spec(
        folder,
        name=name,
        backend="embedded",
        overrides=[
            f"megatron_training.train_iters={train_iters}",
            f"megatron_training.save_interval={train_iters}",
            "engine.eval_every=2",
            "engine.eval_size=32",
        ],
        search={LR: "tag(log, interval(1e-5, 3e-4))", CLIP: "choice(0.1, 0.2, 0.3)"},
        objective={"metric": "eval/acc_greedy", "reduce": "auc"},
        sampler={"name": "random", "seed": 3},
        scheduler={
            "kind": "pbt",
            "population": population,
            "interval": interval,
            "quantile": 0.34,
            "explore": {"resample_probability": 0.5},
        },
        concurrency=2,
    )
    spec = yaml.safe_load(path.read_text())
    del spec["trials"], spec["pruner"]  # a pbt study's budget is its segments; its pruner is none
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def read_until(proc, marker: str) -> None:
    """The driver's lines until ``marker`` (a kill then lands at that moment of the population)."""
    assert proc.stdout is not None
    for line in proc.stdout:
        if marker in line:
            return
    raise AssertionError(f"the driver exited before printing {marker!r}")


def segments(study) -> dict[tuple[int, int], object]:
    return {
        (t.user_attrs[PBT_GENERATION], t.user_attrs[PBT_MEMBER]): t
        for t in study.trials
        if t.state == TrialState.COMPLETE and PBT_GENERATION in t.user_attrs
    }


def rows(trial) -> list[dict]:
    return [json.loads(line) for line in open(Path(trial.user_attrs["trial_dir"]) / "metrics.jsonl")]


@pytest.mark.slow
def test_pbt_study_branches_from_checkpoints_and_the_winner_replays_its_schedule(tmp_path):
    spec = pbt_spec(tmp_path, "pbt")
    done = run_cli(["run", str(spec), "--quiet"], cwd=tmp_path, timeout=900)
    assert done.returncode == 0, done.stdout + done.stderr
    study = load(tmp_path, "pbt")
    assert study.user_attrs[PBT_SETTINGS]["generations"] == 3
    found = segments(study)
    assert sorted(found) == [(g, m) for g in range(3) for m in range(3)]  # every segment, once
    assert len([t for t in study.trials if t.state == TrialState.COMPLETE]) == 9
    for (g, m), t in found.items():
        iterations = sorted({r["iteration"] for r in rows(t)})
        assert iterations == list(range(0, 2 * g + 3))  # the lineage's curve: the base policy, then 1..end
        if g == 0:
            assert BRANCH_OF not in t.user_attrs
            continue
        parent = study.trials[t.user_attrs[BRANCH_OF]]
        assert parent.user_attrs[PBT_GENERATION] == g - 1 and t.user_attrs[BRANCHED_AT] == 2 * g
        assert t.user_attrs[EXPLOITED] == (parent.user_attrs[PBT_MEMBER] != m)
        # the rows up to the branch are the parent's, the rest its own run's, resumed from the parent's checkpoint
        mine, theirs = rows(t), {r["iteration"]: r for r in rows(parent)}
        for r in mine:
            if r["iteration"] <= 2 * g:
                assert r["grpo/score/mean" if r["iteration"] else "eval/acc_greedy"] == pytest.approx(
                    theirs[r["iteration"]]["grpo/score/mean" if r["iteration"] else "eval/acc_greedy"]
                )
        log = (Path(t.user_attrs["trial_dir"]) / "runs" / "seed0" / "train.log").read_text()
        parent_ckpt = Path(parent.user_attrs["trial_dir"]) / "runs" / "seed0" / "ckpt" / f"iter_{2 * g:07d}"
        assert f"resumed from {parent_ckpt} at iteration {2 * g}" in log
        if not t.user_attrs[EXPLOITED]:
            assert t.params == parent.params  # a member that continues keeps its values
    assert any(t.user_attrs[EXPLOITED] for (g, _), t in found.items() if g > 0)  # the bottom member branched

    # The winner (a last-generation segment) exported: one config with its whole schedule, replayed from scratch.
    out = tmp_path / "best.yaml"
    best = run_cli(["best", str(spec), "--export", str(out)], cwd=tmp_path)
    assert best.returncode == 0, best.stderr
    exported = yaml.safe_load(out.read_text())
    number = json.loads(best.stdout)["number"]
    winner = study.trials[number]
    assert winner.user_attrs[PBT_GENERATION] == 2
    assert exported["actor_config"].get("load") in (None, "")
    assert exported.get("engine", {}).get("exit_interval") is None
    schedule = {k: {int(at): v for at, v in points.items()} for k, points in winner.user_attrs[SCHEDULE].items()}
    assert {k: {int(at): v for at, v in p.items()} for k, p in exported["schedule"].items()} == schedule
    cfg = config_from_dict(exported)
    replay = tmp_path / "replay"
    cfg.actor_config.save = str(replay / "ckpt")
    train(cfg, replay)
    replayed = {r["iteration"]: r for r in map(json.loads, (replay / "metrics.jsonl").read_text().splitlines())}
    lineage = {r["iteration"]: r for r in rows(winner)}
    assert sorted(replayed) == sorted(lineage)
    for it, r in lineage.items():
        for key in ("grpo/score/mean", "eval/acc_greedy", "actor/lr"):
            if key in r:
                assert replayed[it][key] == pytest.approx(r[key], rel=1e-5, abs=1e-6), (it, key)


@pytest.mark.slow
def test_a_killed_pbt_driver_resumes_with_no_segment_lost_or_run_twice(tmp_path):
    spec = pbt_spec(tmp_path, "pbtkill", population=2, train_iters=6, interval=2)
    for kill_after in ("pbt generation 1", "pbt generation 2"):
        proc = start_cli(["run", str(spec), "--no-report"], cwd=tmp_path)
        read_until(proc, kill_after)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    done = run_cli(["run", str(spec), "--no-report", "--quiet"], cwd=tmp_path, timeout=900)
    assert done.returncode == 0, done.stdout + done.stderr
    study = load(tmp_path, "pbtkill")
    found = segments(study)
    assert sorted(found) == [(g, m) for g in range(3) for m in range(2)]
    complete = [t for t in study.trials if t.state == TrialState.COMPLETE]
    assert len(complete) == 6  # no segment completed twice
    assert not [t for t in study.trials if t.state in (TrialState.RUNNING, TrialState.WAITING)]
