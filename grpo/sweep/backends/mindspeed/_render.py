"""Rendering one trial: MindSpeed-RL's trainer YAML, model files, runtime env and launch record."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from grpo._fs import checkpoint_iteration
from grpo._yaml import read_yaml
from grpo.config import GRPOConfig
from grpo.config.render import mindspeed_dict, render_mindspeed_model
from grpo.errors import UserError
from grpo.sweep.backends.mindspeed._checkpoints import original_weights
from grpo.sweep.backends.mindspeed._ports import trial_ports
from grpo.sweep.spec.models import MindSpeedSpec

CONFIG_DIR = "mindspeed_config"
CONFIG_NAME = "grpo_trainer"
LAUNCH_RECORD = "launch.json"
RUNTIME_ENV = "configs/envs/runtime_env.yaml"  # RLConfig.runtime_env_path's default, read by main()
RUNTIME_ENV_FILE = "runtime_env.yaml"  # the trial's own, rendered beside grpo_trainer.yaml
# Variables of mindspeed.env that concern MindSpeed-RL's driver only, not its Ray workers.
DRIVER_ONLY_ENV = ("RAY_ADDRESS",)


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
    if cfg.engine.exit_interval:  # a pbt segment: MindSpeed-RL has no exit interval, it stops at train_iters
        end = (start // cfg.engine.exit_interval + 1) * cfg.engine.exit_interval
        trainer.setdefault("megatron_training", {})["train_iters"] = min(cfg.megatron_training.train_iters, end)
    if resume_from is not None:
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
