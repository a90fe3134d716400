"""Small real studies for the report tests, written the way the sweep driver writes one.

``make_study(tmp_path)`` creates a real Optuna study in a JournalStorage under ``tmp_path`` through
Optuna's ask/tell API, with the study and trial user attrs of docs/contracts.md, intermediate values
per iteration, and trial dirs holding ``metrics.jsonl`` (one line per seed and iteration, MindSpeed-RL
metric names; iteration 0 holds only the base policy's held-out evaluation, and the evaluation repeats
every ``EVAL_EVERY`` iterations), ``config.yaml``, ``train.log`` and, per seed, ``runs/seed<k>/samples.jsonl``.
The trials:

    0 COMPLETE  healthy, 2 seeds (values_per_seed, value_spread, value_interval)
    1 COMPLETE  entropy collapses                        -> entropy_collapse
    2 PRUNED    KL runs away, pruned at iteration 3      -> kl_blowup
    3 FAIL      failure_reason + last_log_lines; its trial dir was never created
    4 COMPLETE  format reward up, accuracy flat, responses truncated -> format_without_accuracy, length_pinned
    5 COMPLETE  healthy, best on accuracy
    6 RUNNING   (``running=True``) metrics.jsonl whose last line is cut off mid-write

Options add trials after those (numbers continue in this order):

- ``health=True``: ``overfit`` (training reward up, held-out accuracy down: reward_up_heldout_down),
  ``clip`` (clip_saturation), ``zero_var`` (zero_variance_groups), ``blowup`` (length_blowup), all COMPLETE.
- ``extra=n``: n more healthy COMPLETE trials whose final accuracy depends on ``init_kl_coef`` alone
  (so parameter importances have something to find).
- ``chain=True``: one logical trial run three times (a retry chain, as the driver records one): an
  attempt interrupted at iteration 3 (FAIL, checkpoint at 2), its retry (``retry_of``, ``resume_from``,
  ``resumed_at_iteration`` 2; it adopted the lines up to 2) failing at iteration 5 (checkpoint at 4), and
  the retry of that, resumed at 4, COMPLETE at 6. Each attempt's ``runs/seed0/ckpt/iter_<n>`` holds one
  ``CHECKPOINT_BYTES`` file (the numbers continue: 6, 7, 8 after the six trials above).
- ``confirm=True``: two confirmation trials (``confirmation_of``) re-running the two best search
  trials on the three fresh seeds ``CONFIRM_SEEDS``; the one confirming trial 5 wins.
- ``seeds=k``: every search trial runs k seeds (default: trial 0 two, the others one).
- ``limit=n``: only the first n trials of the table above (``limit=3``: a 3-trial study).
- ``environment=True``: the study's ``environment`` attr (python, platform, commit, packages).

``payload`` (e.g. ``<script>alert(1)</script>``) goes into the study name, a categorical parameter
value, the failure reason, a log line and a sampled response.

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

from grpo.report.stats import mean_interval

BASE = "grpo_trainer_tiny_cpu"
BASE_OVERRIDES = ["megatron_training.train_iters=6"]
MAX_TOKENS = 24
ITERATIONS = 6
EVAL_EVERY = 2
EVAL_PROMPTS = 64
PAYLOAD = "<script>alert(1)</script>"
CONFIRM_SEEDS = [2001, 2002, 2003]
CHECKPOINT_BYTES = 40_000  # one checkpoint file of a chain attempt (``chain=True``)
_CHAIN_PLAN = ((3, 2), (5, 4), (ITERATIONS, ITERATIONS))  # each attempt's (last iteration, checkpoint)
ENVIRONMENT = {"python": "3.11.9", "platform": "Linux-6.1-x86_64", "commit": "0123abcd",
               "packages": {"optuna": "5.1.0", "torch": "2.5.1", "plotly": "7.1.0"}}
# Training metrics per iteration (the held-out ones come every EVAL_EVERY iterations and at iteration 0).
TRAIN_METRICS = ("grpo/score/mean", "acc_rewards/mean", "grpo/acc/mean", "strict_format_rewards/mean",
                 "actor/pg_loss", "actor/kl_loss", "actor/entropy", "actor/pg_clipfrac", "actor/grad_norm",
                 "response_length/mean", "response_length/truncated", "grpo/zero_variance_groups", "timing/all",
                 "e2e_tps")
EVAL_METRICS = ("eval/acc_greedy", "eval/acc", "eval/prompts", "eval/strict_format")


@functools.cache
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


def _held_out(kind: str, i: int, n: int, quality: float) -> float:
    f = i / n
    if kind == "overfit":  # peaks mid-run, then falls well beyond the evaluation's noise
        return 0.3 + 0.4 * min(f, 0.5) * 2 - (0.5 if f > 0.5 else 0.0) * (f - 0.5) * 2
    if kind == "format":
        return 0.25
    return 0.2 + (quality - 0.2) * f


def _curves(kind: str, n: int, quality: float = 0.7, offset: float = 0.0) -> list[dict]:
    """Per-iteration metrics (iteration 0: held-out evaluation only; 1..n: training, and held-out every
    EVAL_EVERY) of one seed, shaped to trigger ``kind``'s diagnostic; ``offset`` shifts this seed's accuracy."""
    rows = []
    for i in range(0, n + 1):
        f = i / n
        row: dict = {"iteration": i}
        if i % EVAL_EVERY == 0 or i == n:
            greedy = _held_out(kind, i, n, quality) + offset
            row.update({"eval/acc_greedy": greedy, "eval/acc": greedy - 0.05, "eval/prompts": float(EVAL_PROMPTS),
                        "eval/strict_format": 0.5 + 0.4 * f})
        if i == 0:
            rows.append(row)
            continue
        acc = 0.2 + (quality - 0.2) * f
        entropy = 1.2 - 0.3 * f
        kl = 0.002 * i
        fmt = 0.5 + 0.2 * f
        length, truncated, zero_var, clip = 12 + 4 * f, 0.05, 0.2, 0.02
        if kind == "entropy":
            acc -= 0.05
            entropy = 1.2 * (0.02 if i > n // 2 else 1.0 - 0.2 * i)
        elif kind == "kl":
            acc += 0.1
            kl = 0.01 * math.exp(1.6 * i)  # 0.05, 0.25, 1.2 ...
        elif kind == "format":
            acc, fmt, length, truncated = 0.3, 0.1 + 0.8 * f, MAX_TOKENS - 0.5, 0.8
        elif kind == "best":
            acc = 0.3 + 0.6 * f
        elif kind == "overfit":
            acc = 0.3 + 0.55 * f  # the training reward keeps rising
        elif kind == "clip":
            clip = 0.35
        elif kind == "zero_var":
            zero_var = 0.3 + 0.6 * f
        elif kind == "blowup":
            length = 2 + 18 * f**2
        acc += offset
        row.update({
            "grpo/score/mean": acc + 0.1 * fmt,
            "acc_rewards/mean": acc,
            "grpo/acc/mean": acc,
            "strict_format_rewards/mean": fmt,
            "actor/pg_loss": -0.01 * i,
            "actor/kl_loss": kl,
            "actor/entropy": entropy,
            "actor/pg_clipfrac": clip,
            "actor/grad_norm": 0.5 + 0.05 * i,
            "response_length/mean": length,
            "response_length/truncated": truncated,
            "grpo/zero_variance_groups": zero_var,
            "timing/all": 1.5,
            "e2e_tps": 900.0 + i,
        })
        rows.append(row)
    return rows


def _samples(kind: str, rows: list[dict], payload: str | None) -> list[dict]:
    """samples.jsonl lines: at each evaluation, two held-out prompts, greedy and sampled."""
    out = []
    for row in rows:
        if "eval/acc_greedy" not in row:
            continue
        it = row["iteration"]
        for p, (a, b) in enumerate(((3, 4), (12, 30))):
            for decoding in ("greedy", "sampled"):
                right = it > 0 and kind != "format"
                answer = a + b if right else a + b + 1
                response = (f"<think>{a}+{b}</think><answer>{answer}</answer>" if kind != "format" or it == 0
                            else "<answer></answer>")  # format hacking: the tags, no answer
                if payload and p == 1 and decoding == "sampled":
                    response += payload
                out.append({"iteration": it, "kind": decoding, "prompt": f"What is {a}+{b}?", "label": str(a + b),
                            "response": response, "reward": 1.0 if right else -0.5, "correct": right})
    return out


def make_study(tmp_path: Path, name: str = "report_study", *, payload: str | None = None, multi: bool = False,
               running: bool = False, base: str = BASE, base_config: bool = True, health: bool = False,
               extra: int = 0, confirm: bool = False, seeds: int | None = None, limit: int | None = None,
               environment: bool = False, chain: bool = False) -> optuna.Study:
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
        "search": {"rl_config.clip_ratio": "interval(0.1, 0.3)",
                   "rl_config.init_kl_coef": "tag(log, interval(1e-3, 1e-1))",
                   "rl_config.n_samples_per_prompt": "choice(4, 8)", "layout": "choice(tp1_pp1_cpu, ...)"},
        "objective": goals if multi else goals[0],
        "sampler": {"name": "tpe", "seed": 0, "options": {}},
        "pruner": {"name": "median", "warmup_steps": 2, "options": {}},
        "seeds": seeds or 1, "backend": "embedded",
    }
    if confirm:
        spec["confirm"] = {"top_k": 2, "seeds": len(CONFIRM_SEEDS)}
    try:
        base_dict = base_config_dict(base)
    except Exception:  # a base the config system cannot compose: the trial configs start from the default
        base_dict, base_config = base_config_dict(BASE), False
    attrs = {"spec": spec, "spec_path": f"sweeps/{name}.yaml", "base": base, "objectives": goals,
             "sampler": "tpe", "pruner": "median", "study_dir": str(study_dir), "backend": "embedded"}
    if base_config:
        attrs["base_config"] = base_dict
    if environment:
        attrs["environment"] = ENVIRONMENT
    for key, value in attrs.items():
        study.set_user_attr(key, value)

    layout_choices = ["tp1_pp1_cpu", payload or "tp2_pp2"]
    plan = [("healthy", TrialState.COMPLETE), ("entropy", TrialState.COMPLETE), ("kl", TrialState.PRUNED),
            ("fail", TrialState.FAIL), ("format", TrialState.COMPLETE), ("best", TrialState.COMPLETE)]
    if running:
        plan.append(("running", TrialState.RUNNING))
    if health:
        plan += [(kind, TrialState.COMPLETE) for kind in ("overfit", "clip", "zero_var", "blowup")]
    plan += [("extra", TrialState.COMPLETE)] * extra
    if limit is not None:
        plan = plan[:limit]
    made: dict[int, tuple[str, dict, float]] = {}  # search trial -> (kind, params, value)
    for k, (kind, state) in enumerate(plan):
        # Fixed parameters (enqueued, so the suggest calls return them): the tests know every value.
        params = {
            "rl_config.clip_ratio": 0.1 + (0.03 * k if k < 7 else 0.2 * ((7 * k) % 11) / 11),
            "rl_config.init_kl_coef": 0.001 * 2 ** (k if k < 7 else k % 7),
            "rl_config.n_samples_per_prompt": 4 if k % 2 else 8,
            "layout": layout_choices[1] if kind == "format" else layout_choices[0],
        }
        quality = 0.9 if kind == "best" else 0.7
        if kind == "extra":  # accuracy rises with init_kl_coef alone, plus a little noise from the clip ratio
            quality = 0.4 + 0.06 * math.log2(params["rl_config.init_kl_coef"] / 0.001) + 0.01 * (k % 3)
        run_seeds = [1234 + j for j in range(seeds)] if seeds else ([1234, 1235] if kind == "healthy" else [1234])
        number, value = _add_trial(study, study_dir, kind, state, params, layout_choices, base_dict, run_seeds,
                                   quality, multi, payload, offsets=[0.0, -0.05, 0.02, -0.03])
        if value is not None:
            made[number] = (kind, params, value)
    if chain:
        _add_chain(study, study_dir, layout_choices, base_dict)
    if confirm:
        top = sorted(made.items(), key=lambda kv: -kv[1][2])[:2]
        offsets = {0: [0.0, -0.02, 0.01], 1: [0.01, -0.03, 0.0]}
        for rank, (number, (kind, params, _)) in enumerate(top):
            _add_trial(study, study_dir, kind, TrialState.COMPLETE, params, layout_choices, base_dict, CONFIRM_SEEDS,
                       0.9 if kind == "best" else 0.7, multi, payload, offsets=offsets[rank], confirmation_of=number)
    return optuna.load_study(study_name=study_name, storage=storage)


def _add_trial(study, study_dir, kind, state, params, layout_choices, base_dict, seeds, quality, multi, payload,
               offsets, confirmation_of=None) -> tuple[int, float | None]:
    """One trial as the driver records it; returns its number and (first) value when it completed."""
    study.enqueue_trial(params)
    trial = study.ask()
    got = {
        "rl_config.clip_ratio": trial.suggest_float("rl_config.clip_ratio", 0.1, 0.3),
        "rl_config.init_kl_coef": trial.suggest_float("rl_config.init_kl_coef", 1e-3, 1e-1, log=True),
        "rl_config.n_samples_per_prompt": trial.suggest_categorical("rl_config.n_samples_per_prompt", [4, 8]),
        "layout": trial.suggest_categorical("layout", layout_choices),
    }
    config = copy.deepcopy(base_dict)
    for key, value in got.items():
        if key != "layout":
            _set(config, key, value)
    _set(config, "generate_config.sampling_config.max_tokens", MAX_TOKENS)
    _set(config, "megatron_training.seed", seeds[0])
    _set(config, "actor_config.save", str(study_dir / "trials" / str(trial.number) / "runs" / "seed0" / "ckpt"))
    trial_dir = study_dir / "trials" / str(trial.number)
    trial_attrs = {
        "overrides": [f"{k}={v}" for k, v in got.items()], "config": config, "seeds": seeds,
        "trial_dir": str(trial_dir), "attempt": 1, "start": "2025-01-01T00:00:00", "node": "node-a",
        "devices": ["cpu"], "resources": {"num_cpus": 1},
    }
    if confirmation_of is not None:
        trial_attrs["confirmation_of"] = confirmation_of
    for key, value in trial_attrs.items():
        trial.set_user_attr(key, value)
    if kind == "fail":
        trial.set_user_attr("failure_reason", f"engine exited with code 1: out of memory {payload or ''}".strip())
        trial.set_user_attr("last_log_lines", ["iteration 1 ...", f"RuntimeError: boom {payload or ''}".strip()])
        trial.set_user_attr("wall_s", 3.0)
        trial.set_user_attr("cpu_s", 2.5)
        study.tell(trial, state=TrialState.FAIL)
        return trial.number, None  # its trial dir was never created

    n = 3 if kind in ("kl", "running") else ITERATIONS
    trial_dir.mkdir(parents=True)
    lines = []
    seed_rows = {}
    for s_index, seed in enumerate(seeds):
        rows = _curves("best" if kind == "best" else kind, n, quality, offsets[s_index % len(offsets)])
        seed_rows[seed] = rows
        for row in rows:
            lines.append(json.dumps({"iteration": row["iteration"], "seed": seed,
                                     **{m: v for m, v in row.items() if m != "iteration"}}))
        run_dir = trial_dir / "runs" / f"seed{s_index}"
        run_dir.mkdir(parents=True)
        (run_dir / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in _samples(kind, rows, payload)))
    text = "\n".join(lines) + "\n"
    if kind == "running":
        text += '{"iteration": 4, "seed": 1234, "acc_rew'  # the driver was killed mid-line
    (trial_dir / "metrics.jsonl").write_text(text)
    (trial_dir / "train.log").write_text("".join(f"iteration {i} done\n" for i in range(1, n + 1)))
    first = [r for r in seed_rows[seeds[0]] if r["iteration"] > 0]
    if not multi:  # Optuna keeps intermediate values for single-objective studies only
        for row in first:
            trial.report(row["acc_rewards/mean"], step=row["iteration"])
    if kind == "running":
        return trial.number, None
    cost = {"wall_s": 10.0 * n, "cpu_s": 9.0 * n * len(seeds), "npu_s": 0.0, "end": "2025-01-01T00:10:00"}
    for key, value in cost.items():
        trial.set_user_attr(key, value)
    if state == TrialState.PRUNED:
        trial.set_user_attr("pruned_reason", "pruned by the pruner on its learning curve")
        study.tell(trial, state=TrialState.PRUNED)
        return trial.number, None
    per_seed_acc = [seed_rows[s][-1]["acc_rewards/mean"] for s in seeds]
    per_seed = [per_seed_acc]
    if multi:
        per_seed.append([seed_rows[s][-1]["response_length/mean"] for s in seeds])
    values = [sum(v) / len(v) for v in per_seed]
    trial.set_user_attr("values_per_seed", per_seed)
    trial.set_user_attr("value_spread", [_pstdev(v) for v in per_seed])
    intervals = [mean_interval(v) for v in per_seed]
    trial.set_user_attr("value_interval", [[i.low, i.high] if i.low is not None else None for i in intervals])
    study.tell(trial, values if multi else values[0])
    return trial.number, values[0]


def _add_chain(study, study_dir, layout_choices, base_dict) -> list[int]:
    """The ``chain=True`` trials (see the module docstring); returns their numbers."""
    params = {"rl_config.clip_ratio": 0.27, "rl_config.init_kl_coef": 0.004, "rl_config.n_samples_per_prompt": 8,
              "layout": layout_choices[0]}
    rows = _curves("healthy", ITERATIONS, 0.75)
    numbers: list[int] = []
    previous_dir = None
    for k, (stop, ckpt) in enumerate(_CHAIN_PLAN):
        study.enqueue_trial(params)
        trial = study.ask()
        trial.suggest_float("rl_config.clip_ratio", 0.1, 0.3)
        trial.suggest_float("rl_config.init_kl_coef", 1e-3, 1e-1, log=True)
        trial.suggest_categorical("rl_config.n_samples_per_prompt", [4, 8])
        trial.suggest_categorical("layout", layout_choices)
        trial_dir = study_dir / "trials" / str(trial.number)
        config = copy.deepcopy(base_dict)
        _set(config, "actor_config.save", str(trial_dir / "runs" / "seed0" / "ckpt"))
        attrs = {"overrides": [f"{k}={v}" for k, v in params.items()], "config": config, "seeds": [1234],
                 "trial_dir": str(trial_dir), "attempt": 1 if k < 2 else 2, "node": "node-a",
                 "resources": {"num_cpus": 1}, "wall_s": 10.0 * stop, "cpu_s": 9.0 * stop}
        if previous_dir is not None:  # a retry: it resumed from the attempt before at that one's checkpoint
            attrs.update(retry_of=numbers[-1], resume_from=str(previous_dir),
                         resumed_at_iteration={"1234": _CHAIN_PLAN[k - 1][1]})
        for key, value in attrs.items():
            trial.set_user_attr(key, value)
        mine = rows[: stop + 1]  # adopted lines up to the checkpoint, then its own (the same curve)
        (trial_dir / "runs" / "seed0" / "ckpt" / f"iter_{ckpt:07d}").mkdir(parents=True)
        (trial_dir / "runs" / "seed0" / "ckpt" / f"iter_{ckpt:07d}" / "model.bin").write_bytes(
            b"\1" * CHECKPOINT_BYTES)
        (trial_dir / "metrics.jsonl").write_text(
            "".join(json.dumps({"iteration": r["iteration"], "seed": 1234, **{m: v for m, v in r.items()
                                                                                if m != "iteration"}}) + "\n"
                    for r in mine))
        (trial_dir / "train.log").write_text(f"iteration {stop} done\n")
        for r in mine[1:]:
            trial.report(r["acc_rewards/mean"], step=r["iteration"])
        if k < 2:
            reason = "driver died (lease expired)" if k == 0 else "engine exited with code 1: out of memory"
            trial.set_user_attr("failure_reason", reason)
            trial.set_user_attr("retried", True)
            study.tell(trial, state=TrialState.FAIL)
        else:
            value = mine[-1]["acc_rewards/mean"]
            trial.set_user_attr("values_per_seed", [[value]])
            trial.set_user_attr("value_spread", [0.0])
            study.tell(trial, value)
        numbers.append(trial.number)
        previous_dir = trial_dir
    return numbers


def _pstdev(values: list[float]) -> float:
    mean = sum(values) / len(values)
    return math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))
