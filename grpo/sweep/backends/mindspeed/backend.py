"""The mindspeed backend: one trial is one run of MindSpeed-RL's GRPO entry point, as a subprocess.

The trial's config is rendered as MindSpeed-RL YAML into ``<run dir>/mindspeed_config/`` (the trainer
file plus ``model/<name>.yaml``, the layout MindSpeed's Hydra expects) and launched as ``<python>
cli/train_grpo.py --config-path <that dir> --config-name grpo_trainer`` from the MindSpeed-RL checkout
(``mindspeed.path`` in the sweep spec); ``--config-path`` keeps the checkout's own ``configs/`` off
Hydra's search path, so none of its files can shadow a rendered one (``launch_command``). Its console
goes line by line into ``<run dir>/train.log``; iteration lines become the trial's metrics (``report``
once per iteration, and ``<run dir>/metrics.jsonl``). The process runs in its own session, so pruning
and failures signal its whole process group: SIGTERM, then SIGKILL after ``kill_grace`` seconds. A run
that prints nothing for ``stall_timeout`` seconds, exits non-zero, or logs an out-of-memory / HCCL / Ray
failure ends as ``TrialFailed`` with the reason and the last log lines.

NPUs: MindSpeed-RL's driver joins the study's Ray cluster (``RAY_ADDRESS``) and reserves its NPUs with
its own placement groups. The trial's Ray worker therefore does not hold ``NPU`` itself (that would
count every NPU twice); it holds ``npu_slots``, a logical resource the cluster declares once per NPU,
so Ray admits a trial only when its NPUs are free and keeps them counted until the subprocess ends.
docs/npu.md explains the design. This module never runs ``pkill`` or ``ray stop``.

Example (outside Ray, as the tests do)::

    settings = MindSpeedSpec(path="~/MindSpeed-RL", checkpoints={"pattern": "/ckpt/qwen_tp{tp}_pp{pp}"})
    MindSpeedBackend(settings).run(cfg, Path("studies/s/trials/0/runs/seed0"), report=lambda i, m: False, resume=False)
"""

from __future__ import annotations

import json
import math
import queue
import shutil
import socket
import subprocess
import threading
import time
from collections import deque
from pathlib import Path
from typing import Any, TextIO

from grpo._fs import group_alive, truncate_jsonl_after
from grpo.config import GRPOConfig
from grpo.sweep.backends._base import RayOptions, ReportFn, TrialBackend, TrialFailed
from grpo.sweep.backends.mindspeed._checkpoints import check_checkpoint
from grpo.sweep.backends.mindspeed._launch import launch_command, launch_env, pump_lines, stop_process_group
from grpo.sweep.backends.mindspeed._ports import lease_port_block
from grpo.sweep.backends.mindspeed._render import RUNTIME_ENV, LaunchPlan, render_trial_config
from grpo.sweep.backends.mindspeed.log import classify_failure, clean_line, finite, parse_metrics_line
from grpo.sweep.backends.mindspeed.rules import launch_rule_problems, ray_node_problems
from grpo.sweep.spec.models import MindSpeedSpec, SweepSpec

ADMISSION_RESOURCE = "npu_slots"  # logical Ray resource, one per NPU (see the module docstring)
TAIL_LINES = 400  # lines kept for classifying a failure
REPORTED_LINES = 30  # lines attached to TrialFailed
LEFTOVER_QUIET_S = 2.0  # after the main process exits, how long its leftover children may keep printing
# A non-finite value of one of these means the run diverged (as the embedded engine's TrainingDiverged).
DIVERGENCE_KEYS = ("actor/pg_loss", "actor/kl_loss", "actor/entropy")


