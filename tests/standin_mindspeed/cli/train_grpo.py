"""STAND-IN for MindSpeed-RL's ``cli/train_grpo.py`` -- for grpo-sweep's tests only, NOT MindSpeed-RL.

The real entry point needs Ascend NPUs, Megatron and vLLM; this script stands in for it so the
mindspeed backend's launch path can be tested on a CPU. It trains nothing. It behaves like the real
one where the backend depends on it:

- it is a Hydra app declared as the real one is (``@hydra.main(config_path='../configs',
  config_name='grpo_qwen25_7b_A3')``), so its own ``configs/`` folder (with a ``model/qwen25_7b.yaml``
  like the real checkout's) is on Hydra's search path, and a ``--config-dir`` is searched only after it;
  it composes whatever it is given (``--config-path``/``--config-dir``, ``--config-name``) through the
  defaults list, then prints the actor's Megatron arguments as Megatron's ``_print_args`` does
  (``  max_position_embeddings ........ 16384``), so tests can read what it really composed;
- like MindSpeed-RL's ``main`` it opens ``<checkout>/configs/envs/runtime_env.yaml`` (``runtime_env_path``)
  and, like its ``get_tokenizer``, refuses a ``tokenizer_name_or_path`` that is not a directory;
- it refuses keys MindSpeed-RL's config classes do not have (``ValueError: The key: X is missing ...``,
  key list in ../mindspeed_keys.yaml) and a few of MindSpeed-RL's cross-checks;
- with ``RAY_ADDRESS`` set it joins that Ray cluster and reserves its NPUs with a placement group of
  ``actor_resource.num_npus`` bundles of ``{"NPU": 1}``, as MindSpeed-RL's launcher does (no CPUs in
  the bundles, so it fits small test machines); ``GRPO_STANDIN_RAY=0`` skips this (and a sweep test
  on a cluster without ``NPU`` resources needs it);
- it prints MindSpeed-RL's iteration lines behind Ray's ``(train pid=N)`` prefix, with metrics that
  follow the config (the score rises faster with a larger lr / clip_ratio and a smaller init_kl_coef;
  timing depends on TP/PP), saves Megatron-style checkpoints (``latest_checkpointed_iteration.txt``,
  ``iter_XXXXXXX/mp_rank_TT[_PPP]``) into ``actor_config.save`` every ``save_interval`` and at the end,
  and resumes from ``actor_config.load`` when ``finetune`` is false.

Knobs (environment):
  GRPO_STANDIN_FAIL       ``KIND[@ITERATION][:KEY=VALUE[,KEY=VALUE...]]``: fail during ITERATION (default 1),
                          only when every dotted config KEY has VALUE (e.g.
                          ``hccl_timeout@2:actor_config.tensor_model_parallel_size=8``). KIND: hccl_timeout,
                          oom, actor_died, exit3, stall (stop printing, hang), nan (NaN loss), sigkill.
  GRPO_STANDIN_FAIL_ONCE  path of a marker file: fail only while it does not exist (created on failing).
  GRPO_STANDIN_ITER_S     seconds per iteration (default 0.02); GRPO_STANDIN_STARTUP_S: silent start-up.
  GRPO_STANDIN_NAMES      ``old``: print the metric names of MindSpeed-RL <= 2.0 (tokens/p/s, grpo/lr ...).
  GRPO_STANDIN_COLOR      ``1``: colour the Ray prefix with ANSI codes, as Ray does on a terminal.
  GRPO_STANDIN_CHILD_PIDFILE  spawn a helper child process (same process group) and write its pid here.
  GRPO_STANDIN_IGNORE_SIGTERM ``1``: ignore SIGTERM (so only SIGKILL stops it).
  GRPO_STANDIN_RAY        ``0``: do not join the Ray cluster in RAY_ADDRESS (no placement group).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import signal
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import hydra
import yaml
from omegaconf import DictConfig, OmegaConf

CHECKOUT = Path(__file__).resolve().parents[1]  # the stand-in "checkout" (cli/, configs/)
KEYS = yaml.safe_load((CHECKOUT / "mindspeed_keys.yaml").read_text())
TRACKER = "latest_checkpointed_iteration.txt"
PID = os.getpid()


def say(text: str) -> None:
    """One console line as Ray forwards a task's output: behind ``(train pid=N)``."""
    prefix = f"(train pid={PID})"
    if os.environ.get("GRPO_STANDIN_COLOR") == "1":
        prefix = f"\x1b[36m{prefix}\x1b[0m"
    print(f"{prefix} {text}", flush=True)


