"""The study driver: Optuna ask/tell in one loop, trials dispatched asynchronously to Ray.

    spec -> (config + search space) -> study -> scheduler -> backend runs trial -> metrics -> storage

One loop iteration: reap trials of dead drivers (periodically), fill free slots (ask, build the trial's
configs, prune infeasible points at once, submit), poll Ray for metrics (persist them, report intermediate
values, stop pruned trials) and finished trials (tell), beat the heartbeat. A finished trial frees its slot
at once; there are no batch barriers. The study stops at ``spec.trials`` trials that count (see
``retry.counts_toward_budget``), counted in storage, so several drivers on one study share the budget.
"""

from __future__ import annotations

import json
import math
import signal
import statistics
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import optuna
import yaml
from optuna.trial import TrialState

from grpo.errors import UserError
from grpo.sweep import lease
from grpo.sweep.retry import counts_toward_budget, fail_and_maybe_retry
from grpo.sweep.worker import SeedRun, TrialJob

_Dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)  # libyaml when present: 10x faster
POLL_S = 0.05
TIMEOUT_KILL_GRACE_S = 30.0
MAX_INFEASIBLE_IN_A_ROW = 200


@dataclass
class _Live:
    """A trial this driver runs: its Optuna handle and the curves streamed back so far."""

    trial: optuna.Trial
    number: int
    params: dict
    trial_dir: Path
    options: dict
    job: TrialJob
    started_wall: float
    curves: dict = field(default_factory=dict)  # seed -> metric -> list[(iteration, value)]
    last_iteration: dict = field(default_factory=dict)  # seed -> iteration
    stop_reason: str | None = None
    submitted: bool = False


class _Interrupt:
    """First Ctrl-C: stop sampling, let running trials stop cleanly. Second: stop now."""

    def __init__(self):
        self.count = 0
        self._old = None

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            self._old = signal.signal(signal.SIGINT, self._handle)
        return self

    def _handle(self, signum, frame):
        self.count += 1
        if self.count == 1:
            print(
                "\ninterrupt: no new trials; running trials stop at their next iteration (Ctrl-C again to stop now)",
                flush=True,
            )

    def __exit__(self, *exc):
        if self._old is not None:
            signal.signal(signal.SIGINT, self._old)


def forked(spec, name: str):
    """The spec as a new study called ``name`` (``--fork``): same search, fresh storage and trial dirs."""
    import re

    if not re.fullmatch(r"[A-Za-z0-9_-]+", name):
        raise UserError(f"--fork: study names use letters, digits, '-' and '_' only (got {name!r})")
    return spec.model_copy(update={"study": name})


def run_study(
    spec, *, fork: str | None = None, no_plan: bool = False, quiet: bool = True, progress=None
) -> optuna.Study:
    """Run or resume ``spec``'s study until it has ``spec.trials`` counted trials; return the study."""
    from grpo.sweep.backends.registry import load_backend
    from grpo.sweep.preflight import preflight
    from grpo.sweep.samplers import make_pruner, make_sampler
    from grpo.sweep.space import SearchSpace
    from grpo.sweep.study_store import open_study

    if fork:
        spec = forked(spec, fork)
    space = SearchSpace.from_spec(spec)
    backend = load_backend(spec.backend)
    preflight(spec, space, backend, no_plan=no_plan)  # raises UserError before anything is written
    study, resumed = open_study(spec)
    study.sampler = make_sampler(spec, space)
    study.pruner = make_pruner(spec)
    driver = _Driver(spec, space, backend, study, no_plan=no_plan, quiet=quiet, progress=progress)
    driver.loop()
    study.set_user_attr("interrupted", driver.interrupted)  # read by `grpo-sweep run` for its exit code
    return study


