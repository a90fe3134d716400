"""A stand-in for ``python -m verl.trainer.main_ppo`` (verl 0.9.1) on a CPU: what grpo-sweep's verl backend meets
when it launches a trial, without GPUs, vLLM or a model.

Real: the config. It is verl's own ``ppo_trainer`` from the installed verl (``verl/trainer/config``, found without
importing verl), composed by Hydra with the job's command-line overrides, so an override verl would refuse fails
here the same way ("Could not override ...", exit 1).

Mirrored from verl-0.9.1's source (what is mirrored, and where; nothing else is):
- the ``file`` logger (``verl/utils/tracking.py`` ``FileLogger``): ``$VERL_FILE_LOGGER_PATH`` opened ``"wb"`` with
  ``buffering=0`` (a resume truncates it), one ``orjson.dumps({"step": N, "data": {...}},
  option=OPT_SERIALIZE_NUMPY) + b"\\n"`` per step; tests/test_verl_standin.py runs verl's own FileLogger source
  and compares the bytes;
- the step loop (``verl/trainer/ppo/v1/trainer_base.py`` ``_init_dataloader`` and ``fit``): steps
  1..``trainer.total_training_steps`` (from the resumed step + 1) while the epoch ``(step - 1) // steps_per_epoch``
  is below ``trainer.total_epochs``, ``steps_per_epoch = len(train parquet) // data.train_batch_size`` (a
  ZeroDivisionError when the file holds fewer rows than one batch, as in verl), a save when ``save_freq > 0`` and (last step or ``step % save_freq == 0``),
  validation metrics merged into the step's row when ``test_freq > 0`` and (last step or ``step % test_freq
  == 0``), ``val_before_train`` logging the start step;
- the checkpoint layout (``_save_checkpoint``, ``utils/checkpoint/fsdp_checkpoint_manager.py``):
  ``<default_local_dir>/global_step_N/actor/{model,optim,extra_state}_world_size_W_rank_R.pt`` (+ ``huggingface/``,
  ``fsdp_config.json``), ``global_step_N/data.pt``, then ``<default_local_dir>/latest_checkpointed_iteration.txt``
  holding N; ``max_actor_ckpt_to_keep`` older ``global_step_*`` folders removed;
- resuming (``_load_checkpoint``): ``resume_mode`` disable / auto (the tracker file) / resume_path (must contain
  ``global_step_``, the step parsed from the folder name); ``actor.checkpoint.load_contents`` decides which of
  model, optimizer and extra are read (here: the JSON the stand-in saved in their place);
- the metric names (``verl/trainer/ppo/metric_utils.py``, ``core_algos.py``): ``critic/score/mean``,
  ``actor/pg_loss``, ``actor/kl_loss``, ``actor/entropy``, ``actor/pg_clipfrac``, ``actor/lr``,
  ``response_length/mean``, ``timing_s/step``, ``training/global_step``, ``val-core/<source>/acc/mean@1``;
- Ray: the driver joins the job's cluster (``ray.init()`` with no address, as main_ppo's ``run_ppo``) and starts
  its workers as actors of that job (one ``RolloutWorker`` standing for verl's rollout/actor workers, named
  ``<experiment_name>-rollout`` in namespace ``standin_verl``, owned by the job's driver as verl's are), so stopping
  the job must end them too.

Not verl: the numbers. The score rises toward a ceiling at a rate set by the learning rate and clip ratio (an lr
far from 1e-6 learns slower), deterministic per step; ``STANDIN_STEP_S`` (default 0.3 s) is a step's duration,
``STANDIN_FAIL_AT`` makes a step raise (a crash), ``STANDIN_NO_RAY=1`` skips the workers.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import shutil
import sys
import time
from pathlib import Path


def verl_config_dir() -> str:
    spec = importlib.util.find_spec("verl")
    assert spec is not None and spec.submodule_search_locations, "verl must be installed (its config is the real one)"
    return str(Path(list(spec.submodule_search_locations)[0]) / "trainer" / "config")


def compose(overrides: list[str]):
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    with initialize_config_dir(config_dir=verl_config_dir(), version_base=None):
        return hydra_compose(config_name="ppo_trainer", overrides=overrides)


class FileLogger:
    """verl-0.9.1:verl/utils/tracking.py FileLogger, line for line (the print included)."""

    def __init__(self, project_name: str, experiment_name: str):
        self.project_name = project_name
        self.experiment_name = experiment_name
        self.filepath = os.getenv("VERL_FILE_LOGGER_PATH", None)
        if self.filepath is None:
            root_path = os.path.expanduser(os.getenv("VERL_FILE_LOGGER_ROOT", "."))
            directory = os.path.join(root_path, self.project_name)
            os.makedirs(directory, exist_ok=True)
            self.filepath = os.path.join(directory, f"{self.experiment_name}.jsonl")
        print(f"Creating file logger at {os.path.abspath(self.filepath)}")
        self.fp = open(self.filepath, "wb", buffering=0)

    def log(self, data, step):
        import orjson

        data = {"step": step, "data": data}
        self.fp.write(orjson.dumps(data, option=orjson.OPT_SERIALIZE_NUMPY) + b"\n")

    def finish(self):
        self.fp.close()


WORKER_NAMESPACE = "standin_verl"  # where tests look the job's worker up


def start_workers(experiment: str):
    """The job's workers: actors of this job (verl's TaskRunner, rollout and actor workers are)."""
    import ray

    ray.init(log_to_driver=False)

    @ray.remote(num_cpus=0)
    class RolloutWorker:
        def ping(self):
            return os.getpid()

    worker = RolloutWorker.options(name=f"{experiment}-rollout", namespace=WORKER_NAMESPACE).remote()
    print(f"rollout worker pid {ray.get(worker.ping.remote())}", flush=True)
    return worker


def load_checkpoint(config) -> tuple[int, dict]:
    """(global step, what was loaded), as trainer_base._load_checkpoint finds the folder."""
    trainer = config.trainer
    if trainer.resume_mode == "disable":
        return 0, {}
    if trainer.resume_mode == "auto":
        tracker = Path(trainer.default_local_dir) / "latest_checkpointed_iteration.txt"
        if not tracker.is_file():
            print("Training from scratch", flush=True)
            return 0, {}
        folder = str(Path(trainer.default_local_dir) / f"global_step_{int(tracker.read_text())}")
    else:
        assert isinstance(trainer.resume_from_path, str), "resume ckpt must be str type"
        assert "global_step_" in trainer.resume_from_path, "resume ckpt must specify the global_steps"
        folder = trainer.resume_from_path
    step = int(folder.split("global_step_")[-1])
    contents = list(config.actor_rollout_ref.actor.checkpoint.load_contents)
    state = json.loads((Path(folder) / "actor" / "standin_state.json").read_text())
    loaded = {"contents": contents, "model": state["model"]}
    if "optimizer" in contents:
        loaded["optimizer_lr"] = state["lr"]  # a restored AdamW param group carries the saved lr
    if "extra" in contents:
        loaded["scheduler_step"] = state["step"]
    print(f"Resuming from {folder}, setting global step to {step}; loaded {loaded}", flush=True)
    return step, loaded


def save_checkpoint(config, step: int, lr: float, model: float) -> None:
    root = Path(config.trainer.default_local_dir)
    folder = root / f"global_step_{step}"
    actor = folder / "actor"
    actor.mkdir(parents=True, exist_ok=True)
    world = int(config.trainer.n_gpus_per_node) * int(config.trainer.nnodes)
    for rank in range(world):
        for kind in ("model", "optim", "extra_state"):
            (actor / f"{kind}_world_size_{world}_rank_{rank}.pt").write_bytes(b"standin")
    (actor / "huggingface").mkdir(exist_ok=True)
    (actor / "fsdp_config.json").write_text(json.dumps({"FSDP_version": 2, "world_size": world}))
    (actor / "standin_state.json").write_text(json.dumps({"lr": lr, "step": step, "model": model}))
    (folder / "data.pt").write_bytes(b"standin dataloader state")
    keep = config.trainer.get("max_actor_ckpt_to_keep", None)
    if keep:
        old = sorted((p for p in root.glob("global_step_*") if p != folder), key=lambda p: int(p.name.split("_")[-1]))
        for path in old[: max(0, len(old) - (int(keep) - 1))]:
            shutil.rmtree(path, ignore_errors=True)
    (root / "latest_checkpointed_iteration.txt").write_text(str(step))


def main(argv: list[str]) -> int:
    config = compose(argv)
    trainer, actor = config.trainer, config.actor_rollout_ref.actor
    worker = None if os.environ.get("STANDIN_NO_RAY") == "1" else start_workers(trainer.experiment_name)
    step, loaded = load_checkpoint(config)
    lr, clip = float(actor.optim.lr), float(actor.clip_ratio_high)
    if "optimizer_lr" in loaded:
        lr = loaded["optimizer_lr"]  # what verl does: the restored optimizer's param groups win over the config
    model = float(loaded.get("model", 0.0))
    logger = FileLogger(trainer.project_name, trainer.experiment_name)
    total = int(trainer.total_training_steps)
    import pyarrow.parquet as pq

    steps_per_epoch = pq.read_metadata(config.data.train_files).num_rows // int(config.data.train_batch_size)
    epoch = step // steps_per_epoch
    step_s = float(os.environ.get("STANDIN_STEP_S", "0.3"))
    fail_at = int(os.environ.get("STANDIN_FAIL_AT", "0"))
    rate = 0.15 * math.exp(-abs(math.log10(lr) + 6.0)) * (1.0 + clip)
    if trainer.val_before_train:
        logger.log({"val-core/standin/acc/mean@1": 1 - math.exp(-model)}, step)
    step += 1
    while epoch < int(trainer.total_epochs) and step <= total:
        is_last = step >= total
        t0 = time.monotonic()
        time.sleep(step_s)
        if step == fail_at:
            raise RuntimeError(f"standin: step {step} failed (STANDIN_FAIL_AT)")
        model += rate
        score = 1 - math.exp(-model)
        metrics = {
            "critic/score/mean": score,
            "critic/rewards/mean": score,
            "actor/pg_loss": -0.01 * score,
            "actor/kl_loss": 0.001 * step,
            "actor/entropy": 1.0 - 0.5 * score,
            "actor/pg_clipfrac": 0.01,
            "actor/lr": lr,
            "response_length/mean": 20.0,
            "training/global_step": step,
        }
        if trainer.save_freq > 0 and (is_last or step % trainer.save_freq == 0):
            save_checkpoint(config, step, lr, model)
        if trainer.test_freq > 0 and (is_last or step % trainer.test_freq == 0):
            metrics["val-core/standin/acc/mean@1"] = score
        metrics["timing_s/step"] = time.monotonic() - t0
        logger.log(data=metrics, step=step)
        print(f"step:{step} - critic/score/mean:{score:.4f}", flush=True)
        step += 1
        epoch = (step - 1) // steps_per_epoch
    logger.finish()
    del worker
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