def log_info(text: str) -> None:
    now = datetime.now(tz=timezone.utc)
    say(f"{now.strftime('%Y-%m-%d %H:%M:%S')},{now.microsecond // 1000:03d} - INFO - {text}")


def missing_key(key: str) -> None:
    raise ValueError(f"The key: {key} is missing, causing the setup to fail. Please check."
                     f" If necessary, register it in the config file.")


def check_keys(config: dict) -> None:
    """MindSpeed-RL's config classes accept only the attributes they define."""
    megatron = set(KEYS["megatron"])
    model_name = config["megatron_training"]["model"]
    model = config["model"][model_name]  # KeyError, as MindSpeed-RL's update() raises
    for section in (config["megatron_training"], config["actor_config"], model):
        for key in section:
            if key != "model" and key.replace("-", "_") not in megatron:
                missing_key(key)
    for key in config["rl_config"]:
        if key not in KEYS["rl"]:
            missing_key(key)
    for key in config["generate_config"]:
        if key not in KEYS["generate"]:
            missing_key(key)
    for key in config["generate_config"].get("sampling_config", {}):
        if key not in KEYS["sampling"]:
            missing_key(key)


def check_rules(train: dict, rl: dict, gen: dict) -> None:
    """A few of MindSpeed-RL's validate_rl_args checks (and of parse_training_config / WandbLogger)."""
    if not rl.get("use_integrated_worker", True):
        raise ValueError("use_integrated_worker: false needs ref_config and reward_config sections")
    if rl.get("use_wandb") and rl.get("wandb_project") and not rl.get("wandb_exp_name"):
        raise ValueError("Please specify the wandb experiment name!")
    if not train.get("bf16") or gen.get("dtype", "bfloat16") != "bfloat16":
        raise ValueError("bf16 training and bfloat16 generation are required")
    if gen["max_model_len"] < train["seq_length"]:
        raise ValueError(f"max_model_len {gen['max_model_len']} must be >= seq_length {train['seq_length']}")
    tp, pp = train["tensor_model_parallel_size"], train["pipeline_model_parallel_size"]
    npus = rl["actor_resource"]["num_npus"]
    if npus % (tp * pp):
        raise ValueError(f"actor num_npus {npus} must be divisible by TP {tp} * PP {pp}")
    if train["global_batch_size"] % (npus // (tp * pp)):
        raise ValueError(f"global_batch_size {train['global_batch_size']} must be divisible by DP {npus // (tp * pp)}")


def dotted(config: dict, key: str):
    value = config
    for part in key.split("."):
        value = value[part]
    return value


def same(actual, wanted: str) -> bool:
    try:
        return float(actual) == float(wanted)
    except (TypeError, ValueError):
        return str(actual).lower() == wanted.lower()


def planned_failure(config: dict) -> tuple[str, int] | None:
    """The (kind, iteration) GRPO_STANDIN_FAIL asks for, if its conditions hold for this config."""
    text = os.environ.get("GRPO_STANDIN_FAIL", "").strip()
    if not text:
        return None
    head, _, conditions = text.partition(":")
    kind, _, at = head.partition("@")
    for condition in filter(None, conditions.split(",")):
        key, _, wanted = condition.partition("=")
        try:
            if not same(dotted(config, key.strip()), wanted.strip()):
                return None
        except (KeyError, TypeError):
            return None
    once = os.environ.get("GRPO_STANDIN_FAIL_ONCE")
    if once and Path(once).exists():
        return None
    return kind.strip(), int(at or 1)


def fail(kind: str, iteration: int) -> None:
    """Print what the real stack prints for this kind of failure, then exit the way it does."""
    once = os.environ.get("GRPO_STANDIN_FAIL_ONCE")
    if once:
        Path(once).parent.mkdir(parents=True, exist_ok=True)
        Path(once).write_text(f"{kind}@{iteration}\n")
    stamp = datetime.now().strftime("%Y-%m-%d-%H:%M:%S")
    if kind == "hccl_timeout":
        for line in (
            "Traceback (most recent call last):",
            "  File \"mindspeed_rl/workers/integrated_worker.py\", line 210, in update",
            "RuntimeError: npuSynchronizeDevice:build/CMakeFiles/torch_npu.dir/compiler_depend.ts:479 NPU function error: "
            "AclrtSynchronizeDeviceWithTimeout, error code is 507048",
            f"[ERROR] {stamp} (PID:{PID}, Device:0, RankID:3) ERR00100 PTA call acl api failed",
            "[Error]: The execution of the internal task times out.",
            f"EI0002: [PID: {PID}] {stamp}.586.187 The wait execution of the Notify register times out. Reason: The Notify "
            "register has not received the Notify record from remote rank: [1]. base information: [streamID:[1], "
            "taskID[8318285], tag[AllReduce_group_name_710]]",
        ):
            say(line)
        sys.exit(1)
    if kind == "oom":
        say("Traceback (most recent call last):")
        say("RuntimeError: NPU out of memory. Tried to allocate 2.00 GiB (NPU 3; 60.96 GiB total capacity; "
            "57.10 GiB already allocated; 57.10 GiB current active; 1.21 GiB free; 58.30 GiB reserved in total by PyTorch)")
        sys.exit(1)
    if kind == "actor_died":
        say("ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task.")
        sys.exit(1)
    if kind == "exit3":
        say("ValueError: injected failure (GRPO_STANDIN_FAIL=exit3)")
        sys.exit(3)
    if kind == "sigkill":
        os.kill(PID, signal.SIGKILL)
    if kind == "stall":
        while True:  # stop printing, as a rank stuck in a collective does
            time.sleep(3600)
    if kind == "nan":
        return
    raise SystemExit(f"unknown GRPO_STANDIN_FAIL kind {kind!r}")


def noise(seed: int, iteration: int) -> float:
    digest = hashlib.sha256(f"{seed}:{iteration}".encode()).digest()
    return (int.from_bytes(digest[:4], "big") / 2**32 - 0.5) * 0.02


def iteration_metrics(config: dict, iteration: int, nan_loss: bool) -> dict[str, float]:
    """Metrics of one iteration: a saturating score curve whose speed follows lr, clip_ratio, init_kl_coef."""
    train = {**config["megatron_training"], **config["actor_config"]}
    rl, gen = config["rl_config"], config["generate_config"]
    sampling = gen.get("sampling_config", {})
    tp, pp = train["tensor_model_parallel_size"], train["pipeline_model_parallel_size"]
    npus = rl["actor_resource"]["num_npus"]
    rate = 0.15 * math.sqrt(float(train["lr"]) / 1e-6) * (float(rl["clip_ratio"]) / 0.2)
    rate /= 1.0 + 20.0 * float(rl["init_kl_coef"])
    ceiling = 0.9 - 0.3 * abs(float(sampling.get("temperature", 1.0)) - 1.0)
    progress = 1.0 - math.exp(-rate * iteration)
    score = 0.2 + (ceiling - 0.2) * progress + noise(int(train.get("seed", 0)), iteration)
    gbs, n = train["global_batch_size"], rl["n_samples_per_prompt"]
    response = 0.5 * sampling.get("max_tokens", 2048) * (1.0 + 0.3 * progress)
    prompt = 0.25 * rl["max_prompt_length"]
    micro_batches = max(1, gbs * n // (npus // (tp * pp)) // train["micro_batch_size"])
    update = 12.0 * (1.0 + 0.06 * (tp - 1)) * (1.0 + (pp - 1) / micro_batches)
    rollout = 25.0 * (1.0 + 0.04 * (gen["infer_tensor_parallel_size"] - 1))
    total = update + rollout + 4.0
    tokens = (response + prompt) * gbs * n / npus
    return {
        "timing/all": total, "timing/update": update, "timing/rollout": rollout,
        "actor/entropy": 1.2 * math.exp(-0.5 * rate * iteration) + 0.3,
        "actor/kl_loss": 0.004 * progress / (1.0 + 20.0 * float(rl["init_kl_coef"])),
        "actor/pg_loss": float("nan") if nan_loss else 0.05 * (1.0 - progress) + abs(noise(7, iteration)),
        "actor/pg_clipfrac": 0.01 + 0.1 * float(rl["clip_ratio"]) * (1.0 - progress),
        "actor/ppo_kl": 0.0005 * (1.0 - progress),
        "actor/grad_norm": 0.4 + 0.2 * (1.0 - progress),
        "actor/lr": float(train["lr"]),
        "grpo/score/mean": score, "grpo/score/max": 1.0, "grpo/score/min": 0.0,
        "grpo/rewards/mean": score, "grpo/rewards/max": 1.0, "grpo/rewards/min": 0.0,
        "response_length/mean": response, "response_length/max": float(sampling.get("max_tokens", 2048)),
        "prompt_length/mean": prompt,
        "e2e_tps": tokens / total, "update_tps": tokens / update, "vllm_tps": tokens / rollout,
    }


OLD_NAMES = {"e2e_tps": "tokens/p/s", "vllm_tps": "vllm_throughput", "actor/lr": "grpo/lr",
             "actor/grad_norm": "grad_norm"}


def metrics_line(metrics: dict[str, float], iteration: int, total: int) -> str:
    """MindSpeed-RL's Loggers.handle_msg format: lr in %e, everything else with 4 decimals."""
    old = os.environ.get("GRPO_STANDIN_NAMES") == "old"
    fields = []
    for key, value in metrics.items():
        if old and key == "update_tps":
            continue
        name = OLD_NAMES.get(key, key) if old else key
        fields.append(f"{name} : {value:e}" if "lr" in name else f"{name} : {format(value, '.4f')}")
    stamp = datetime.now(tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S")
    return f"[{stamp}] iteration: {iteration} / {total} | " + " | ".join(fields)


def save_checkpoint(save: Path, iteration: int, tp: int, pp: int, metrics: dict) -> None:
    """Megatron's layout: iter_XXXXXXX/mp_rank_TT[_PPP]/ per rank, then the tracker file."""
    step = save / f"iter_{iteration:07d}"
    for t in range(tp):
        for p in range(pp):
            rank = step / (f"mp_rank_{t:02d}" if pp == 1 else f"mp_rank_{t:02d}_{p:03d}")
            rank.mkdir(parents=True, exist_ok=True)
            (rank / "model_optim_rng.pt").write_text(json.dumps({"iteration": iteration, "standin": True}))
    (save / TRACKER).write_text(str(iteration))
    log_info(f"successfully saved checkpoint from iteration {iteration:7d} to {save}")


def resume_point(actor: dict) -> int:
    """The iteration to continue after: the tracker of ``load`` when finetune is false, else 0."""
    load = actor.get("load")
    tracker = Path(load) / TRACKER if load else None
    if not load or tracker is None or not tracker.is_file():
        say(f" WARNING: could not find the metadata file {tracker}")
        say("    will not load any checkpoints and will start from random")
        return 0
    text = tracker.read_text().strip()
    if actor.get("finetune", False) or text == "release":
        log_info(f"loading release checkpoint from {load} (finetune: iteration count restarts)")
        return 0
    log_info(f"loading checkpoint from {load} at iteration {text} (optimizer: {not actor.get('no_load_optim', True)}, "
             f"rng: {not actor.get('no_load_rng', True)})")
    return int(text)


def reserve_npus(num_npus: int):
    """Join the cluster in RAY_ADDRESS and hold a placement group of num_npus NPU bundles, like MindSpeed-RL."""
    if not os.environ.get("RAY_ADDRESS") or os.environ.get("GRPO_STANDIN_RAY") == "0":
        return None
    import ray
    from ray.util.placement_group import placement_group

    ray.init(log_to_driver=False, configure_logging=False)
    pg = placement_group([{"NPU": 1}] * num_npus, strategy="STRICT_PACK")
    log_info(f"waiting for a placement group of {num_npus} NPUs")
    ray.get(pg.ready())
    log_info(f"placement group of {num_npus} NPUs ready")
    return pg


def print_args(args: dict) -> None:
    """The actor's merged Megatron arguments, as Megatron's ``_print_args`` prints them at start-up."""
    say("------------------------ arguments ------------------------")
    for key in sorted(args):
        if not isinstance(args[key], (dict, list)):
            say(f"  {key} {'.' * (48 - len(key))} {args[key]}")
    say("-------------------- end of arguments ---------------------")


def open_runtime_env(rl: dict) -> dict:
    """MindSpeed-RL's main opens ``os.path.join(<checkout>, rl_config.runtime_env_path)`` (an absolute
    path stays itself) before ``ray.init``, adds IS_MULTIMODAL and HCCL_BUFFSIZE, logs it, and gives it to
    ``ray.init``: its env_vars are what the Ray workers see, so the stand-in takes them on itself."""
    path = os.path.join(CHECKOUT, rl.get("runtime_env_path", "configs/envs/runtime_env.yaml"))
    with open(path) as file:  # FileNotFoundError, as the real one raises
        runtime_env = yaml.safe_load(file)
    runtime_env["env_vars"]["IS_MULTIMODAL"] = str(rl.get("is_multimodal", False))
    runtime_env["env_vars"]["HCCL_BUFFSIZE"] = str(rl.get("hccl_buffersize", 256))
    log_info(f"ray init with runtime_env: {runtime_env}")
    os.environ.update({str(k): str(v) for k, v in runtime_env["env_vars"].items()})
    return runtime_env


def check_tokenizer(train: dict) -> None:
    """MindSpeed-RL's get_tokenizer: a HuggingFace tokenizer folder (relative to where it runs)."""
    path = train.get("tokenizer_name_or_path")
    if not path or not os.path.isdir(path):
        raise ValueError(f"tokenizer_model {path} should be a directory for HuggingFaceTokenizer")


# As the real entry point: its own configs/ is the primary search path (tests rely on it).
@hydra.main(config_path="../configs", config_name="grpo_qwen25_7b_A3", version_base=None)
def main(cfg: DictConfig) -> None:
    config = OmegaConf.to_container(cfg, resolve=True)
    check_keys(config)
    train = {**config["model"][config["megatron_training"]["model"]], **config["megatron_training"],
             **config["actor_config"]}
    rl, gen = config["rl_config"], config["generate_config"]
    open_runtime_env(rl)
    check_rules(train, rl, gen)
    print_args(train)
    check_tokenizer(train)
    if os.environ.get("GRPO_STANDIN_IGNORE_SIGTERM") == "1":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    pidfile = os.environ.get("GRPO_STANDIN_CHILD_PIDFILE")
    if pidfile:  # a helper process in our process group, as MindSpeed-RL's driver has (Ray's log monitor ...)
        child = subprocess.Popen([sys.executable, "-c", "import time\nwhile True: time.sleep(1)"])
        Path(pidfile).write_text(str(child.pid))
    time.sleep(float(os.environ.get("GRPO_STANDIN_STARTUP_S", "0")))
    pg = reserve_npus(int(rl["actor_resource"]["num_npus"]))

    tp, pp = train["tensor_model_parallel_size"], train["pipeline_model_parallel_size"]
    reference = (rl.get("integrated_mode_config") or {}).get("ref_model_load_path") or train.get("load")
    log_info(f"reference model weights: {reference}")
    start = resume_point(train)
    total, save_interval = int(train["train_iters"]), int(train["save_interval"])
    save = Path(train["save"]) if train.get("save") else None
    failure = planned_failure(config)
    log_info(f"{'sync' if rl.get('blocking', True) else 'async'} start grpo training at iteration: {start}/{total} ...")
    for iteration in range(start + 1, total + 1):
        time.sleep(float(os.environ.get("GRPO_STANDIN_ITER_S", "0.02")))
        nan_loss = failure is not None and failure == ("nan", iteration)
        if failure is not None and failure[1] == iteration and failure[0] != "nan":
            fail(*failure)
        metrics = iteration_metrics(config, iteration, nan_loss)
        log_info(metrics_line(metrics, iteration, total))
        if save is not None and (iteration % save_interval == 0 or iteration == total):
            save_checkpoint(save, iteration, tp, pp, metrics)
    log_info("after grpo training is done")
    if pg is not None:
        import ray

        ray.util.remove_placement_group(pg)
        ray.shutdown()


if __name__ == "__main__":
    main()