class _Driver:
    def __init__(self, spec, space, backend, study, *, no_plan, quiet, progress):
        self.spec, self.space, self.backend, self.study = spec, space, backend, study
        self.no_plan, self.quiet, self.progress = no_plan, quiet, progress
        self.me = lease.new_driver_identity()
        self.live: dict[int, _Live] = {}
        self.pending: _Live | None = None  # asked, but waiting for room on the cluster
        self.multi = len(spec.objectives) > 1
        self._base_cfg = None
        self.interrupted = False
        from grpo.sweep.objectives import get_reducer

        self.reducers = [get_reducer(o.reduce, getattr(o, "k", None)) for o in spec.objectives]

    # -- budget ---------------------------------------------------------------------------------------
    def _counted_and_running(self) -> tuple[int, int]:
        trials = self.study.get_trials(deepcopy=False)
        counted = sum(1 for t in trials if counts_toward_budget(t))
        running = sum(1 for t in trials if t.state == TrialState.RUNNING and not t.user_attrs.get("infeasible"))
        return counted, running

    def _budget_left(self) -> int:
        counted, running = self._counted_and_running()
        return self.spec.trials - counted - running

    # -- main loop ------------------------------------------------------------------------------------
    def loop(self) -> None:
        from grpo.sweep.scheduler import RayScheduler

        lease.reap(self.study, self.me, self.spec.retries)
        cluster = self.spec.cluster
        self.sched = RayScheduler(
            address=cluster.address,
            num_cpus=getattr(cluster, "num_cpus", None),
            resources=dict(getattr(cluster, "resources", None) or {}),
        )
        last_beat = last_reap = time.monotonic()
        infeasible_in_a_row = 0
        with _Interrupt() as interrupt:
            try:
                while True:
                    if interrupt.count == 1:
                        for live in self.live.values():
                            if live.stop_reason is None:
                                live.stop_reason = "interrupted"
                                self.sched.stop(live.number, "interrupted")
                    elif interrupt.count >= 2:
                        for number in list(self.live):
                            self.sched.kill(number)
                    if interrupt.count == 0:
                        infeasible_in_a_row = self._fill_slots(infeasible_in_a_row)
                    if not self.live and self.pending is None:
                        if interrupt.count or self._budget_left() <= 0:
                            break
                        if self.spec.concurrency <= 0:
                            break
                    finished, events = self.sched.poll(POLL_S if self.live else 0.01)
                    for number, evs in events.items():
                        self._on_events(number, evs)
                    for fin in finished:
                        self._on_finished(fin)
                    self._check_timeouts()
                    now = time.monotonic()
                    if now - last_beat > lease.HEARTBEAT_EVERY_S:
                        lease.beat(self.study, [lv.trial._trial_id for lv in self.live.values()])
                        last_beat = now
                    if now - last_reap > lease.STALE_AFTER_S:
                        lease.reap(self.study, self.me, self.spec.retries)
                        last_reap = now
                    if self.progress is not None:
                        self.progress.update(self)
            finally:
                self.interrupted = interrupt.count > 0
                self._abandon_pending()
                self.sched.shutdown()

    # -- asking ---------------------------------------------------------------------------------------
    def _fill_slots(self, infeasible_in_a_row: int) -> int:
        while len(self.live) < self.spec.concurrency:
            if self.pending is None:
                if self._budget_left() <= 0:
                    return infeasible_in_a_row
                live, problem = self._ask()
                if live is None:
                    if problem is None:  # lost the race for the last budget slot to another driver
                        return infeasible_in_a_row
                    infeasible_in_a_row += 1
                    if infeasible_in_a_row >= MAX_INFEASIBLE_IN_A_ROW:
                        raise UserError(
                            f"{self.spec.path}: search: {MAX_INFEASIBLE_IN_A_ROW} sampled points in a row broke a "
                            f"config rule; last: {problem}"
                        )
                    continue
                infeasible_in_a_row = 0
                self.pending = live
            live = self.pending
            if not self.sched.fits(live.options):  # wait for room: ours frees as trials end
                return infeasible_in_a_row
            self.pending = None
            self._submit(live)
        return infeasible_in_a_row

    def _ask(self) -> tuple[_Live | None, str | None]:
        trial = self.study.ask()
        storage = self.study._storage
        storage.set_trial_user_attr(
            trial._trial_id, "driver", self.me
        )  # heartbeat: datetime_start until the first beat
        params = self.space.suggest(trial)
        number = trial.number
        # Two drivers may both see one budget slot left: the trial with the larger number yields.
        if not self._within_budget(number):
            trial.set_user_attr("infeasible", True)
            trial.set_user_attr("pruned_reason", "not run: the study reached its trial budget (another driver)")
            self.study.tell(trial, state=TrialState.PRUNED)
            if trial.user_attrs.get("retry_of") is not None:
                self.study.enqueue_trial(
                    params,
                    user_attrs={
                        k: trial.user_attrs[k] for k in ("retry_of", "attempt", "resume_from") if k in trial.user_attrs
                    },
                )
            return None, None
        trial_dir = (self.spec.study_dir / "trials" / str(number)).resolve()
        try:
            job, options = self._build_job(trial, params, trial_dir)
        except UserError as err:
            reason = "; ".join(err.problems)
            trial.set_user_attr("infeasible", True)
            trial.set_user_attr("pruned_reason", f"infeasible: {reason}")
            _set_constraint(trial, 1.0)
            self.study.tell(trial, state=TrialState.PRUNED)
            self._say(f"trial {number} pruned before launch: {reason}")
            return None, reason
        _set_constraint(trial, 0.0)
        live = _Live(trial, number, params, trial_dir, options, job, started_wall=time.time())
        self._adopt_history(live)
        return live, None

    def _within_budget(self, number: int) -> bool:
        trials = self.study.get_trials(deepcopy=False)
        ahead = sum(
            1
            for t in trials
            if t.number < number
            and (counts_toward_budget(t) or (t.state == TrialState.RUNNING and not t.user_attrs.get("infeasible")))
        )
        return ahead < self.spec.trials

    def _build_job(self, trial: optuna.Trial, params: dict, trial_dir: Path) -> tuple[TrialJob, dict]:
        from grpo.config import load_config
        from grpo.sweep.preflight import trial_problems

        spec = self.spec
        param_overrides = self.space.to_overrides(params)
        overrides = list(spec.overrides) + param_overrides
        resume_from = trial.user_attrs.get("resume_from")
        if self._base_cfg is None:  # compose with Hydra once; per-trial values are applied on top
            self._base_cfg = load_config(spec.base, list(spec.overrides))
        base_seed = int(self._base_cfg.megatron_training.seed)
        if spec.backend != "mindspeed":  # MindSpeed-RL resolves its paths against its own checkout
            param_overrides = param_overrides + _absolute_paths(self._base_cfg, param_overrides)
        runs, resumed = [], False
        for k in range(spec.seeds):
            run_dir = (trial_dir / "runs" / f"seed{k}").resolve()
            extra = [f"actor_config.save={run_dir / 'ckpt'}", f"megatron_training.seed={base_seed + k}"]
            extra += _tracking_overrides(spec, trial.number, k)
            if resume_from:
                old_ckpt = (Path(resume_from) / "runs" / f"seed{k}" / "ckpt").resolve()
                if _checkpoint_iteration(old_ckpt) is not None:
                    extra += [
                        f"actor_config.load={old_ckpt}",
                        "actor_config.finetune=false",
                        "actor_config.no_load_optim=false",
                        "actor_config.no_load_rng=false",
                    ]
                    resumed = True
            cfg = self._base_cfg.with_overrides(param_overrides + extra)  # one validation per seed
            runs.append(SeedRun(seed=base_seed + k, cfg=cfg, run_dir=str(run_dir)))
        problems = trial_problems(spec, runs[0].cfg, self.backend, no_plan=self.no_plan)
        if problems:
            raise UserError(problems[0], problems)
        options = self.backend.resources(runs[0].cfg)
        if not self.sched.can_ever_fit(options):
            raise UserError(f"trial needs {options} but the cluster has {self.sched._total}")
        trial_dir.mkdir(parents=True, exist_ok=True)
        config = runs[0].cfg.to_dict()
        (trial_dir / "config.yaml").write_text(yaml.dump(config, Dumper=_Dumper, sort_keys=False))
        (trial_dir / "overrides.yaml").write_text(yaml.dump(overrides, Dumper=_Dumper, sort_keys=False))
        # Each attr is one journal write (and fsync): start/end times are Optuna's datetime_start/complete.
        attrs = {
            "overrides": overrides,
            "config": config,
            "seeds": [r.seed for r in runs],
            "trial_dir": str(trial_dir),
            "resources": options,
        }
        if "attempt" not in trial.user_attrs:  # a retry carries its attempt from enqueue_trial
            attrs["attempt"] = 1
        for key, value in attrs.items():
            trial.set_user_attr(key, value)
        env = {"GRPO_SWEEP_RAY_ADDRESS": str(self.spec.cluster.address), **self.backend.job_env(spec)}
        job = TrialJob(
            number=trial.number,
            backend=spec.backend,
            runs=runs,
            resume=resumed,
            env=env,
            driver={"host": self.me["host"], "pid": self.me["pid"]},
        )
        return job, options

    def _adopt_history(self, live: _Live) -> None:
        """A retried trial starts with the curve its predecessor persisted up to its checkpoint."""
        resume_from = live.trial.user_attrs.get("resume_from")
        if not resume_from or not live.job.resume:
            return
        start_at = {}
        for run in live.job.runs:
            start_at[run.seed] = _checkpoint_iteration(Path(run.cfg.actor_config.load)) or 0
        # What the old driver persisted, completed from the old runs' own metrics files: iterations the
        # worker finished (and checkpointed) but whose metrics never reached the dead driver.
        rows: dict[tuple[int, int], dict] = {}
        for row in _read_jsonl(Path(resume_from) / "metrics.jsonl"):
            rows[(row.get("seed"), row.get("iteration", 0))] = row
        for k, run in enumerate(live.job.runs):
            for row in _read_jsonl(Path(resume_from) / "runs" / f"seed{k}" / "metrics.jsonl"):
                rows.setdefault((run.seed, row.get("iteration", 0)), {**row, "seed": run.seed})
        for (seed, iteration), row in sorted(rows.items(), key=lambda kv: (str(kv[0][0]), kv[0][1])):
            if seed in start_at and 0 < iteration <= start_at[seed]:
                metrics = {k: v for k, v in row.items() if k not in ("iteration", "seed")}
                self._record(live, seed, iteration, metrics, persist=True)
        live.trial.set_user_attr("resumed_at_iteration", {str(k): v for k, v in start_at.items()})

    def _submit(self, live: _Live) -> None:
        self.sched.submit(live.number, live.job, live.options)
        live.submitted = True
        live.started_wall = time.time()
        self.live[live.number] = live
        self._say(f"trial {live.number} started: {_fmt_params(live.params)}")

    def _abandon_pending(self) -> None:
        if self.pending is not None:  # asked but never launched: give it back as a retry, no attempt used
            trial = self.study._storage.get_trial(self.pending.trial._trial_id)
            fail_and_maybe_retry(
                self.study, trial, "not launched before the driver stopped", self.spec.retries, count_attempt=False
            )
            self.pending = None

    # -- metrics --------------------------------------------------------------------------------------
    def _record(self, live: _Live, seed: int, iteration: int, metrics: dict, persist: bool) -> None:
        if iteration <= live.last_iteration.get(seed, 0):
            return  # already have it (a resumed run re-reporting, or a duplicate)
        live.last_iteration[seed] = iteration
        curves = live.curves.setdefault(seed, {})
        for name, value in metrics.items():
            if isinstance(value, (int, float)):
                curves.setdefault(name, []).append((iteration, float(value)))
        if persist:
            with open(live.trial_dir / "metrics.jsonl", "a") as fh:
                fh.write(json.dumps({"iteration": iteration, "seed": seed, **metrics}) + "\n")
        if not self.multi and seed == live.job.runs[0].seed:
            value = self._objective_so_far(live, seed, 0)
            if value is not None and math.isfinite(value):
                live.trial.report(value, step=iteration)

    def _on_events(self, number: int, events: list) -> None:
        live = self.live.get(number)
        if live is None or not events:
            return
        for seed, iteration, metrics in events:
            self._record(live, seed, iteration, metrics, persist=True)
        if not self.multi and live.stop_reason is None and live.trial.should_prune():
            live.stop_reason = "pruned"
            self.sched.stop(number, "pruned")

    def _objective_so_far(self, live: _Live, seed: int, index: int) -> float | None:
        points = live.curves.get(seed, {}).get(self.spec.objectives[index].metric)
        if not points:
            return None
        return self.reducers[index].reduce([v for _, v in points])

    # -- finishing ------------------------------------------------------------------------------------
    def _on_finished(self, fin) -> None:
        live = self.live.pop(fin.key)
        trial = live.trial
        result = fin.result or {}
        wall = time.time() - live.started_wall
        attrs = {
            "wall_s": wall,
            "cpu_s": float(result.get("cpu_s", 0.0)),
            "npu_s": wall * _npus(live.options),
            "node": result.get("node"),
            "devices": result.get("devices") or [],
        }
        for key, value in attrs.items():
            if value or key == "wall_s":  # unset = zero / none: one journal write less
                trial.set_user_attr(key, value)
        frozen = self.study._storage.get_trial(trial._trial_id)
        if fin.error is not None:
            reason = (
                fin.error
                if live.stop_reason != "timeout"
                else f"timeout after {self.spec.timeout_per_trial} s (killed)"
            )
            self._fail(frozen, reason, _tail(live))
            return
        status = result.get("status")
        if status == "failed":
            self._fail(frozen, result.get("reason", "failed"), result.get("last_log_lines") or _tail(live))
            return
        if status == "stopped" or live.stop_reason:
            why = result.get("stop_reason") or live.stop_reason
            if why == "pruned":
                trial.set_user_attr("pruned_reason", "pruned by the pruner on its learning curve")
                self.study.tell(trial, state=TrialState.PRUNED)
                self._say(f"trial {live.number} pruned at iteration {max(live.last_iteration.values(), default=0)}")
                return
            if why == "timeout":
                self._fail(frozen, f"timeout after {self.spec.timeout_per_trial} s", _tail(live))
                return
            fail_and_maybe_retry(
                self.study,
                frozen,
                "interrupted (Ctrl-C); resumes on the next run",
                self.spec.retries,
                last_log_lines=_tail(live),
                count_attempt=False,
            )
            self._say(f"trial {live.number} interrupted; it resumes from its checkpoint on the next run")
            return
        values, spreads, per_seed = [], [], []
        for index, objective in enumerate(self.spec.objectives):
            seed_values = [self._objective_so_far(live, r.seed, index) for r in live.job.runs]
            if any(v is None for v in seed_values):
                seen = sorted({m for c in live.curves.values() for m in c})
                self._fail(
                    frozen,
                    f"objective metric {objective.metric!r} was never reported; reported: {', '.join(seen[:12])}",
                    _tail(live),
                )
                return
            if not all(math.isfinite(v) for v in seed_values):
                self._fail(frozen, f"objective {objective.metric} is not finite: {seed_values}", _tail(live))
                return
            values.append(statistics.fmean(seed_values))
            spreads.append(statistics.pstdev(seed_values) if len(seed_values) > 1 else 0.0)
            per_seed.append(seed_values)
        trial.set_user_attr("values_per_seed", per_seed)
        trial.set_user_attr("value_spread", spreads)
        self.study.tell(trial, values if self.multi else values[0])
        self._say(
            f"trial {live.number} complete: {', '.join(f'{o.metric}={v:.4g}' for o, v in zip(self.spec.objectives, values))}"
        )

    def _fail(self, frozen, reason: str, lines: list[str]) -> None:
        retried = fail_and_maybe_retry(self.study, frozen, reason, self.spec.retries, last_log_lines=lines)
        self._say(f"trial {frozen.number} failed: {reason}" + (" (will retry)" if retried else " (no retries left)"))

    def _check_timeouts(self) -> None:
        limit = self.spec.timeout_per_trial
        if not limit:
            return
        now = time.monotonic()
        for number, live in self.live.items():
            started = self.sched.started_at(number)
            if started is None or now - started <= limit:
                continue
            if live.stop_reason != "timeout":
                live.stop_reason = "timeout"
                self.sched.stop(number, "timeout")
            elif now - (self.sched.stop_sent_at(number) or now) > min(TIMEOUT_KILL_GRACE_S, limit):
                self.sched.kill(number)

    def _say(self, message: str) -> None:
        if self.progress is not None:
            self.progress.log(message)
        elif not self.quiet:
            print(message, flush=True)


