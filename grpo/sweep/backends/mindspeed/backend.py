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

import fcntl
import json
import math
import os
import queue
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, TextIO

import yaml

from grpo._fs import CHECKPOINT_TRACKER, checkpoint_iteration, group_alive, truncate_jsonl_after
from grpo._yaml import read_yaml
from grpo.config import GRPOConfig
from grpo.config.render import mindspeed_dict, render_mindspeed_model
from grpo.errors import UserError
from grpo.sweep.backends._base import RayOptions, ReportFn, TrialBackend, TrialFailed
from grpo.sweep.backends.mindspeed.log import classify_failure, clean_line, finite, parse_metrics_line
from grpo.sweep.backends.mindspeed.rules import launch_rule_problems, ray_node_problems
from grpo.sweep.spec.models import MindSpeedSpec, SweepSpec

ADMISSION_RESOURCE = "npu_slots"  # logical Ray resource, one per NPU (see the module docstring)
CONFIG_DIR = "mindspeed_config"
CONFIG_NAME = "grpo_trainer"
LAUNCH_RECORD = "launch.json"
RUNTIME_ENV = "configs/envs/runtime_env.yaml"  # RLConfig.runtime_env_path's default, read by main()
RUNTIME_ENV_FILE = "runtime_env.yaml"  # the trial's own, rendered beside grpo_trainer.yaml
# Variables of mindspeed.env that concern MindSpeed-RL's driver only, not its Ray workers.
DRIVER_ONLY_ENV = ("RAY_ADDRESS",)
# Port blocks: concurrent trials supervised on one host each lease one (a lock file held while the trial
# runs) and shift every port setting of their runtime env by it, so that no two share an HCCL/LCAL port.
PORT_LEASE_DIR = "grpo-sweep-ports"  # under the host's temporary directory
PORT_BLOCKS = 64
HCCL_PORT_STRIDE = 64  # HCCL_IF_BASE_PORT reserves a run of ports from the base (16 per node in CANN's docs)
DEFAULT_HCCL_BASE_PORT = 12345  # MindSpeed-RL's configs/envs/runtime_env.yaml
MAX_PORT = 65520  # HCCL_IF_BASE_PORT's upper bound
# Ray's internal per-process flags (ray_constants.RAY_INTERNAL_FLAGS): a new driver must not inherit them.
RAY_INTERNAL_ENV = ("RAY_JOB_ID", "RAY_RAYLET_PID", "RAY_OVERRIDE_NODE_ID_FOR_TESTING")
TAIL_LINES = 400  # lines kept for classifying a failure
REPORTED_LINES = 30  # lines attached to TrialFailed
LEFTOVER_QUIET_S = 2.0  # after the main process exits, how long its leftover children may keep printing
# A non-finite value of one of these means the run diverged (as the embedded engine's TrainingDiverged).
DIVERGENCE_KEYS = ("actor/pg_loss", "actor/kl_loss", "actor/entropy")


# ------------------------------------------------------------------------------------ checkpoints
def original_weights(cfg: GRPOConfig, settings: MindSpeedSpec) -> tuple[str | None, str]:
    """The Megatron checkpoint converted for this layout, and the key that named it.

    ``mindspeed.checkpoints.<layout>`` wins, then ``mindspeed.checkpoints.pattern``, then the config's
    own ``actor_config.load`` (a layout entry may set it).
    """
    layout = cfg.layout_name
    actor = cfg.actor_config
    if layout in settings.checkpoints:
        return settings.checkpoints[layout], f"mindspeed.checkpoints.{layout}"
    if "pattern" in settings.checkpoints:
        values = {
            "tp": actor.tensor_model_parallel_size,
            "pp": actor.pipeline_model_parallel_size,
            "layout": layout,
            "model": actor.model,
        }
        try:
            return settings.checkpoints["pattern"].format(**values), "mindspeed.checkpoints.pattern"
        except (KeyError, IndexError, ValueError) as err:
            raise ValueError(
                f"mindspeed.checkpoints.pattern: bad placeholder {err} (use {{tp}}, {{pp}}, {{layout}}, {{model}})"
            ) from None
    return actor.load, "actor_config.load"


