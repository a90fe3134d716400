"""The verl backend: each trial is one run of verl 0.9.x's ``python -m verl.trainer.main_ppo``, as its own Ray job.

Rendering (``_render``): the trial's MindSpeed-RL keys become Hydra overrides over verl's own ``ppo_trainer`` config
(GRPO: ``algorithm.adv_estimator=grpo``, ``rollout.n``, KL as loss or in reward, ``clip_ratio_low/high`` both
written, prompt-counted batches), plus what verl leaves unset (``rollout.name``, the micro batch sizes) and the
run's paths. ``coverage`` classifies every key (docs/backend_verl.md).

Preflight (``check``, on a CPU): the refused keys, then the trial's overrides composed and validated by verl's own
code (``_validate``: Hydra composition of the installed verl's config, ``validate_config``,
``omega_conf_to_dataclass``); a failure is one line naming the grpo-sweep key. Nothing imports verl unless a
spec uses this backend.

Launch (``run``, in the trial's Ray worker, which holds one CPU and no GPU): the trial is submitted as a Ray job
(``JobSubmissionClient`` on the cluster's dashboard), never run inside the worker, so verl's placement groups get
the GPUs and a trial never waits on resources its own task holds (ray#47439). The job's ``file`` logger
(``VERL_FILE_LOGGER_PATH`` in its runtime env) writes ``<run dir>/verl.jsonl``; the worker tails it (``log``: a
resume truncates it, rows already read are kept) and reports each step as one iteration, under verl's names and
the project's (``grpo/score/mean`` ...), into ``<run dir>/metrics.jsonl`` too. A pruned trial's job is stopped
(``ray job stop``: its driver, and with it the TaskRunner, rollout and actor workers of that job); a job that
fails, or logs no step for ``stall_timeout`` seconds, ends the trial as ``TrialFailed`` with its log's last lines.

Checkpoints and resume (``_resume``): verl saves ``<actor_config.save>/global_step_N`` and
``latest_checkpointed_iteration.txt`` (the file the driver reads). A retry or pbt branch names such a folder in
``actor_config.load`` (``finetune`` false) and starts with ``resume_mode=resume_path``,
``resume_from_path=<load>/global_step_N``. What it keeps (``actor.checkpoint.load_contents``): a retry, and a
branch that explored no learning-rate key, load ``[model, optimizer, extra]`` (weights, AdamW moments, the lr
scheduler and rng, and verl's ``data.pt`` data position); a branch whose lr settings differ from its parent's
(``grpo_sweep_optim.json`` beside the checkpoints says what the parent ran with) loads ``[model]`` only: fresh
AdamW moments at its own lr, since a restored optimizer's param groups and scheduler would put the parent's lr back.
The model (``model.path``) is the one the parent started from (``grpo_sweep_model.json``, ``_model``).

    VerlBackend().run(cfg, Path("studies/s/trials/0/runs/seed0"), report=lambda i, m: False, resume=False)
"""

from __future__ import annotations

import json
import math
import socket
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grpo._fs import checkpoint_iteration, truncate_jsonl_after
from grpo.config import GRPOConfig
from grpo.errors import UserError
from grpo.sweep.backends._base import RayOptions, ReportFn, TrialBackend, TrialFailed
from grpo.sweep.backends.verl import _data, _launch, _model, _native, _render, _resume, _reward, coverage, log
from grpo.sweep.backends.verl.log import VerlLogTail, project_metrics

DIVERGENCE_KEYS = ("actor/pg_loss", "actor/kl_loss", "actor/entropy")
REPORTED_LINES = 30
PROJECT = "grpo_sweep"


@dataclass(frozen=True)
class Launch:
    """One job's overrides and what supervising it needs to know."""

    overrides: list[str]
    save_dir: Path
    start: int  # the iteration it resumes from (0: fresh)
    end: int  # the step it must reach: train_iters, or a pbt segment's end
    epochs: int  # trainer.total_epochs
    val_sources: dict[str, int]  # held-out rows per data_source
    model: _model.VerlModel  # actor_rollout_ref.model.path (tokenizer_path), recorded in save_dir for resumes