_PATH_KEYS = ("megatron_training.data_path", "megatron_training.tokenizer_name_or_path", "actor_config.load")


def _absolute_paths(cfg, overrides: list[str]) -> list[str]:
    """Relative paths in the config resolved against the driver's working directory: a Ray worker may
    run elsewhere (another cwd, another node with the same mounts)."""
    out = []
    for key in _PATH_KEYS:
        if any(o.startswith(f"{key}=") for o in overrides):
            continue
        section, field = key.split(".")
        value = getattr(getattr(cfg, section), field)
        if not isinstance(value, str) or not value or Path(value).is_absolute():
            continue
        path = (Path.cwd() / value).resolve()
        if path.exists() or key == "megatron_training.data_path":  # data is generated on first use
            out.append(f"{key}={path}")
    return out


def _npus(options: dict) -> float:
    """NPUs a trial holds: Ray's ``NPU`` resource, or the mindspeed backend's admission slots."""
    res = options.get("resources") or {}
    return float(res.get("NPU", 0) or res.get("npu_slots", 0))


def _tracking_overrides(spec, number: int, seed_index: int) -> list[str]:
    tracking = spec.tracking
    out = []
    if getattr(tracking, "wandb", "off") != "off":
        out += [
            "rl_config.use_wandb=true",
            f"rl_config.wandb_project={spec.study}",
            f"rl_config.wandb_exp_name=trial-{number}-seed{seed_index}",
        ]
    if getattr(tracking, "tensorboard", False):
        out += ["rl_config.use_tensorboard=true"]
    return out


