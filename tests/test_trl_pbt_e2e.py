"""backend: trl, population-based branching end to end: a population of 2 real TRL GRPOTrainer runs over 2
generations through the real driver and a local Ray. Each generation-1 segment is a TRL run resumed
(``resume_from_checkpoint``) from its parent's ``checkpoint-N`` at the branch iteration, training with its
own (explored) learning rate; the lineage's curve starts with the parent's rows; the report is written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from optuna.trial import TrialState
from sweep_helpers import load, run_cli, write_spec

from grpo.trial_attrs import BRANCH_OF, BRANCHED_AT, EXPLOITED, PBT_GENERATION, PBT_MEMBER, PBT_SETTINGS

pytest.importorskip("trl", reason="trl not installed (pip install -e .[trl])")

LR = "actor_config.lr"
# 4 prompts x 4 samples, one optimizer step per iteration, held-out evaluation (16 prompts) at the generation
# ends; a constant learning rate without warmup (what a TRL branch needs to train with its own).
TINY = [
    "megatron_training.train_iters=4", "megatron_training.save_interval=4", "megatron_training.global_batch_size=4",
    "rl_config.mini_batch_size=4", "rl_config.n_samples_per_prompt=4", "actor_config.micro_batch_size=16",
    "rl_config.epochs=1", "generate_config.sampling_config.max_tokens=16", "engine.eval_every=2",
    "engine.eval_size=16", "engine.device=cpu", "actor_config.lr_warmup_fraction=0",
]  # fmt: skip


def rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.slow
def test_a_trl_pbt_branch_resumes_from_its_parents_checkpoint_with_its_own_lr(tmp_path):
    spec = write_spec(
        tmp_path, name="pbt", backend="trl", overrides=TINY, concurrency=2,
        search={LR: "tag(log, interval(1e-5, 1e-4))"}, sampler={"name": "random", "seed": 3},
        objective={"metric": "eval/acc_greedy", "direction": "maximize", "reduce": "last"},
        scheduler={"kind": "pbt", "population": 2, "interval": 2, "quantile": 0.5,
                   "explore": {"resample_probability": 1.0}},
    )  # fmt: skip
    raw = yaml.safe_load(spec.read_text())
    del raw["trials"], raw["pruner"]  # a pbt study's budget is its segments; its pruner is none
    spec.write_text(yaml.safe_dump(raw, sort_keys=False))

    done = run_cli(["run", str(spec), "--quiet"], cwd=tmp_path, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    study = load(tmp_path, "pbt")
    assert study.user_attrs[PBT_SETTINGS]["generations"] == 2
    complete = [t for t in study.trials if t.state == TrialState.COMPLETE]
    found = {(t.user_attrs[PBT_GENERATION], t.user_attrs[PBT_MEMBER]): t for t in complete}
    assert sorted(found) == [(0, 0), (0, 1), (1, 0), (1, 1)] and len(complete) == 4  # every segment, once
    for m in (0, 1):
        first, branch = found[(0, m)], found[(1, m)]
        assert BRANCH_OF not in first.user_attrs
        parent = study.trials[branch.user_attrs[BRANCH_OF]]
        assert parent.user_attrs[PBT_GENERATION] == 0 and branch.user_attrs[BRANCHED_AT] == 2
        assert branch.user_attrs[EXPLOITED] == (parent.user_attrs[PBT_MEMBER] != m)
        run_dir = Path(branch.user_attrs["trial_dir"]) / "runs" / "seed0"
        parent_ckpt = Path(parent.user_attrs["trial_dir"]).resolve() / "runs" / "seed0" / "ckpt" / "checkpoint-2"
        assert f"resume from {parent_ckpt}" in (run_dir / "train.log").read_text()  # TRL resumed that folder
        own = rows(run_dir / "metrics.jsonl")  # what the TRL run itself trained: iterations 3 and 4
        assert [r["iteration"] for r in own] == [3, 4]
        assert all(r["actor/lr"] == pytest.approx(branch.params[LR]) for r in own)  # its own lr, not the parent's
        # The lineage's curve: the parent's rows up to the branch (the base policy, 1, 2), then its own run's.
        lineage = {r["iteration"]: r for r in rows(Path(branch.user_attrs["trial_dir"]) / "metrics.jsonl")}
        theirs = {r["iteration"]: r for r in rows(Path(parent.user_attrs["trial_dir"]) / "metrics.jsonl")}
        assert sorted(lineage) == [0, 1, 2, 3, 4]
        assert [lineage[i]["eval/acc_greedy"] for i in (0, 2)] == [theirs[i]["eval/acc_greedy"] for i in (0, 2)]
        assert lineage[4]["eval/acc_greedy"] == own[-1]["eval/acc_greedy"]
        if not branch.user_attrs[EXPLOITED]:
            assert branch.params == parent.params  # a member that continues keeps its values
    (exploited,) = [t for (g, _), t in found.items() if g == 1 and t.user_attrs[EXPLOITED]]  # the bottom member
    assert exploited.params[LR] != study.trials[exploited.user_attrs[BRANCH_OF]].params[LR]  # explored
    assert (tmp_path / "reports" / "pbt" / "index.html").is_file()