def checkpoint_split(path: Path) -> tuple[int, int] | None:
    """(TP, PP) a Megatron checkpoint was saved with, from its ``mp_rank_XX[_YYY]`` folders, if it has any."""
    try:
        text = (path / CHECKPOINT_TRACKER).read_text().strip()
    except OSError:
        return None
    step = path / ("release" if text == "release" else f"iter_{int(text):07d}" if text.isdigit() else text)
    try:
        ranks = [[int(x) for x in p.name.split("_")[2:]] for p in step.glob("mp_rank_*") if p.is_dir()]
    except ValueError:
        return None
    if not ranks or not all(ranks):
        return None
    return 1 + max(r[0] for r in ranks), 1 + max(r[1] if len(r) > 1 else 0 for r in ranks)


@dataclass
class CheckpointCheck:
    """What is wrong with a layout's converted checkpoint, by how it is known."""

    unnamed: list[str] = field(default_factory=list)  # nothing names one, or a bad pattern: the config says so
    missing: list[str] = field(default_factory=list)  # the named folder is not on this machine
    wrong_split: list[str] = field(default_factory=list)  # it is here, converted for another TP/PP

    @property
    def all(self) -> list[str]:
        return self.unnamed + self.missing + self.wrong_split


def check_checkpoint(cfg: GRPOConfig, settings: MindSpeedSpec, source: str = "spec") -> CheckpointCheck:
    """Why this layout's checkpoint cannot be loaded: none named, missing, or converted for another TP/PP."""
    layout = cfg.layout_name
    actor = cfg.actor_config
    tp, pp = actor.tensor_model_parallel_size, actor.pipeline_model_parallel_size
    try:
        weights, key = original_weights(cfg, settings)
    except ValueError as err:
        return CheckpointCheck(unnamed=[f"{source}: {err}"])
    if not weights:
        return CheckpointCheck(
            unnamed=[
                f"{source}: layout {layout}: no Megatron checkpoint named; set "
                f"mindspeed.checkpoints.{layout}, mindspeed.checkpoints.pattern or actor_config.load"
            ]
        )
    path = settings.resolve(weights)
    if not path.is_dir():
        return CheckpointCheck(
            missing=[
                f"{source}: layout {layout}: Megatron checkpoint {path} not found ({key}); convert the "
                f"weights for TP{tp} PP{pp} with MindSpeed-LLM's checkpoint converter"
            ]
        )
    split = checkpoint_split(path)
    if split is not None and split != (tp, pp):
        return CheckpointCheck(
            wrong_split=[
                f"{source}: layout {layout}: checkpoint {path} ({key}) was converted for TP{split[0]} "
                f"PP{split[1]}, the layout needs TP{tp} PP{pp}"
            ]
        )
    return CheckpointCheck()


def checkpoint_problems(cfg: GRPOConfig, settings: MindSpeedSpec, source: str = "spec") -> list[str]:
    """Every problem of ``check_checkpoint``, as one list."""
    return check_checkpoint(cfg, settings, source).all


# -------------------------------------------------------------------------------------- rendering
@dataclass
class LaunchPlan:
    """What ``run`` launches: the config folder and name, the rendered trainer dict, how it resumes."""

    config_dir: Path
    config_name: str
    trainer: dict
    save_dir: Path
    start_iteration: int  # 0 for a fresh run, else the checkpoint iteration it resumes after
    original_weights: str | None
    tracking_env: dict[str, str] = field(default_factory=dict)  # W&B's own variables: group and mode
    runtime_env: dict[str, Any] = field(default_factory=dict)  # what MindSpeed-RL's ray.init gets (runtime_env.yaml)