class MindSpeedBackend(TrialBackend):
    """Runs each trial as a MindSpeed-RL GRPO subprocess (see the module docstring).

    Built from the spec's ``mindspeed:`` section (``from_spec``); the object, settings included, is
    what the driver ships to the trial's Ray worker.
    """

    plans_memory = True  # NPU layouts: the memory planner prunes those that cannot fit
    keeps_relative_paths = True  # MindSpeed-RL resolves its paths against its own checkout

    def __init__(self, settings: MindSpeedSpec | None = None, *, source: str = "spec", ray_address: str | None = None):
        self.settings = (settings or MindSpeedSpec()).anchored()
        self.source = source  # the spec file, for messages
        self.ray_address = ray_address

    @classmethod
    def from_spec(cls, spec: SweepSpec) -> MindSpeedBackend:
        return cls(spec.mindspeed, source=spec.source, ray_address=spec.cluster.address)

    def resources(self, cfg: GRPOConfig) -> RayOptions:
        """One CPU for the supervising worker plus one admission slot per NPU of the trial."""
        return {"num_cpus": 1, "resources": {ADMISSION_RESOURCE: float(cfg.rl_config.actor_resource.num_npus)}}

    def devices_held(self, options: RayOptions) -> float:
        """The trial's NPUs: its admission slots (MindSpeed-RL holds the ``NPU`` resource itself)."""
        return float((options.get("resources") or {}).get(ADMISSION_RESOURCE, 0))

    # Checks come in two kinds. What the config (and the spec) decide is the same on every machine:
    # ``config_problems``, always errors. What depends on the machine that launches the trial (the
    # checkout, its entry script and runtime env file, the interpreter, the converted checkpoint, the
    # tokenizer folder: ``node_problems``) is judged by the machine running the check only when it is
    # such a node, i.e. when the checkout is there: the trial's supervising worker runs where the
    # ``npu_slots`` are declared (the head node, docs/npu.md), so a driver beside a checkout shares its
    # file system. A driver without the checkout (a laptop, a login node) cannot know: those become
    # ``launch_warnings``, and ``run`` checks them again on the node that launches, failing the trial there.
    # One exception: a checkpoint this machine can read and that was converted for another TP/PP is
    # wrong wherever it is read, so it is an error even here.

    def config_problems(self, cfg: GRPOConfig) -> list[str]:
        """What MindSpeed-RL would refuse at launch, known from the config and the spec alone."""
        settings, src = self.settings, self.source
        problems = []
        if settings.checkout is None:
            problems.append(f"{src}: mindspeed.path: not set (the MindSpeed-RL checkout to run cli/train_grpo.py from)")
        problems += check_checkpoint(cfg, settings, src).unnamed
        problems += launch_rule_problems(cfg)
        users = [name for name in cfg.rl_config.verifier_function if ":" in name]  # file.py:fn (issue 41)
        if users:
            problems.append(
                f"{src}: rl_config.verifier_function: {users[0]} is a user reward function; MindSpeed-RL has no reward "
                "hook (its rule_verifier.py table only), so use backend embedded, trl or verl"
            )
        if cfg.trl:  # backend trl's own settings
            problems.append(f"{src}: trl.{next(iter(cfg.trl))}: backend trl's own setting; MindSpeed-RL has none")
        if cfg.verl:  # backend verl's own settings
            problems.append(f"{src}: verl.{next(iter(cfg.verl))}: backend verl's own setting; MindSpeed-RL has none")
        for key in ("eval_data_path", "data_fields"):  # MindSpeed-RL reads its own preprocessed data_path only
            if getattr(cfg.engine, key) is not None:
                problems.append(
                    f"{src}: engine.{key}: MindSpeed-RL reads only its preprocessed megatron_training.data_path; "
                    "remove it, or use backend embedded, trl or verl"
                )
        eng = cfg.engine  # the engine's own switches; MindSpeed-RL has no such keys and would ignore them silently
        if eng.loss_agg_mode not in (None, "token-mean"):
            problems.append(
                f"{src}: engine.loss_agg_mode: {eng.loss_agg_mode} is the embedded engine's; MindSpeed-RL's "
                "GRPO loss is always the token mean per micro batch (grpo_actor_loss_func.py), so remove it"
            )
        for key, value, theirs in (
            ("policy_loss", eng.policy_loss, "vanilla"),
            ("advantage_estimator", eng.advantage_estimator, "group_norm"),
        ):
            if value != theirs:
                problems.append(
                    f"{src}: engine.{key}: {value} is the embedded engine's; MindSpeed-RL has no such key (its "
                    f"GRPO is {theirs}), so remove it or use backend: embedded"
                )
        # MindSpeed-RL's GRPO loss (grpo_actor_loss_func.py) reads neither key; only DAPOActorLossFunc does
        rl = cfg.rl_config
        if Path(settings.entry).name == "train_grpo.py":
            for key, used in (
                ("clip_higher_enable", bool(getattr(rl, "clip_higher_enable", None))),
                ("token_level_loss", getattr(rl, "token_level_loss", None) is False),
                # Dynamic sampling lives in RayDAPOTrainer only (dapo_trainer_hybrid.py); RayGRPOTrainer has none.
                ("filter_groups_enable", bool(getattr(rl, "filter_groups_enable", None))),
            ):
                if used:
                    problems.append(
                        f"{src}: rl_config.{key}: MindSpeed-RL's GRPO loss ({settings.entry}) ignores it; only its "
                        f"DAPO trainer (cli/train_dapo.py, stage ray_dapo) applies it, so remove it or use backend: "
                        f"embedded"
                    )
        if getattr(rl, "use_kl_in_reward", None):  # read by ppo_trainer_hybrid.py only, neither GRPO nor DAPO
            problems.append(
                f"{src}: rl_config.use_kl_in_reward: MindSpeed-RL applies it in its PPO trainer only (its GRPO and "
                f"DAPO trainers ignore it), so remove it or use backend: embedded"
            )
        return problems + segment_problems(cfg, src)

    def branch_problems(self, cfg: GRPOConfig) -> list[str]:
        return segment_problems(cfg, self.source, segments=True)

    def node_problems(self, cfg: GRPOConfig) -> list[str]:
        """What the machine running this lacks to launch ``cfg`` (checkout, interpreter, weights, tokenizer)."""
        missing, wrong_split = self._node_checks(cfg)
        return missing + wrong_split

    def _node_checks(self, cfg: GRPOConfig) -> tuple[list[str], list[str]]:
        """(what this machine lacks, a checkpoint here that was converted for another TP/PP)."""
        settings, src = self.settings, self.source
        checkout = settings.checkout
        ckpt = check_checkpoint(cfg, settings, src)
        if checkout is None:
            return [], ckpt.wrong_split  # no checkout named: a config problem (config_problems)
        if not checkout.is_dir():
            missing = [f"{src}: mindspeed.path: {checkout}: no such directory (the MindSpeed-RL checkout)"]
            return missing + ckpt.missing, ckpt.wrong_split
        problems = []
        if not (checkout / settings.entry).is_file():
            problems.append(f"{src}: mindspeed.entry: {settings.entry} not found in {checkout}")
        runtime_env = settings.resolve(getattr(cfg.rl_config, "runtime_env_path", None) or RUNTIME_ENV)
        if not runtime_env.is_file():
            problems.append(
                f"{src}: mindspeed.path: {runtime_env} not found (MindSpeed-RL's main opens "
                f"rl_config.runtime_env_path, default {RUNTIME_ENV}, before ray.init; the trial's own "
                f"runtime env starts from it)"
            )
        python = settings.interpreter
        if not (shutil.which(python) or Path(python).is_file()):
            problems.append(f"{src}: mindspeed.python: {python}: no such interpreter")
        problems += ckpt.missing
        if settings.ref_model_load_path and not settings.resolve(settings.ref_model_load_path).is_dir():
            problems.append(
                f"{src}: mindspeed.ref_model_load_path: {settings.resolve(settings.ref_model_load_path)}: "
                f"no such directory"
            )
        tokenizer = cfg.megatron_training.tokenizer_name_or_path
        if tokenizer and not settings.resolve(tokenizer).is_dir():
            problems.append(
                f"{cfg._source}: megatron_training.tokenizer_name_or_path: {settings.resolve(tokenizer)}: no such "
                f"directory (MindSpeed-RL's get_tokenizer loads a Hugging Face tokenizer folder; relative paths "
                f"are relative to the checkout)"
            )
        return problems, ckpt.wrong_split

    def is_launch_node(self) -> bool:
        """Whether this machine has the checkout, so its file system is the one trials launch with."""
        checkout = self.settings.checkout
        return checkout is not None and checkout.is_dir()

    def check(self, cfg: GRPOConfig) -> list[str]:
        """Config problems, and on a machine with the checkout its node problems (see above)."""
        missing, wrong_split = self._node_checks(cfg)
        return self.config_problems(cfg) + (missing if self.is_launch_node() else []) + wrong_split

    def launch_warnings(self, cfg: GRPOConfig) -> list[str]:
        """Node problems seen from a machine without the checkout: a trial launched there would fail."""
        return [] if self.is_launch_node() else self._node_checks(cfg)[0]

    def launch_problems(self, cfg: GRPOConfig) -> list[str]:
        """Everything that keeps ``cfg`` from launching on this machine (``run`` calls it first)."""
        problems = self.config_problems(cfg) + self.node_problems(cfg)
        return problems + ray_node_problems(cfg, self.settings)

    def run(self, cfg: GRPOConfig, trial_dir: Path, report: ReportFn, resume: bool) -> dict[str, Any]:
        settings = self.settings
        run_dir = Path(trial_dir).resolve()
        run_dir.mkdir(parents=True, exist_ok=True)
        problems = self.launch_problems(cfg)  # on the node that launches: its checkout, weights, cluster
        if problems:
            raise TrialFailed(f"cannot launch on {socket.gethostname()}: {problems[0]}", problems)
        ports = lease_port_block()  # held until MindSpeed-RL's process group has exited
        try:
            plan = render_trial_config(cfg, run_dir, settings, resume, port_block=ports.block)
            cmd = launch_command(settings, plan)
            metrics_path = run_dir / "metrics.jsonl"
            truncate_jsonl_after(metrics_path, plan.start_iteration)
            with open(run_dir / "train.log", "a", encoding="utf-8") as log, open(metrics_path, "a") as metrics_out:
                log.write(
                    f"# grpo-sweep: {' '.join(cmd)} (cwd {settings.checkout}, from iteration "
                    f"{plan.start_iteration}, port block {ports.block})\n"
                )
                log.flush()
                return self._supervise(cmd, plan, report, log, metrics_out)
        finally:
            ports.release()

    def _supervise(
        self, cmd: list[str], plan: LaunchPlan, report: ReportFn, log: TextIO, metrics_out: TextIO
    ) -> dict[str, Any]:
        """Stream the subprocess's output until it exits, is pruned, or stalls (see the module docstring)."""
        settings = self.settings
        proc = subprocess.Popen(
            cmd,
            cwd=settings.checkout,
            env={**launch_env(settings, self.ray_address), **plan.tracking_env},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        lines: queue.Queue[bytes | None] = queue.Queue()
        reader = threading.Thread(target=pump_lines, args=(proc.stdout, lines), daemon=True)
        reader.start()
        tail: deque[str] = deque(maxlen=TAIL_LINES)
        last_iteration, last_metrics, stopped = plan.start_iteration, {}, False
        last_output = time.monotonic()
        try:
            while True:
                try:
                    raw = lines.get(timeout=0.5)
                except queue.Empty:
                    silent = time.monotonic() - last_output
                    if proc.poll() is not None and silent > LEFTOVER_QUIET_S and group_alive(proc.pid):
                        # MindSpeed-RL's process is gone but a child still holds the pipe open: end it.
                        stop_process_group(proc, settings.kill_grace)
                        continue
                    if silent > settings.stall_timeout:
                        stop_process_group(proc, settings.kill_grace)
                        raise TrialFailed(
                            f"stalled: no output for {silent:.0f} s (mindspeed.stall_timeout "
                            f"{settings.stall_timeout:g} s)",
                            list(tail)[-REPORTED_LINES:],
                        ) from None
                    continue
                if raw is None:
                    break
                last_output = time.monotonic()
                line = clean_line(raw.decode("utf-8", errors="replace"))
                log.write(line + "\n")
                log.flush()
                tail.append(line)
                parsed = parse_metrics_line(line)
                if parsed is None or parsed.iteration <= last_iteration:
                    continue  # not a metrics line, or a repeat of an iteration already reported
                diverged = [k for k in DIVERGENCE_KEYS if k in parsed.metrics and not math.isfinite(parsed.metrics[k])]
                if diverged:
                    stop_process_group(proc, settings.kill_grace)
                    raise TrialFailed(
                        f"training diverged: {diverged[0]} is {parsed.metrics[diverged[0]]} at "
                        f"iteration {parsed.iteration}",
                        list(tail)[-REPORTED_LINES:],
                    )
                last_iteration, last_metrics = parsed.iteration, finite(parsed.metrics)
                metrics_out.write(json.dumps({"iteration": last_iteration, **last_metrics}) + "\n")
                metrics_out.flush()
                if report(last_iteration, last_metrics):
                    stopped = True
                    log.write(f"# grpo-sweep: stopped at iteration {last_iteration} (pruned or interrupted)\n")
                    stop_process_group(proc, settings.kill_grace)
                    break
            returncode = proc.wait()
        finally:
            if proc.poll() is None or group_alive(proc.pid):
                stop_process_group(proc, settings.kill_grace)
            reader.join(timeout=5)
            if proc.stdout:
                proc.stdout.close()
        summary = {
            "iterations": last_iteration,
            "stopped_early": stopped,
            "returncode": returncode,
            "metrics": last_metrics,
            "checkpoint": str(plan.save_dir),
            "resumed_from": plan.start_iteration or None,
        }
        if stopped:
            return summary
        reason = classify_failure(tail, returncode)
        if reason is not None:
            raise TrialFailed(reason, list(tail)[-REPORTED_LINES:])
        train_iters = int(plan.trainer["megatron_training"]["train_iters"])
        if last_iteration == plan.start_iteration and plan.start_iteration < train_iters:
            raise TrialFailed(
                "MindSpeed-RL exited without printing any iteration line (see train.log)", list(tail)[-REPORTED_LINES:]
            )
        return summary


def segment_problems(cfg: GRPOConfig, src: str, *, segments: bool = False) -> list[str]:
    """What MindSpeed-RL cannot do of a schedule or a pbt segment (``segments``: the config will run as one).

    MindSpeed-RL has no schedule and no exit interval: a segment launches as a resume of its parent's checkpoint
    with ``train_iters`` cut at the segment's end (``render_trial_config``), its values constant. That equals the
    longer run only while the learning rate does not depend on ``train_iters`` (Megatron's scheduler decays and
    warms up over it), and a schedule may change a value only where a segment starts.
    """
    actor, problems = cfg.actor_config, []
    interval = cfg.engine.exit_interval
    if (segments or interval) and (actor.lr_decay_style != "constant" or actor.lr_warmup_fraction > 0):
        problems.append(
            f"{src}: actor_config.lr_decay_style: pbt segments run on MindSpeed-RL as resumes cut at the segment's "
            f"end, where Megatron's lr schedule ({actor.lr_decay_style}, warmup {actor.lr_warmup_fraction:g}) would "
            f"span the segment, not the run; use lr_decay_style: constant with no warmup, or backend: embedded"
        )
    for key, points in sorted((cfg.schedule or {}).items()):
        moves = sorted(int(at) for at in points if int(at) > 0)
        inside = [at for at in moves if not interval or at % interval]
        if inside:
            problems.append(
                f"{src}: schedule.{key}: MindSpeed-RL cannot change a value during a run (iteration {inside[0]}); "
                f"a schedule runs there only as pbt segments that start where it changes"
            )
    return problems
