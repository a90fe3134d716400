"""PBT vs the shipped default vs random search at equal compute, real runs, winners judged on unseen prompts.

Three arms on the tiny CPU task (``grpo_trainer_tiny_cpu``, searching ``actor_config.lr`` and
``rl_config.clip_ratio`` as sweeps/quickstart.yaml does, with its objective: held-out greedy accuracy reduced as
it ships, the mean of the last 3 evaluations since 4fa2700, the AUC on 2026-12-05's run),
each a real study run by the product itself (``grpo-sweep run SPEC`` as a subprocess, on a spec built from
sweeps/quickstart.yaml and written to the work folder):

- ``random``: sampler random, pruner none, ``--runs`` trials of ``--iters`` iterations;
- ``default``: the shipped default, benchmarks/search_efficiency.py's ``DEFAULT_LABEL`` arm (2026-12-05's run:
  TPE with 3 random start-up trials + Hyperband + the collapse rule, then sweeps/quickstart.yaml's; since
  2026-12-07: TPE with 3 start-up trials + the median pruner from iteration 30 + the collapse rule, as
  sweeps/kl_study.yaml and sampling_study.yaml ship it);
  the study is rerun with a larger ``--trials`` until the iterations its trials actually ran (a pruned trial:
  its last reported step) reach the same budget, runs x iters (pruned trials cost less: it gets more trials);
- ``pbt``: ``scheduler: {kind: pbt, population: runs, interval: K, quantile: 0.25, explore: {...}}`` with
  pruner none and the collapse rule, sampler random; its compute is population x iters.

No arm has a confirmation stage (it would spend compute outside the budget). Each search (``--searches``)
varies ``sampler.seed`` and the base config's seeds (``megatron_training.seed`` =
``generate_config.sampling_config.seed``); search s uses the same seeds in every arm, so arms pair by search.

Judging: the winner of each search (``grpo.report.best.best_trial``) is rerun from its exported config
(``grpo.report.reproduce.exported_config``; a PBT winner's carries its ``schedule``) with ``--judge-seeds``
fresh seeds through ``grpo.engine.train``, and its final checkpoint is scored by greedy accuracy on
``--test-prompts`` test prompts that no run trained or was validated on: drawn from another seed than
``ArithmeticTask.split``'s (task_seed + 1: training, task_seed + 2: validation, task_seed: warm-start
demonstrations), excluding every one of those prompts.

Output: per arm the winner's mean test accuracy over searches with a 95 % bootstrap interval (over searches,
each the mean over its judge seeds), the compute spent (trial-iterations), and the paired differences
pbt - random and default - random with intervals; plus, from the replayed tabular benchmark
(benchmarks/search_efficiency.py's replay), the default's compute to reach random's final best at 8 runs.
A Markdown table on stdout, JSON in ``--out`` (default benchmarks/results/pbt_vs_search_<date>.json).
Resumable: a (arm, search) already in the JSON is skipped; an interrupted study resumes from its folder.

    nice -n 19 .venv/bin/python benchmarks/pbt_vs_search.py --arms random,default      # the full benchmark
    nice -n 19 .venv/bin/python benchmarks/pbt_vs_search.py --smoke --arms random     # ~2 min, to /tmp
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing as mp
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import date, datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
import yaml

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
TEMPLATE = ROOT / "sweeps" / "quickstart.yaml"
ARMS = ("random", "default", "pbt")
TEST_SEED_OFFSET = 7  # test prompts come from task_seed + 7: not a seed ArithmeticTask.split draws from
BASE_SEED = 1234  # the base config's; search s runs its study with BASE_SEED + 100 * s
JUDGE_SEED = 9000  # judge seeds: 9000 + 10 * s + k, never a seed a search ran


@dataclass(frozen=True)
class Settings:
    runs: int
    iters: int
    eval_every: int
    interval: int
    warmup: int
    judge_seeds: int
    test_prompts: int
    concurrency: int
    table_replays: int

    @property
    def budget(self) -> int:
        return self.runs * self.iters


FULL = Settings(runs=8, iters=80, eval_every=10, interval=20, warmup=10, judge_seeds=3, test_prompts=512,
                concurrency=2, table_replays=100)  # fmt: skip
SMOKE = Settings(runs=2, iters=6, eval_every=3, interval=3, warmup=3, judge_seeds=1, test_prompts=64,
                 concurrency=2, table_replays=4)  # fmt: skip


# ------------------------------------------------------------------------------------------------ specs
def spec_data(arm: str, search: int, st: Settings, work: Path) -> dict[str, Any]:
    """sweeps/quickstart.yaml changed for one arm and search: its search space, objective and base stay."""
    data = yaml.safe_load(TEMPLATE.read_text())
    name = f"{arm}_s{search}"
    seed = BASE_SEED + 100 * search
    data.update(
        study=name,
        storage=f"journal:{work / name / 'journal.log'}",
        overrides=[
            f"megatron_training.train_iters={st.iters}",
            f"megatron_training.save_interval={st.interval if arm == 'pbt' else max(st.iters // 2, 1)}",
            f"engine.eval_every={st.eval_every}",
            f"megatron_training.seed={seed}",
            f"generate_config.sampling_config.seed={seed}",
        ],
        concurrency=st.concurrency,
        seeds=1,
        retries=1,
        # Generous: the benchmark runs niced beside other work, and a starved trial must not time out.
        timeout_per_trial=4 * 3600,
        keep_final_checkpoints="none",  # the winner is retrained from its config for judging
        cluster={"address": "local", "num_cpus": st.concurrency},
        tracking={"wandb": "off", "tensorboard": False, "swanlab": "off"},
    )
    data.pop("confirm", None)
    data["sampler"] = {**data["sampler"], "seed": 1000 + search}
    collapse = data["pruner"]["collapse"]
    if arm == "random":
        data["sampler"] = {"name": "random", "seed": 1000 + search}
        data["pruner"] = {"name": "none"}
        data["trials"] = st.runs
    elif arm == "default":  # search_efficiency's shipped-default arm (kl_study's and sampling_study's search)
        sys.path.insert(0, str(HERE))
        import search_efficiency as se

        combo = next(c for c in se.COMBOS if c.label == se.DEFAULT_LABEL)
        data["sampler"] = {**combo.sampler, "seed": 1000 + search}
        data["pruner"] = {**combo.pruner, **({"collapse": collapse} if "collapse" in combo.pruner else {})}
        data["trials"] = st.runs  # raised until the budget is spent (run_default)
    else:
        data["sampler"] = {"name": "random", "seed": 1000 + search}
        data["pruner"] = {"name": "none", "collapse": collapse}
        data.pop("trials", None)  # a pbt study runs population x generations segment trials
        data["scheduler"] = {
            "kind": "pbt",
            "population": st.runs,
            "interval": st.interval,
            "quantile": 0.25,
            "explore": {"resample_probability": 0.25, "perturb": [0.8, 1.2]},
        }
    return data


def write_spec(arm: str, search: int, st: Settings, work: Path) -> Path:
    folder = work / f"{arm}_s{search}"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "spec.yaml"
    path.write_text(yaml.safe_dump(spec_data(arm, search, st, work), sort_keys=False))
    return path


def cli(args: list[str], cwd: Path, timeout: float) -> subprocess.CompletedProcess[str]:
    """``grpo-sweep ARGS`` as a user runs it (this checkout's code first on the path)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    return subprocess.run(
        [sys.executable, "-m", "grpo.cli", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )


def validate(arm: str, st: Settings, work: Path) -> str | None:
    """None when ``grpo-sweep validate`` accepts the arm's spec, else its error (e.g. no pbt driver yet)."""
    path = write_spec(arm, 0, st, work)
    done = cli(["validate", str(path)], cwd=path.parent, timeout=300)
    if done.returncode == 0:
        return None
    return (done.stderr.strip() or done.stdout.strip()).splitlines()[-1] if (done.stderr or done.stdout) else "?"


# ------------------------------------------------------------------------------------------------ studies
def load_study(path: Path) -> Any:
    import optuna

    from grpo.sweep.spec.load import load_spec
    from grpo.sweep.study.store import make_storage

    spec = load_spec(path)
    return optuna.load_study(study_name=spec.study, storage=make_storage(spec))


def trial_cost(trial: Any, iters: int) -> int:
    """Iterations a trial ran: all of them when complete, else its last reported step (a PBT segment: its
    steps past the iteration it branched at)."""
    from optuna.trial import TrialState

    from grpo.trial_attrs import BRANCHED_AT, PBT_GENERATION

    attrs = trial.user_attrs
    start = attrs.get(BRANCHED_AT)
    if start is None and attrs.get(PBT_GENERATION) is not None:
        start = 0  # generation 0 starts at iteration 0
    if start is not None:  # a PBT segment: [start, last step]
        last = trial.last_step
        return max(0, int(last) - int(start)) if last is not None else 0
    if trial.state == TrialState.COMPLETE:
        return iters
    return int(trial.last_step or 0)


def spent(study: Any, iters: int) -> tuple[int, int, int]:
    """(trial-iterations, trials that ran, pruned): repeats (never run) and confirmations left out."""
    from optuna.trial import TrialState

    from grpo.report.best import is_repeat
    from grpo.trial_attrs import CONFIRMATION_OF

    cost = ran = pruned = 0
    for t in study.get_trials(deepcopy=False):
        if is_repeat(t) or t.user_attrs.get(CONFIRMATION_OF) is not None or t.state == TrialState.WAITING:
            continue
        cost += trial_cost(t, iters)
        ran += 1
        pruned += t.state == TrialState.PRUNED
    return cost, ran, pruned


def counted(study: Any) -> int:
    """Finished search trials (complete or pruned), what ``trials`` counts."""
    from optuna.trial import TrialState

    from grpo.report.best import is_repeat

    done = (TrialState.COMPLETE, TrialState.PRUNED)
    return sum(1 for t in study.get_trials(deepcopy=False, states=done) if not is_repeat(t))


def run_arm(arm: str, search: int, st: Settings, work: Path, log: Any) -> dict[str, Any]:
    path = write_spec(arm, search, st, work)
    folder = path.parent
    t0 = time.perf_counter()
    rounds = 0
    trials = st.runs
    while True:
        args = ["run", str(path), "--quiet", "--no-report"] + (["--trials", str(trials)] if arm == "default" else [])
        done = cli(args, cwd=folder, timeout=6 * 3600)
        rounds += 1
        (folder / f"run{rounds}.log").write_text(done.stdout + done.stderr)
        study = load_study(path) if (work / folder.name / "journal.log").exists() else None
        cost, ran, pruned = spent(study, st.iters) if study is not None else (0, 0, 0)
        # Exit 1 with trials that ran: no complete trial (all pruned by hyperband or the collapse rule).
        if done.returncode != 0 and not (done.returncode == 1 and ran and arm != "random"):
            raise RuntimeError(f"{arm} search {search}: grpo-sweep exited {done.returncode}: {done.stderr[-1500:]}")
        log(f"  {arm} s{search} round {rounds}: {ran} trials ({pruned} pruned), {cost}/{st.budget} trial-iterations")
        if arm != "default" or cost >= st.budget:
            break
        have = counted(study)
        if have < trials:  # the driver stopped short of --trials: the space looks exhausted
            break
        # Conservative: as if every added trial ran in full, so the budget is overshot by less than one run.
        trials = have + max(1, math.ceil((st.budget - cost) / st.iters))
    wall = time.perf_counter() - t0
    return {"study": str(path), "rounds": rounds, "compute": cost, "trials": ran, "pruned": pruned, "wall_s": wall}


# ------------------------------------------------------------------------------------------------ judging
def test_examples(cfg: Any, count: int) -> list[Any]:
    """``count`` arithmetic prompts disjoint from the warm-start demonstrations, training and validation."""
    from grpo.engine.data import get_task

    eng = cfg.engine
    task = get_task(eng.task)
    train, held_out = task.split(eng.task_size, eng.eval_size, eng.task_seed)
    used = {task.operands(e) for e in [*task.demonstrations(eng.task_seed), *train, *held_out]}
    test = task.examples(count, eng.task_seed + TEST_SEED_OFFSET, exclude=used)
    assert not {task.operands(e) for e in test} & used
    return test


def greedy_accuracy(policy: Any, tokenizer: Any, cfg: Any, examples: list[Any], batch: int = 256) -> float:
    """Fraction of ``examples`` the policy answers correctly decoding greedily (the engine's evaluation)."""
    from grpo.engine import rewards
    from grpo.engine.prompt import build_prompt
    from grpo.engine.rollout import SamplingParams, generate

    policy.eval()
    ids = [tokenizer.encode(build_prompt(tokenizer, e)) for e in examples]
    room = cfg.generate_config.max_model_len - max(len(i) for i in ids)
    params = SamplingParams(max_tokens=min(cfg.generate_config.sampling_config.max_tokens, room), greedy=True)
    right = 0
    for lo in range(0, len(ids), batch):
        out = generate(policy, ids[lo : lo + batch], 1, params, tokenizer.stop_ids, tokenizer.pad_id,
                       tokenizer.vocab_size)  # fmt: skip
        texts = tokenizer.decode_batch(out.response_lists())
        right += sum(rewards.is_correct(t, e.label) for t, e in zip(texts, examples[lo : lo + batch], strict=True))
    return right / len(examples)


def checkpoint_policy(root: Path) -> tuple[Any, Any]:
    """The policy and tokenizer of the latest checkpoint under ``root`` (an ``actor_config.save`` folder)."""
    from grpo.engine.checkpoint import find_checkpoint
    from grpo.engine.hf_checkpoint import load_weights, read_model_args
    from grpo.engine.model import Qwen2
    from grpo.engine.tokenizer import build_task_tokenizer, load_tokenizer

    folder = find_checkpoint(root)
    if folder is None:
        raise RuntimeError(f"{root}: no checkpoint")
    policy = Qwen2(read_model_args(folder))
    load_weights(policy, folder)
    tok = load_tokenizer(folder) if (folder / "tokenizer.json").is_file() else build_task_tokenizer()
    return policy, tok


def base_accuracy(config: Path, count: int) -> float:
    """The warm-started base policy's greedy accuracy on the test prompts (where every run starts)."""
    import torch

    from grpo.config import load_config
    from grpo.engine.build import tokenizer_for
    from grpo.engine.data import get_task
    from grpo.engine.model import ModelArgs
    from grpo.engine.warm_start import default_cache_dir, warm_started_policy

    torch.set_num_threads(1)
    cfg = load_config(str(config))
    tok = tokenizer_for(cfg)
    eng = cfg.engine
    policy, _ = warm_started_policy(
        ModelArgs.from_model_config(cfg.model_arch), tok, get_task(eng.task), eng.task_seed, eng.warm_start_steps,
        cfg.megatron_training.init_method_std, default_cache_dir(eng.cache_dir),
    )  # fmt: skip
    return greedy_accuracy(policy, tok, cfg, test_examples(cfg, count))


def judge_one(job: tuple[str, int, int, str, str]) -> dict[str, Any]:
    """Train the exported config with a fresh seed, score its final policy on the test prompts (own process)."""
    config, seed, count, folder, code = job
    os.nice(19 - os.nice(0))
    sys.path.insert(0, code)
    import torch

    from grpo.config import load_config
    from grpo.engine import train

    run_dir = Path(folder) / f"seed{seed}"
    overrides = [
        f"megatron_training.seed={seed}",
        f"generate_config.sampling_config.seed={seed}",
        f"actor_config.save={run_dir / 'ckpt'}",
        "engine.keep_checkpoints=1",
        "engine.eval_every=null",  # validation prompts are not the judge: the test prompts below are
        "engine.num_threads=1",
    ]
    iters = int(yaml.safe_load(Path(config).read_text())["megatron_training"]["train_iters"])
    cfg = load_config(config, [*overrides, f"megatron_training.save_interval={iters}"])
    t0 = time.perf_counter()
    train(cfg, run_dir=run_dir)
    policy, tok = checkpoint_policy(run_dir / "ckpt")
    torch.set_num_threads(1)
    acc = greedy_accuracy(policy, tok, cfg, test_examples(cfg, count))
    return {"seed": seed, "test_acc_greedy": acc, "iterations": iters, "wall_s": round(time.perf_counter() - t0, 1)}


def judge(study_spec: Path, search: int, st: Settings, jobs: int) -> dict[str, Any]:
    from grpo.report.best import best_trial
    from grpo.report.reproduce import exported_config

    study = load_study(study_spec)
    best = best_trial(study)
    folder = study_spec.parent / "judge"
    folder.mkdir(exist_ok=True)
    config = folder / "best_config.yaml"
    if best is None:
        # No answer within the budget (every trial pruned): what the user has is the base policy, untrained
        # (search_efficiency.py scores such a replay as the worst configuration, in the same spirit).
        config.write_text(yaml.safe_dump(study.user_attrs["base_config"], sort_keys=False))
        acc = base_accuracy(config, st.test_prompts)
        return {"winner": None, "params": None, "search_value": None, "schedule": None, "judge": [],
                "test_acc_greedy": acc, "note": "no complete trial: scored as the untrained base policy"}  # fmt: skip
    body = exported_config(best, study.user_attrs.get("base_config"), study)
    if body is None:
        raise RuntimeError(f"{study_spec}: trial {best.number} has no recorded config")
    config.write_text(yaml.safe_dump(body, sort_keys=False))
    seeds = [JUDGE_SEED + 10 * search + k for k in range(st.judge_seeds)]
    work = [(str(config), s, st.test_prompts, str(folder), str(ROOT)) for s in seeds]
    with mp.get_context("spawn").Pool(min(jobs, len(work)), maxtasksperchild=1) as pool:
        runs = pool.map(judge_one, work)
    accs = [r["test_acc_greedy"] for r in runs]
    return {
        "winner": best.number,
        "params": best.params,
        "search_value": best.values[0] if best.values else None,
        "schedule": body.get("schedule"),
        "judge": runs,
        "test_acc_greedy": float(np.mean(accs)),
    }


# ------------------------------------------------------------------------------------------------ statistics
def bootstrap_mean(values: list[float], n: int = 10000) -> tuple[float, float, float]:
    """The mean and its 95 % percentile-bootstrap interval (seeded: the same results give the same text)."""
    x = np.asarray(values, dtype=float)
    if len(x) == 0:
        return (math.nan, math.nan, math.nan)
    rng = np.random.default_rng(0)
    boots = x[rng.integers(0, len(x), (n, len(x)))].mean(axis=1)
    lo, hi = np.percentile(boots, [2.5, 97.5])
    return float(x.mean()), float(lo), float(hi)


def t_interval(values: list[float]) -> tuple[float, float, float]:
    """The mean and its 95 % Student-t interval: with 3 searches the bootstrap's interval is too narrow (it
    never reaches past the extreme values), the t interval says how little 3 searches can tell apart."""
    from scipy import stats

    x = np.asarray(values, dtype=float)
    if len(x) < 2:
        return (float(x.mean()) if len(x) else math.nan, math.nan, math.nan)
    half = float(stats.t.ppf(0.975, len(x) - 1) * x.std(ddof=1) / math.sqrt(len(x)))
    return float(x.mean()), float(x.mean()) - half, float(x.mean()) + half


def table_compute_fraction(table: Path, replays: int, jobs: int) -> dict[str, Any] | None:
    """From the replayed tabular benchmark: the shipped default's compute to reach random's best at 8 runs,
    as a share of random's 8 runs (search_efficiency.py's statistic (c), its own replay)."""
    if not table.exists():
        return None
    sys.path.insert(0, str(HERE))
    import search_efficiency as se

    labels = ("random", se.DEFAULT_LABEL)  # the shipped default's arm (the "default" arm's search)
    index = {c.label: i for i, c in enumerate(se.COMBOS)}
    t = se.load_table(table)
    horizon = 24 * t.iters
    jobs_list = [(index[lb], s, horizon, "answer") for lb in labels for s in range(replays)]
    traces: dict[int, dict[int, Any]] = {index[lb]: {} for lb in labels}
    with mp.get_context("spawn").Pool(jobs, initializer=se._init_worker, initargs=(table,)) as pool:
        for i, s, trace, _ in pool.imap_unordered(se._replay_job, jobs_list, chunksize=4):
            traces[i][s] = trace
    ordered = {i: [tr[s] for s in range(replays)] for i, tr in traces.items()}
    rows = se.summarize(t, ordered, ordered[index["random"]])
    default = next(r for r in rows if r.label == labels[1])
    mid, lo, hi = default.fraction[8]
    return {
        "table": os.path.relpath(table, ROOT) if Path(table).resolve().is_relative_to(ROOT) else str(table),
        "table_commit": t.header.get("git_commit"),
        "replays": replays,
        "runs": 8,
        "iters_per_run": t.iters,
        "default_compute_to_random_best_at_8_runs": {"median": mid, "ci95": [lo, hi]},
        "target": "<= 1/3",
        "met": mid <= 1 / 3,
    }


def summarize(results: dict[str, Any], arms: list[str]) -> dict[str, Any]:
    per = results["searches"]
    out: dict[str, Any] = {}
    for arm in arms:
        recs = per.get(arm, {})
        accs = [recs[k]["test_acc_greedy"] for k in sorted(recs, key=int)]
        out[arm] = {
            "searches": len(accs),
            "test_acc_greedy": bootstrap_mean(accs),
            "test_acc_greedy_t95": t_interval(accs),
            "per_search": accs,
            "compute": float(np.mean([r["compute"] for r in recs.values()])) if recs else math.nan,
            "trials": float(np.mean([r["trials"] for r in recs.values()])) if recs else math.nan,
            "pruned": float(np.mean([r["pruned"] for r in recs.values()])) if recs else math.nan,
        }
    for arm in arms:
        if arm == "random" or "random" not in per:
            continue
        common = sorted(set(per.get(arm, {})) & set(per["random"]), key=int)
        diffs = [per[arm][k]["test_acc_greedy"] - per["random"][k]["test_acc_greedy"] for k in common]
        out[f"{arm}-random"] = {
            "searches": len(diffs),
            "difference": bootstrap_mean(diffs),
            "difference_t95": t_interval(diffs),
            "per_search": diffs,
        }
    return out


def real_summary(results: dict[str, Any], arms: list[str], path: Path) -> dict[str, Any]:
    """rliable statistics over the paired searches (benchmarks/_rliable.py), merged into ``path``."""
    sys.path.insert(0, str(HERE))
    from _rliable import iqm_interval, merge_summary, p_improvement, paired_difference

    per = results["searches"]
    part: dict[str, Any] = {}
    for arm in arms:
        keys = sorted(per[arm], key=int)
        accs = [per[arm][k]["test_acc_greedy"] for k in keys]
        rec: dict[str, Any] = {"searches": len(accs), "iqm": list(iqm_interval(accs))}
        if arm != "random" and per.get("random"):
            common = [k for k in keys if k in per["random"]]
            a = [per[arm][k]["test_acc_greedy"] for k in common]
            b = [per["random"][k]["test_acc_greedy"] for k in common]
            rec["minus_random"] = list(paired_difference(a, b))
            rec["p_beats_random"] = p_improvement(a, b)
            rec["paired_searches"] = len(common)
        part[arm] = rec
    part["settings"] = results["settings"]
    merge_summary("real", part, ROOT, path)
    return part


def fmt(stat: tuple[float, float, float] | list[float], digits: int = 3) -> str:
    mid, lo, hi = stat
    if math.isnan(mid):
        return "n/a"
    return f"{mid:.{digits}f} [{lo:.{digits}f}, {hi:.{digits}f}]"


def t95(stat: tuple[float, float, float] | list[float]) -> str:
    return "" if math.isnan(stat[1]) else f"[{stat[1]:.3f}, {stat[2]:.3f}]"


def markdown(summary: dict[str, Any], arms: list[str], st: Settings, base_acc: float | None) -> str:
    lines = [
        "| arm | searches | winner's test greedy accuracy (mean [bootstrap 95 %] [t 95 %]) | per search "
        "| compute (trial-iterations, mean) | budget | trials / pruned (mean) "
        "| difference to random (paired, mean [bootstrap 95 %] [t 95 %]) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for arm in arms:
        s = summary[arm]
        diff = summary.get(f"{arm}-random")
        lines.append(
            f"| {arm} | {s['searches']} | {fmt(s['test_acc_greedy'])} {t95(s['test_acc_greedy_t95'])} | "
            f"{', '.join(f'{v:.3f}' for v in s['per_search'])} | {s['compute']:.0f} | {st.budget} | "
            f"{s['trials']:.1f} / {s['pruned']:.1f} | "
            f"{fmt(diff['difference']) + ' ' + t95(diff['difference_t95']) if diff else '-'} |"
        )
    if base_acc is not None:
        lines.append(f"\nbase policy (warm start, before any GRPO) on the same test prompts: {base_acc:.3f}")
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------------ main
def save(path: Path, results: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(results, indent=1, default=str))
    tmp.replace(path)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--arms", default="random,default,pbt", help="comma-separated, of: " + ", ".join(ARMS))
    ap.add_argument("--searches", type=int, default=3, help="independent searches per arm (seeds of the search)")
    ap.add_argument("--runs", type=int, help="runs per search (PBT population); 8, smoke 2")
    ap.add_argument("--iters", type=int, help="iterations per run; 80 as quickstart, smoke 6")
    ap.add_argument("--interval", type=int, help="PBT interval K; 20, smoke 3")
    ap.add_argument("--judge-seeds", type=int, help="fresh seeds each winner is retrained with; 3, smoke 1")
    ap.add_argument("--test-prompts", type=int, help="test prompts (greedy accuracy); 512, smoke 64")
    ap.add_argument("--table-replays", type=int, help="replays of the tabular benchmark; 100 (0: skip)")
    ap.add_argument("--table", type=Path, default=HERE / "data" / "grpo_table.json.gz")
    ap.add_argument("--jobs", type=int, default=2, help="processes for judging and table replays")
    ap.add_argument("--work", type=Path, help="study folders (default: <tmp>/pbt_vs_search[_smoke])")
    ap.add_argument("--out", type=Path, help="results JSON (default: benchmarks/results/pbt_vs_search_<date>.json)")
    ap.add_argument("--smoke", action="store_true", help="2 runs x 6 iterations, 1 search, 1 judge seed, to /tmp")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(ROOT))

    arms = [a.strip() for a in args.arms.split(",") if a.strip()]
    unknown = [a for a in arms if a not in ARMS]
    if unknown:
        ap.error(f"--arms: unknown {', '.join(unknown)} (known: {', '.join(ARMS)})")
    st = SMOKE if args.smoke else FULL
    st = Settings(
        runs=args.runs or st.runs,
        iters=args.iters or st.iters,
        eval_every=st.eval_every,
        interval=args.interval or st.interval,
        warmup=st.warmup,
        judge_seeds=args.judge_seeds or st.judge_seeds,
        test_prompts=args.test_prompts or st.test_prompts,
        concurrency=st.concurrency,
        table_replays=st.table_replays if args.table_replays is None else args.table_replays,
    )
    searches = 1 if args.smoke else args.searches
    tmp = Path(tempfile.gettempdir())
    work = (args.work or tmp / ("pbt_vs_search_smoke" if args.smoke else "pbt_vs_search")).resolve()
    out = args.out or (
        tmp / "pbt_vs_search_smoke.json" if args.smoke else HERE / "results" / f"pbt_vs_search_{date.today()}.json"
    )
    work.mkdir(parents=True, exist_ok=True)

    def log(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    results: dict[str, Any] = json.loads(out.read_text()) if out.exists() else {}
    settings = {k: getattr(st, k) for k in Settings.__dataclass_fields__}

    def runs_alike(a: dict[str, Any]) -> dict[str, Any]:  # what makes searches comparable (not the replays)
        return {k: v for k, v in a.items() if k != "table_replays"}

    if results and runs_alike(results.get("settings") or {}) != runs_alike(settings):
        print(f"error: {out} holds results of other settings {results.get('settings')}; use another --out",
              file=sys.stderr)  # fmt: skip
        return 2
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    results.setdefault("what", "PBT vs the shipped default vs random search, equal compute, judged on test prompts")
    results.setdefault("created", datetime.now(timezone.utc).isoformat(timespec="seconds"))
    results.setdefault("git_commit", commit)
    results["settings"] = settings
    results.setdefault("searches", {})
    results.setdefault("skipped", {})

    t0 = time.perf_counter()
    for arm in arms:
        problem = validate(arm, st, work)
        if problem is not None:
            log(f"{arm}: skipped, grpo-sweep validate refuses its spec: {problem}")
            results["skipped"][arm] = problem
            save(out, results)
            continue
        results["skipped"].pop(arm, None)
        done = results["searches"].setdefault(arm, {})
        for s in range(searches):
            if str(s) in done:
                log(f"{arm} s{s}: in {out}, skipped")
                continue
            log(f"{arm} s{s}: searching ({st.runs} runs x {st.iters} iterations' budget)")
            rec = run_arm(arm, s, st, work, log)
            t1 = time.perf_counter()
            rec.update(judge(Path(rec["study"]), s, st, args.jobs))
            rec["judge_wall_s"] = round(time.perf_counter() - t1, 1)
            log(
                f"{arm} s{s}: winner trial {rec['winner']} {rec['params']}: test greedy {rec['test_acc_greedy']:.3f} "
                f"({rec['compute']} trial-iterations, search {rec['wall_s']:.0f}s, judge {rec['judge_wall_s']:.0f}s)"
            )
            done[str(s)] = rec
            results["updated"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
            save(out, results)

    if "base_test_acc_greedy" not in results and any(results["searches"].values()):
        first = next(r for recs in results["searches"].values() for r in recs.values())
        results["base_test_acc_greedy"] = base_accuracy(Path(first["study"]).parent / "judge" / "best_config.yaml",
                                                        st.test_prompts)  # fmt: skip
    if st.table_replays and "table" not in results:
        log(f"replaying the tabular benchmark ({st.table_replays} replays each of random and the default)")
        results["table"] = table_compute_fraction(args.table, st.table_replays, args.jobs)
    present = [a for a in ARMS if results["searches"].get(a)]
    results["summary"] = summarize(results, present)
    results["wall_s_this_run"] = round(time.perf_counter() - t0, 1)
    save(out, results)
    real_summary(results, present, out.with_name("search_summary.json"))

    print(markdown(results["summary"], present, st, results.get("base_test_acc_greedy")))
    for arm, why in results["skipped"].items():
        print(f"\n{arm}: not run: {why}")
    tab = results.get("table")
    if tab:
        frac = tab["default_compute_to_random_best_at_8_runs"]
        print(
            f"\ntabular benchmark ({tab['table_commit'][:10]}, {tab['replays']} replays): the shipped default needs "
            f"{frac['median']:.2f} [{frac['ci95'][0]:.2f}, {frac['ci95'][1]:.2f}] of random's compute at 8 runs to "
            f"reach random's best (target <= 1/3: {'met' if tab['met'] else 'not met'})"
        )
    print(f"\nresults: {os.path.relpath(out, ROOT) if out.resolve().is_relative_to(ROOT) else out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