def _recorded_weights(checkpoint: Path) -> str | None:
    """The original weights a previous run of this trial recorded (``<run dir>/mindspeed_config/launch.json``)."""
    try:
        return json.loads((checkpoint.parent / CONFIG_DIR / LAUNCH_RECORD).read_text()).get("original_weights")
    except (OSError, ValueError, AttributeError):
        return None


# ----------------------------------------------------------------------------- runtime env, ports
class PortLease:
    """One port block of this host, held (an exclusive lock on its file) until ``release``.

    The lock dies with the process, so a killed supervisor never keeps a block.
    """

    def __init__(self, block: int, fd: int | None):
        self.block = block
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the file drops its lock
            self._fd = None


def lease_port_block(directory: Path | None = None) -> PortLease:
    """The lowest port block no other trial on this host holds (``TrialFailed`` when all are taken)."""
    folder = directory or Path(tempfile.gettempdir()) / PORT_LEASE_DIR
    folder.mkdir(parents=True, exist_ok=True)
    # Ports are the host's, not one user's: every user's trials must see (and lock) the same files, so the
    # folder is world-writable and sticky like /tmp, and lock files are rw for all, whatever the umask.
    _chmod_if_owned(folder, 0o1777)
    for block in range(PORT_BLOCKS):
        path = folder / f"block-{block:03d}.lock"
        try:
            fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o666)
        except PermissionError:  # another user's file we cannot open: treat that block as taken
            continue
        _chmod_if_owned(path, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            continue
        return PortLease(block, fd)
    raise TrialFailed(f"no free port block: {PORT_BLOCKS} trials already run on {socket.gethostname()}")


def _chmod_if_owned(path: Path, mode: int) -> None:
    """``chmod`` what this user created (the umask narrowed it); another user's file is left as it is."""
    try:
        if path.stat().st_uid == os.getuid() and path.stat().st_mode & 0o7777 != mode:
            path.chmod(mode)
    except OSError:
        pass


def _shift_port(name: str, value: str, offset: int) -> str:
    """``value`` (a port, ``host:port`` or a ``low-high`` range) moved ``offset`` blocks up."""
    text = str(value).strip()
    try:
        if name == "LCAL_COMM_ID":
            host, _, port = text.rpartition(":")
            return f"{host}:{int(port) + offset}"
        if name.endswith("_PORT_RANGE"):
            low, _, high = text.partition("-")
            width = int(high) - int(low) + 1
            return f"{int(low) + offset * width}-{int(high) + offset * width}"
        return str(int(text) + offset * HCCL_PORT_STRIDE)
    except ValueError:
        return text  # "auto" or a form we do not know: left as written


def trial_ports(env: dict[str, str], block: int) -> dict[str, str]:
    """The port settings of one trial: ``env``'s, each moved to port block ``block`` (block 0 keeps them).

    ``HCCL_IF_BASE_PORT`` (HCCL's host-NIC ports, a run from the base; MindSpeed-RL's default file sets
    12345, the base used when nothing sets it) moves by ``HCCL_PORT_STRIDE`` per block; ``LCAL_COMM_ID``
    (``host:port`` of MindSpeed's LCAL communicator) by one port; ``HCCL_HOST_SOCKET_PORT_RANGE`` and
    ``HCCL_NPU_SOCKET_PORT_RANGE`` (``low-high``) by their own width, so the trials' ranges are disjoint.
    """
    out = {"HCCL_IF_BASE_PORT": _shift_port("HCCL_IF_BASE_PORT", env.get("HCCL_IF_BASE_PORT", ""), block)}
    if not out["HCCL_IF_BASE_PORT"].isdigit():
        out["HCCL_IF_BASE_PORT"] = str(DEFAULT_HCCL_BASE_PORT + block * HCCL_PORT_STRIDE)
    if int(out["HCCL_IF_BASE_PORT"]) > MAX_PORT:
        raise TrialFailed(
            f"HCCL_IF_BASE_PORT for port block {block} is {out['HCCL_IF_BASE_PORT']}, above {MAX_PORT}: "
            f"lower the base in mindspeed.env or runtime_env.yaml"
        )
    for name in ("LCAL_COMM_ID", "HCCL_HOST_SOCKET_PORT_RANGE", "HCCL_NPU_SOCKET_PORT_RANGE"):
        if env.get(name):
            out[name] = _shift_port(name, env[name], block)
    return out


def runtime_env_for(cfg: GRPOConfig, settings: MindSpeedSpec, port_block: int) -> dict[str, Any]:
    """The runtime env MindSpeed-RL's ``main`` passes to ``ray.init``, for one trial.

    MindSpeed-RL reads ``<checkout>/<rl_config.runtime_env_path>`` (``configs/envs/runtime_env.yaml``) and
    gives it to ``ray.init``: its ``env_vars`` are what every Ray worker of the run (the ``train`` task,
    the actor and reference workers on the NPUs) sees. The subprocess environment reaches MindSpeed-RL's
    driver only, not workers that ``ray start`` launched on the NPU nodes. So the trial renders its own
    file: the checkout's, then W&B's variables (``tracking_env``), then the spec's ``mindspeed.env``
    (without the driver-only ``RAY_ADDRESS``), then the trial's ports (``trial_ports``).
    """
    base_path = settings.resolve(getattr(cfg.rl_config, "runtime_env_path", None) or RUNTIME_ENV)
    try:
        base = read_yaml(base_path, kind="runtime env") or {}
    except UserError:
        if base_path.exists():
            raise  # a broken file (a bomb, UTF-16, bad YAML) is said in one line, not ignored
        base = {}  # the node check reports a missing file; rendering alone (tests, validate) goes on
    if not isinstance(base, dict):
        base = {}
    env_vars = {str(k): str(v) for k, v in (base.get("env_vars") or {}).items()}
    env_vars.update(tracking_env(cfg))
    env_vars.update({k: v for k, v in settings.env.items() if k not in DRIVER_ONLY_ENV})
    env_vars.update(trial_ports(env_vars, port_block))
    return {**base, "env_vars": env_vars}


def render_trial_config(
    cfg: GRPOConfig, run_dir: Path, settings: MindSpeedSpec, resume: bool, port_block: int = 0
) -> LaunchPlan:
    """Write ``<run dir>/mindspeed_config/{grpo_trainer.yaml, model/<name>.yaml, runtime_env.yaml}`` and
    return the plan.

    ``rl_config.runtime_env_path`` names the trial's own ``runtime_env.yaml`` (``runtime_env_for``: the
    checkout's, plus W&B's variables, ``mindspeed.env`` and the trial's ports of ``port_block``);
    MindSpeed-RL joins it to its checkout path, which keeps an absolute path as it is.

    Every trial saves into its own ``actor_config.save``: an absolute path as given, a relative one (or
    none) under the run dir, never into the shared checkout. A fresh run loads the layout's converted
    checkpoint. ``resume=True`` loads the
    newest checkpoint of ``actor_config.load`` (set by the driver to the failed attempt's save dir) or
    else of this run's own save dir, with MindSpeed-RL's resume keys: ``finetune: false``,
    ``no_load_optim: false``, ``no_load_rng: false`` and
    ``rl_config.integrated_mode_config.ref_model_load_path`` = the original weights, so the reference
    model stays the starting policy. Without any checkpoint a resume starts afresh.
    """
    run_dir = Path(run_dir).resolve()
    config_dir = run_dir / CONFIG_DIR
    (config_dir / "model").mkdir(parents=True, exist_ok=True)
    trainer = mindspeed_dict(cfg)
    actor = trainer["actor_config"]
    # A relative save path (MindSpeed-RL's examples use ./ckpt) is per run, so trials never share one.
    save = Path(cfg.actor_config.save or "ckpt").expanduser()
    save_dir = save if save.is_absolute() else run_dir / save
    actor["save"] = str(save_dir)

    weights, _ = original_weights(cfg, settings)
    weights_path = str(settings.resolve(weights)) if weights else None
    resume_from: Path | None = None
    if resume:
        candidates = [settings.resolve(cfg.actor_config.load)] if cfg.actor_config.load else []
        resume_from = next((c for c in [*candidates, save_dir] if checkpoint_iteration(c) is not None), None)

    start = 0
    if resume_from is not None:
        start = checkpoint_iteration(resume_from) or 0
        actor.update(load=str(resume_from), finetune=False, no_load_optim=False, no_load_rng=False)
        # The reference model must load the starting weights, not the resumed policy. Without a
        # mindspeed.checkpoints entry, actor_config.load now names the resume path: ask the attempt
        # that saved it which weights it started from.
        if weights_path and Path(weights_path) == resume_from:
            weights_path = None
        reference = settings.ref_model_load_path or weights_path or _recorded_weights(resume_from)
        if reference:
            weights_path = str(settings.resolve(reference))
            trainer["rl_config"].setdefault("integrated_mode_config", {})["ref_model_load_path"] = weights_path
    elif weights_path:
        actor["load"] = weights_path
    runtime_env = runtime_env_for(cfg, settings, port_block)
    runtime_env_path = config_dir / RUNTIME_ENV_FILE
    runtime_env_path.write_text(yaml.safe_dump(runtime_env, sort_keys=False))
    trainer["rl_config"]["runtime_env_path"] = str(runtime_env_path)
    # Hydra's own outputs go into the run dir, not into the MindSpeed-RL checkout.
    trainer["hydra"] = {"run": {"dir": str(config_dir / "hydra")}, "output_subdir": None}

    for name in cfg.model:
        model_name, text = render_mindspeed_model(cfg, name)
        (config_dir / "model" / f"{model_name}.yaml").write_text(text)
    (config_dir / f"{CONFIG_NAME}.yaml").write_text(
        f"# Rendered by grpo-sweep for {run_dir}\n" + yaml.safe_dump(trainer, sort_keys=False)
    )
    record = {
        "original_weights": weights_path,
        "resumed_from": str(resume_from) if resume_from else None,
        "start_iteration": start,
        "layout": cfg.layout_name,
        "port_block": port_block,
    }
    (config_dir / LAUNCH_RECORD).write_text(json.dumps(record, indent=2))
    return LaunchPlan(config_dir, CONFIG_NAME, trainer, save_dir, start, weights_path, tracking_env(cfg), runtime_env)


def tracking_env(cfg: GRPOConfig) -> dict[str, str]:
    """MindSpeed-RL's ``wandb.init`` takes no group or mode: W&B reads them from ``WANDB_RUN_GROUP`` and
    ``WANDB_MODE`` (an explicit mode also keeps an offline run offline when ``WANDB_API_KEY`` is set). Its
    ``swanlab.init`` gets ``rl_config.swanlab_mode`` but no group: SwanLab reads it from ``SWANLAB_GROUP``."""
    env = {}
    if cfg.engine.wandb_group:
        env["WANDB_RUN_GROUP"] = cfg.engine.wandb_group
    if cfg.engine.wandb_mode:
        env["WANDB_MODE"] = cfg.engine.wandb_mode
    if getattr(cfg.rl_config, "use_swanlab", False) and getattr(cfg.engine, "swanlab_group", None):
        env["SWANLAB_GROUP"] = str(cfg.engine.swanlab_group)  # its SwanLabLogger passes no group either (0.7 on)
    return env


# ---------------------------------------------------------------------------------------- process
def launch_command(settings: MindSpeedSpec, plan: LaunchPlan) -> list[str]:
    """``<python> <entry> --config-path <rendered dir> --config-name grpo_trainer``.

    ``--config-path``, not ``--config-dir``: MindSpeed-RL's entry point declares
    ``@hydra.main(config_path='../configs', ...)``, and Hydra searches that folder of the checkout first;
    ``--config-dir`` is only inserted after it (hydra/_internal/utils.py, ``_run_hydra``: prepended
    before the ``schema`` entry). A checkout file with the same name as a rendered one (its
    ``configs/model/qwen25_7b.yaml``, or a ``configs/grpo_trainer.yaml``) then replaced ours, and a swept
    model key was silently lost. ``--config-path`` replaces the ``config_path`` of ``hydra.main``
    (same function), so the rendered folder is the only config folder on the search path: no file of
    any checkout can shadow the rendered trainer or its model files, whatever they are named, and the
    rendered layout stays MindSpeed-RL's own (defaults list ``model: [<name>]``, composed key
    ``model.<name>``). Nothing else is lost: the rendered folder holds every file the defaults list names.
    """
    return [
        settings.interpreter,
        settings.entry,
        "--config-path",
        str(plan.config_dir),
        "--config-name",
        plan.config_name,
    ]


def _in_ray_worker() -> bool:
    if "ray" not in sys.modules:
        return False
    import ray

    return ray.is_initialized()


def _ray_context() -> tuple[str | None, list[str]]:
    """(GCS address of the cluster this worker is in, NPU ids Ray assigned to it); (None, []) outside Ray."""
    if not _in_ray_worker():
        return None, []
    import ray

    try:
        ctx = ray.get_runtime_context()
        return ctx.gcs_address, [str(i) for i in ctx.get_accelerator_ids().get("NPU", [])]
    except Exception:  # a half-initialised Ray: launch without it rather than fail the trial
        return None, []


def launch_env(settings: MindSpeedSpec, ray_address: str | None = None) -> dict[str, str]:
    """The subprocess environment: ours, plus what MindSpeed-RL needs, then the spec's ``mindspeed.env``.

    ``RAY_ADDRESS`` is the cluster this worker runs in (its GCS address), else ``ray_address`` (the
    study's ``cluster.address``) when it is a concrete one; ``local``/``auto`` are resolved inside Ray
    only. ``ASCEND_RT_VISIBLE_DEVICES`` lists the NPUs Ray gave this worker, when it was given any.
    """
    env = {k: v for k, v in os.environ.items() if k not in RAY_INTERNAL_ENV}
    env["HYDRA_FULL_ERROR"] = "1"
    env["PYTHONUNBUFFERED"] = "1"  # lines arrive as printed: stall detection and pruning see them live
    env["RAY_DEDUP_LOGS"] = "0"  # every line reaches the log (MindSpeed-RL's own scripts do the same)
    gcs_address, npus = _ray_context()
    if gcs_address:
        env["RAY_ADDRESS"] = gcs_address
    elif ray_address and ray_address not in ("local", "auto"):
        env["RAY_ADDRESS"] = ray_address
    if npus:
        env["ASCEND_RT_VISIBLE_DEVICES"] = ",".join(npus)
    env.update(settings.env)
    return env


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def stop_process_group(proc: subprocess.Popen, grace: float) -> None:
    """SIGTERM the process group, wait up to ``grace`` s for all of it to exit, then SIGKILL what is left."""
    pgid = proc.pid  # start_new_session=True: the child leads its own group
    _signal_group(pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        proc.poll()
        if proc.returncode is not None and not group_alive(pgid):
            return
        time.sleep(0.05)
    _signal_group(pgid, signal.SIGKILL)
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass
    deadline = time.monotonic() + 5
    while group_alive(pgid) and time.monotonic() < deadline:  # a killed member may linger a moment
        time.sleep(0.05)


def _pump(stream: IO[bytes], lines: queue.Queue[bytes | None]) -> None:
    for raw in iter(stream.readline, b""):
        lines.put(raw)
    lines.put(None)


# ---------------------------------------------------------------------------------------- backend
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
        return problems

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
        reader = threading.Thread(target=_pump, args=(proc.stdout, lines), daemon=True)
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
