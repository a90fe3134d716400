"""A small real study for the report tests, written the way the sweep driver writes one.

``make_study(tmp_path)`` creates a real Optuna study in a JournalStorage under ``tmp_path`` through
Optuna's ask/tell API, with the study and trial user attrs of docs/contracts.md, intermediate values
per iteration, and trial dirs holding ``metrics.jsonl`` (one line per seed and iteration, MindSpeed-RL
metric names), ``config.yaml`` and ``train.log``. The trials:

    0 COMPLETE  healthy, 2 seeds (values_per_seed, value_spread)
    1 COMPLETE  entropy collapses                        -> entropy_collapse
    2 PRUNED    KL runs away, pruned at iteration 3      -> kl_blowup
    3 FAIL      failure_reason + last_log_lines; its trial dir was never created
    4 COMPLETE  format reward up, accuracy flat, length at max_tokens -> format_without_accuracy, length_pinned
    5 COMPLETE  healthy, best on accuracy
    6 RUNNING   (``running=True``) metrics.jsonl whose last line is cut off mid-write

``payload`` (e.g. ``<script>alert(1)</script>``) goes into the study name, a categorical parameter
value, the failure reason and a log line.

The study records ``base_config`` (the composed base config the report diffs trial configs against), as
the sweep does; ``base_config=False`` leaves it out, like a study made by an older grpo-sweep.
"""

from __future__ import annotations

import copy
import functools
import json
import math
from pathlib import Path

import optuna
from optuna.trial import TrialState

BASE = "grpo_trainer_tiny_cpu"
BASE_OVERRIDES = ["megatron_training.train_iters=6"]
MAX_TOKENS = 24
ITERATIONS = 6
PAYLOAD = "<script>alert(1)</script>"


@functools.lru_cache(maxsize=None)
def base_config_dict(base: str = BASE) -> dict:
    """The resolved base config (composed once per test session by the real config system)."""
    from grpo.config import load_config

    return load_config(base, overrides=list(BASE_OVERRIDES)).to_dict()


def _set(config: dict, dotted: str, value) -> None:
    node = config
    *parents, leaf = dotted.split(".")
    for key in parents:
        node = node.setdefault(key, {})
    node[leaf] = value