def _set_constraint(trial: optuna.Trial, violation: float) -> None:
    """Optuna 5's per-trial constraint (replacing samplers' ``constraints_func``): > 0 means infeasible."""
    setter = getattr(trial, "set_constraint", None)
    if setter is not None:
        try:
            setter([violation])
        except Exception:
            pass


def _checkpoint_iteration(path: Path) -> int | None:
    """The iteration of the newest complete checkpoint in ``path`` (Megatron's tracker file)."""
    tracker = path / "latest_checkpointed_iteration.txt"
    try:
        return int(tracker.read_text().strip())
    except (OSError, ValueError):
        return None


def _read_jsonl(path: Path) -> list[dict]:
    rows = []
    try:
        with open(path) as fh:
            for line in fh:
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError:
                    continue  # a line cut short by a crash
    except OSError:
        pass
    return rows


def _tail(live: _Live, n: int = 20) -> list[str]:
    lines: list[str] = []
    for run in live.job.runs:
        log = Path(run.run_dir) / "train.log"
        try:
            lines = log.read_text(errors="replace").splitlines()[-n:] or lines
        except OSError:
            continue
    return lines


def _fmt_params(params: dict) -> str:
    return ", ".join(
        f"{k.split('.')[-1]}={v:.3g}" if isinstance(v, float) else f"{k.split('.')[-1]}={v}" for k, v in params.items()
    )