class VerlBackend(TrialBackend):
    """Runs each trial as a verl ``main_ppo`` Ray job (see the module docstring).

    ``python`` is the interpreter the job runs (where trials launch; default: this one), ``module`` verl's entry
    (tests name the stand-in), ``address`` the Jobs API (default: the dashboard of the cluster the worker is in),
    ``env`` the job's extra environment, ``extra_overrides`` verl-native overrides every trial gets last (a rollout
    setting a MindSpeed-RL config has no key for; one of a key the trial sets is refused, ``_native``); the preflight
    validates them with the rest, and ``spec_path`` is where they are written (a refusal names its line).
    """

    def __init__(
        self,
        *,
        source: str = "spec",
        python: str | None = None,
        module: str = _launch.ENTRY_MODULE,
        address: str | None = None,
        env: dict[str, str] | None = None,
        gpus_per_node: int = _render.GPUS_PER_NODE,
        stall_timeout: float = 3600.0,
        poll_s: float = 0.5,
        extra_overrides: list[str] | None = None,
        spec_path: Path | None = None,
    ):
        self.source = source
        self.python = python or sys.executable
        self.module = module
        self.address = address
        self.env = dict(env or {})
        self.gpus_per_node = gpus_per_node
        self.stall_timeout = stall_timeout
        self.poll_s = poll_s
        self.extra_overrides = list(extra_overrides or [])
        self.spec_path = spec_path  # where verl.overrides are written (their errors name its line)

    @classmethod
    def from_spec(cls, spec: Any) -> VerlBackend:
        v = spec.verl  # the spec's verl: section (grpo.sweep.spec.models.VerlSpec)
        return cls(
            source=spec.source,
            python=v.python,
            module=v.module,
            address=v.address,
            env=v.env,
            gpus_per_node=v.gpus_per_node,
            stall_timeout=v.stall_timeout,
            extra_overrides=v.overrides,
            spec_path=spec.path,
        )

    reads_data_here = False  # each trial reads its dataset where it launches (_data.write in run)

    def resources(self, cfg: GRPOConfig) -> RayOptions:
        """One CPU, no GPU: the job's own placement groups take the trial's GPUs (ray#47439)."""
        return {"num_cpus": 1}

    # ------------------------------------------------------------------ checks
    def check(self, cfg: GRPOConfig) -> list[str]:
        problems = coverage.KEYS.refusals(cfg, cfg._source) + coverage.dynamic_sampling_problems(cfg, cfg._source)
        try:
            problems += _data.problems(cfg)
        except UserError as err:  # the dataset here cannot be read: the same error the trial would meet
            problems.append(str(err))
        problems += [p for p in [_model.verl_model(cfg).problem] if p]
        problems += _native.native_problems(cfg)
        problems += _native.mapped_problems(self.extra_overrides, self.source, self.spec_path)
        if cfg.engine.exit_interval:
            problems += self.branch_problems(cfg)
        if problems:
            return problems
        return self.verl_problems(cfg)

    def verl_problems(self, cfg: GRPOConfig) -> list[str]:
        """The trial's overrides composed and validated by verl's own code ([] when verl accepts them)."""
        from grpo.sweep.backends.verl import _validate

        own = _render.mapped_overrides(cfg, self.gpus_per_node)
        native = _render.as_overrides(_native.native_settings(cfg))
        try:
            _validate.validate(own + native + self.extra_overrides)
        except _validate.VerlMissing as err:
            return [f"{self.source}: backend verl: {err}"]
        except Exception as err:  # verl's own refusal: an assert, a ValueError, a Hydra composition error
            return [self._explain(err, own, native, cfg._source)]
        return []

    def _explain(self, err: Exception, own: list[str], native: list[str], source: str) -> str:
        """verl's refusal in one line, naming where the refused setting came from: a ``verl.<path>`` key of the
        config, or the spec's ``verl.overrides[i]`` line, when the trial's mapped overrides pass without it; else
        the grpo-sweep key behind the verl key verl names."""
        from grpo.sweep.backends.verl import _validate

        labelled = [(f"{source}: verl.{_native.override_key(o)}", o) for o in native]
        labelled += [(_native.where(i, o, self.source, self.spec_path), o) for i, o in enumerate(self.extra_overrides)]
        for i in range(len(labelled) + 1):
            try:
                _validate.validate(own + [o for _, o in labelled[:i]])
            except Exception as first:  # the first prefix verl refuses: own alone (i == 0) or up to setting i-1
                if i == 0:
                    break
                where, override = labelled[i - 1]
                return f"{where}: verl refuses {override}: {_validate.message(first)}"
        settings = dict(item.split("=", 1) for item in own + native + self.extra_overrides)
        return _validate.explain(err, settings, source)

    def check_search(self, keys: list[str], source: str) -> list[str]:
        return coverage.KEYS.searched_problems(keys, source) + _native.searched_problems(
            keys, self.extra_overrides, source, self.spec_path
        )

    @classmethod
    def unreported_metric(cls, metric: str) -> str | None:
        return log.unreported(metric)

    def branch_problems(self, cfg: GRPOConfig) -> list[str]:
        """A pbt segment is a verl run cut at the segment's end (``total_training_steps``), so its lr schedule would
        span the segment, not the run: only a constant lr without warmup is the same; no value changes mid-run."""
        actor, problems = cfg.actor_config, []
        if actor.lr_decay_style != "constant" or actor.lr_warmup_fraction > 0:
            problems.append(
                f"{self.source}: actor_config.lr_decay_style: pbt segments run on verl as resumes cut at the segment's "
                f"end, where verl's lr schedule ({actor.lr_decay_style}, warmup {actor.lr_warmup_fraction:g}) would "
                f"span the segment, not the run; use lr_decay_style: constant with no warmup"
            )
        if cfg.schedule:
            problems.append(f"{self.source}: schedule: backend verl cannot change a value during a run")
        return problems

    def launch_warnings(self, cfg: GRPOConfig) -> list[str]:
        """The model and data paths, seen from this machine (trials may launch on another)."""
        mt, out = cfg.megatron_training, []
        model = _model.verl_model(cfg).path
        if not model:
            out.append(
                f"{cfg._source}: megatron_training.tokenizer_name_or_path: not set (nor a Hugging Face folder in "
                "actor_config.load); backend verl needs the model folder (actor_rollout_ref.model.path)"
            )
        elif not Path(model).is_dir():
            out.append(f"{cfg._source}: megatron_training.tokenizer_name_or_path: {model}: no such folder here")
        if cfg.engine.task != "dataset":
            return out
        eval_data = cfg.engine.eval_data_path
        for key, data in (("megatron_training.data_path", mt.data_path), ("engine.eval_data_path", eval_data)):
            if (data or key != "engine.eval_data_path") and not (data and _data.present(str(data), key)):
                out.append(
                    f"{cfg._source}: {key}: {data}: no such dataset here (each verl trial reads it where it "
                    "launches and writes its rows as verl's parquet in its run folder)"
                )
        return out

    # ------------------------------------------------------------------ launch
    def launch_overrides(self, cfg: GRPOConfig, run_dir: Path) -> Launch:
        """Every override of the job (its rows written into ``run_dir`` first), and what supervising it needs."""
        actor, mt = cfg.actor_config, cfg.megatron_training
        try:
            data = _data.write(cfg, run_dir)
        except UserError as err:
            raise TrialFailed(str(err)) from None
        epochs = _data.epochs(cfg, data.train_rows)
        save_dir = Path(str(actor.save or run_dir / "ckpt")).expanduser().resolve()
        overrides = _render.trial_overrides(cfg, self.gpus_per_node)
        overrides += [
            f"trainer.project_name={PROJECT}",
            f"trainer.experiment_name={run_dir.name}-{uuid.uuid4().hex[:6]}",
        ]
        model = _model.verl_model(cfg)  # a Hugging Face folder in actor_config.load, else the tokenizer's
        if model.problem:
            raise TrialFailed(model.problem)
        overrides += model.overrides()
        overrides += [f"data.train_files={data.train}", f"data.val_files={data.val}", f"trainer.total_epochs={epochs}"]
        overrides += _render.as_overrides(_reward.reward_settings(cfg, run_dir))
        if cfg.engine.keep_checkpoints:
            overrides.append(f"trainer.max_actor_ckpt_to_keep={int(cfg.engine.keep_checkpoints)}")
        start = 0
        load = Path(str(actor.load)).expanduser() if actor.load else None
        iteration = checkpoint_iteration(load) if load is not None and not actor.finetune else None
        if load is not None and iteration is not None:
            folder = load / f"global_step_{iteration}"
            if not folder.is_dir():
                raise TrialFailed(f"actor_config.load: {load} names iteration {iteration} but has no {folder.name}")
            explored = [] if load.resolve() == save_dir else _resume.explored_lr_keys(load, actor)
            overrides += _resume.resume_overrides(
                save_dir,
                folder,
                explored,
                load_optimizer=not actor.no_load_optim,
                load_extra=not actor.no_load_rng,
            )
            start = iteration
        else:
            overrides += _resume.fresh_overrides(save_dir)
        end, interval = int(mt.train_iters), cfg.engine.exit_interval
        if interval:  # a pbt segment: verl stops (and saves: its last step always does) at the segment's end
            end = min(end, (start // interval + 1) * interval)
            overrides = [o for o in overrides if not o.startswith("trainer.total_training_steps=")]
            overrides.append(f"trainer.total_training_steps={end}")
        overrides += self.extra_overrides
        epochs = int(next(o.split("=", 1)[1] for o in reversed(overrides) if o.startswith("trainer.total_epochs=")))
        return Launch(overrides, save_dir, start, end, epochs, data.val_sources, model)  # epochs: the last one wins

    def prepare(self, cfg: GRPOConfig, run_dir: Path) -> Launch:
        """The job's launch, with what its resumes read beside its checkpoints (lr settings, model) written."""
        launch = self.launch_overrides(cfg, run_dir)
        _resume.write_lr_settings(launch.save_dir, cfg.actor_config)
        _model.record(launch.save_dir, launch.model)
        return launch

    def run(self, cfg: GRPOConfig, trial_dir: Path, report: ReportFn, resume: bool) -> dict[str, Any]:
        run_dir = Path(trial_dir).resolve()
        run_dir.mkdir(parents=True, exist_ok=True)
        launch = self.prepare(cfg, run_dir)
        overrides = launch.overrides
        log_path = run_dir / "verl.jsonl"
        metrics_path = run_dir / "metrics.jsonl"
        truncate_jsonl_after(metrics_path, launch.start)
        try:
            jobs = _launch.client(self.address)
        except Exception as err:
            raise TrialFailed(f"backend verl on {socket.gethostname()}: {err}") from None
        submission_id = f"grpo-{run_dir.parent.parent.name}-{run_dir.name}-{uuid.uuid4().hex[:8]}"
        try:
            _launch.submit(jobs, submission_id, self.python, overrides, log_path, module=self.module, env=self.env)
        except Exception as err:
            hint = (
                " (the node's dashboard agent never came up: is its port, ray start --dashboard-agent-listen-port, "
                "default 52365, taken by another Ray?)"
                if "No available agent" in str(err)
                else ""
            )
            raise TrialFailed(
                f"backend verl: the Ray job could not be submitted: {type(err).__name__}: {err}{hint}"
            ) from None
        with open(run_dir / "train.log", "a", encoding="utf-8") as log:
            log.write(
                f"# grpo-sweep: ray job {submission_id}: {_launch.entrypoint(self.python, overrides, self.module)}\n"
            )
        return self._supervise(jobs, submission_id, report, log_path, metrics_path, launch)

    def _supervise(
        self, jobs: Any, submission_id: str, report: ReportFn, log_path: Path, metrics_path: Path, launch: Launch
    ) -> dict[str, Any]:
        save_dir, start = launch.save_dir, launch.start
        tail = VerlLogTail(log_path)
        last_iteration, last_metrics, stopped = start, {}, False
        last_progress = time.monotonic()
        status = "PENDING"
        try:
            with open(metrics_path, "a", encoding="utf-8") as metrics_out:
                while True:
                    status = str(jobs.get_job_status(submission_id).value)
                    ended = status in ("SUCCEEDED", "FAILED", "STOPPED")
                    for step, data in tail.poll():
                        if step <= last_iteration:
                            continue  # a step logged again after a resume, or verl's step-0 validation
                        metrics = project_metrics(data, launch.val_sources)
                        bad = [k for k in DIVERGENCE_KEYS if k in metrics and not math.isfinite(metrics[k])]
                        if bad:
                            _launch.stop(jobs, submission_id)
                            raise TrialFailed(
                                f"training diverged: {bad[0]} is {metrics[bad[0]]} at iteration {step}",
                                self._job_tail(jobs, submission_id),
                            )
                        last_iteration, last_metrics = step, {k: v for k, v in metrics.items() if math.isfinite(v)}
                        last_progress = time.monotonic()
                        metrics_out.write(json.dumps({"iteration": step, **last_metrics}) + "\n")
                        metrics_out.flush()
                        if report(step, last_metrics):
                            stopped = True
                            break
                    if stopped or ended:
                        break
                    if time.monotonic() - last_progress > self.stall_timeout:
                        _launch.stop(jobs, submission_id)
                        raise TrialFailed(
                            f"stalled: no step logged for {self.stall_timeout:g} s (job {submission_id})",
                            self._job_tail(jobs, submission_id),
                        )
                    time.sleep(self.poll_s)
        finally:
            if not jobs.get_job_status(submission_id).is_terminal():
                status = _launch.stop(jobs, submission_id)  # pruned, interrupted, or the worker failing
        summary = {
            "iterations": last_iteration,
            "stopped_early": stopped,
            "job": submission_id,
            "job_status": status,
            "metrics": last_metrics,
            "checkpoint": str(save_dir),
            "resumed_from": start or None,
        }
        if stopped:
            return summary
        if status != "SUCCEEDED":
            raise TrialFailed(f"verl job {submission_id} ended {status}", self._job_tail(jobs, submission_id))
        if last_iteration == start:
            raise TrialFailed(
                f"verl job {submission_id} logged no step to {tail.path}", self._job_tail(jobs, submission_id)
            )
        if last_iteration < launch.end:  # verl ends its loop at total_epochs too, without a last save or evaluation
            raise TrialFailed(
                f"verl job {submission_id} succeeded at step {last_iteration} before step {launch.end} "
                f"(megatron_training.train_iters; trainer.total_epochs={launch.epochs}): the run is incomplete",
                self._job_tail(jobs, submission_id),
            )
        return summary

    @staticmethod
    def _job_tail(jobs: Any, submission_id: str) -> list[str]:
        try:
            return str(jobs.get_job_logs(submission_id)).splitlines()[-REPORTED_LINES:]
        except Exception:
            return []