def _curves(kind: str, n: int) -> list[dict]:
    """Per-iteration metrics (iterations 1..n) of one seed, shaped to trigger ``kind``'s diagnostic."""
    rows = []
    for i in range(1, n + 1):
        f = i / n
        acc = 0.2 + 0.5 * f
        entropy = 1.2 - 0.3 * f
        kl = 0.002 * i
        fmt = 0.5 + 0.2 * f
        length = 12 + 4 * f
        if kind == "entropy":
            acc -= 0.05
            entropy = 1.2 * (0.02 if i > n // 2 else 1.0 - 0.2 * i)
        elif kind == "kl":
            acc += 0.1
            kl = 0.01 * math.exp(1.6 * i)  # 0.05, 0.25, 1.2 ...
        elif kind == "format":
            acc, fmt, length = 0.3, 0.1 + 0.8 * f, MAX_TOKENS - 0.5
        elif kind == "best":
            acc = 0.3 + 0.6 * f
        rows.append({
            "iteration": i,
            "grpo/score/mean": acc + 0.1 * fmt,
            "acc_rewards/mean": acc,
            "strict_format_rewards/mean": fmt,
            "actor/pg_loss": -0.01 * i,
            "actor/kl_loss": kl,
            "actor/entropy": entropy,
            "response_length/mean": length,
            "timing/all": 1.5,
            "e2e_tps": 900.0 + i,
        })
    return rows


def make_study(tmp_path: Path, name: str = "report_study", *, payload: str | None = None, multi: bool = False,
               running: bool = False, base: str = BASE, base_config: bool = True) -> optuna.Study:
    """The study described in the module docstring, in ``tmp_path/studies/<name>/journal.log``."""
    study_name = f"{name} {payload}" if payload else name
    study_dir = tmp_path / "studies" / name
    study_dir.mkdir(parents=True, exist_ok=True)
    storage = optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(str(study_dir / "journal.log")))
    goals = [{"metric": "acc_rewards/mean", "direction": "maximize", "reduce": "last", "k": None}]
    if multi:
        goals.append({"metric": "response_length/mean", "direction": "minimize", "reduce": "last", "k": None})
    study = optuna.create_study(study_name=study_name, storage=storage, directions=[g["direction"] for g in goals])
    spec = {
        "study": study_name, "base": base, "overrides": list(BASE_OVERRIDES),
        "search": {"rl_config.clip_ratio": "interval(0.1, 0.3)", "rl_config.init_kl_coef": "tag(log, interval(1e-3, 1e-1))",
                   "rl_config.n_samples_per_prompt": "choice(4, 8)", "layout": "choice(tp1_pp1_cpu, ...)"},
        "objective": goals if multi else goals[0],
        "sampler": {"name": "tpe", "seed": 0, "options": {}},
        "pruner": {"name": "median", "warmup_steps": 2, "options": {}},
        "seeds": 1, "backend": "embedded",
    }
    try:
        base_dict = base_config_dict(base)
    except Exception:  # a base the config system cannot compose: the trial configs start from the default
        base_dict, base_config = base_config_dict(BASE), False
    attrs = {"spec": spec, "spec_path": f"sweeps/{name}.yaml", "base": base, "objectives": goals,
             "sampler": "tpe", "pruner": "median", "study_dir": str(study_dir), "backend": "embedded"}
    if base_config:
        attrs["base_config"] = base_dict
    for key, value in attrs.items():
        study.set_user_attr(key, value)

    layout_choices = ["tp1_pp1_cpu", payload or "tp2_pp2"]
    plan = [("healthy", TrialState.COMPLETE), ("entropy", TrialState.COMPLETE), ("kl", TrialState.PRUNED),
            ("fail", TrialState.FAIL), ("format", TrialState.COMPLETE), ("best", TrialState.COMPLETE)]
    if running:
        plan.append(("running", TrialState.RUNNING))
    for k, (kind, state) in enumerate(plan):
        # Fixed parameters (enqueued, so the suggest calls return them): the tests know every value.
        study.enqueue_trial({
            "rl_config.clip_ratio": 0.1 + 0.03 * k,
            "rl_config.init_kl_coef": 0.001 * 2 ** k,
            "rl_config.n_samples_per_prompt": 4 if k % 2 else 8,
            "layout": layout_choices[1] if kind == "format" else layout_choices[0],
        })
        trial = study.ask()
        params = {
            "rl_config.clip_ratio": trial.suggest_float("rl_config.clip_ratio", 0.1, 0.3),
            "rl_config.init_kl_coef": trial.suggest_float("rl_config.init_kl_coef", 1e-3, 1e-1, log=True),
            "rl_config.n_samples_per_prompt": trial.suggest_categorical("rl_config.n_samples_per_prompt", [4, 8]),
            "layout": trial.suggest_categorical("layout", layout_choices),
        }
        config = copy.deepcopy(base_dict)
        for key, value in params.items():
            if key != "layout":
                _set(config, key, value)
        _set(config, "generate_config.sampling_config.max_tokens", MAX_TOKENS)
        trial_dir = study_dir / "trials" / str(trial.number)
        seeds = [1234, 1235] if kind == "healthy" else [1234]
        trial_attrs = {
            "overrides": [f"{k}={v}" for k, v in params.items()], "config": config, "seeds": seeds,
            "trial_dir": str(trial_dir), "attempt": 1, "start": "2025-01-01T00:00:00", "node": "node-a",
            "devices": ["cpu"],
        }
        for key, value in trial_attrs.items():
            trial.set_user_attr(key, value)
        if kind == "fail":
            trial.set_user_attr("failure_reason", f"engine exited with code 1: out of memory {payload or ''}".strip())
            trial.set_user_attr("last_log_lines", ["iteration 1 ...", f"RuntimeError: boom {payload or ''}".strip()])
            trial.set_user_attr("wall_s", 3.0)
            trial.set_user_attr("cpu_s", 2.5)
            study.tell(trial, state=TrialState.FAIL)
            continue  # its trial dir was never created

        n = 3 if kind == "kl" else (3 if kind == "running" else ITERATIONS)
        trial_dir.mkdir(parents=True)
        lines = []
        seed_rows = {}
        for s_index, seed in enumerate(seeds):
            rows = _curves(kind, n)
            if s_index:  # the second seed learns a little slower
                for row in rows:
                    row["acc_rewards/mean"] -= 0.05
            seed_rows[seed] = rows
            for row in rows:
                lines.append(json.dumps({"iteration": row["iteration"], "seed": seed,
                                         **{m: v for m, v in row.items() if m != "iteration"}}))
        text = "\n".join(lines) + "\n"
        if kind == "running":
            text += '{"iteration": 4, "seed": 1234, "acc_rew'  # the driver was killed mid-line
        (trial_dir / "metrics.jsonl").write_text(text)
        (trial_dir / "train.log").write_text("".join(f"iteration {i} done\n" for i in range(1, n + 1)))
        first = seed_rows[seeds[0]]
        if not multi:  # Optuna keeps intermediate values for single-objective studies only
            for row in first:
                trial.report(row["acc_rewards/mean"], step=row["iteration"])
        if kind == "running":
            continue
        cost = {"wall_s": 10.0 * n, "cpu_s": 9.0 * n * len(seeds), "npu_s": 0.0, "end": "2025-01-01T00:10:00"}
        for key, value in cost.items():
            trial.set_user_attr(key, value)
        if state == TrialState.PRUNED:
            trial.set_user_attr("pruned_reason", "pruned by the pruner on its learning curve")
            study.tell(trial, state=TrialState.PRUNED)
            continue
        per_seed_acc = [seed_rows[s][-1]["acc_rewards/mean"] for s in seeds]
        per_seed = [per_seed_acc]
        values = [sum(per_seed_acc) / len(per_seed_acc)]
        if multi:
            per_seed_len = [seed_rows[s][-1]["response_length/mean"] for s in seeds]
            per_seed.append(per_seed_len)
            values.append(sum(per_seed_len) / len(per_seed_len))
        spreads = [_pstdev(v) for v in per_seed]
        trial.set_user_attr("values_per_seed", per_seed)
        trial.set_user_attr("value_spread", spreads)
        study.tell(trial, values if multi else values[0])
    return optuna.load_study(study_name=study_name, storage=storage)


def _pstdev(values: list[float]) -> float:
    mean = sum(values) / len(values)
    return math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))
