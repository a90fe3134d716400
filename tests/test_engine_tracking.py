"""W&B and TensorBoard from the engine, read back from the files they write (no network).

The W&B run is read from its offline transaction log (``run-<id>.wandb``): W&B's own format, a 7-byte
``:W&B`` header then LevelDB-log blocks of 32 KiB whose chunks (crc32, length, type full/first/middle/last)
carry ``wandb_internal_pb2.Record`` protobufs, the messages ``wandb sync`` uploads. Parsed with W&B's own
protobuf classes, so a group, config or summary the SDK did not record fails here."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from grpo.config import load_config
from grpo.engine import train

FAKE_KEY = "f" * 40


def wandb_records(path: Path):
    from wandb.proto import wandb_internal_pb2 as pb

    data = path.read_bytes()
    assert data[:4] == b":W&B"
    pos, block, pending = 7, 32768, b""
    while pos + 7 <= len(data):
        if block - pos % block < 7:  # a block's tail too short for a chunk header is padding
            pos += block - pos % block
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        pending += data[pos + 7:pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):  # full, or the last chunk of a record
            record = pb.Record()
            record.ParseFromString(pending)
            pending = b""
            yield record


@pytest.fixture
def run_dir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("WANDB_API_KEY", FAKE_KEY)  # a key in the environment must not make an offline run go online
    monkeypatch.setenv("WANDB_MODE", "online")
    monkeypatch.setenv("WANDB_SILENT", "true")
    cfg = load_config("grpo_trainer_tiny_cpu", [
        "megatron_training.train_iters=2", "engine.eval_every=null", "engine.warm_start_steps=30",
        f"engine.cache_dir={tmp_path / 'cache'}", "engine.task_size=64", "megatron_training.global_batch_size=4",
        "rl_config.mini_batch_size=2", "rl_config.n_samples_per_prompt=4", "actor_config.micro_batch_size=4",
        "rl_config.use_wandb=true", "rl_config.use_tensorboard=true", "rl_config.wandb_project=grpo-kl",
        "rl_config.wandb_exp_name=trial-3-seed0", "engine.wandb_mode=offline", "engine.wandb_group=kl_study",
        "actor_config.lr=3e-5"])
    train(cfg, tmp_path / "run")
    return tmp_path / "run"


def test_an_offline_wandb_run_is_grouped_configured_and_summarised(run_dir):
    (log,) = run_dir.glob("wandb/offline-run-*/run-*.wandb")  # offline despite the key and WANDB_MODE
    records = list(wandb_records(log))
    (run,) = [r.run for r in records if r.WhichOneof("record_type") == "run"]
    assert (run.run_group, run.project, run.display_name) == ("kl_study", "grpo-kl", "trial-3-seed0")
    config = {item.key: json.loads(item.value_json) for item in run.config.update}
    assert config["actor_config"]["lr"] == 3e-5 and config["rl_config"]["clip_ratio"] == 0.2
    summary = {i.key: json.loads(i.value_json) for r in records if r.WhichOneof("record_type") == "summary"
               for i in r.summary.update}
    assert summary["state"] == "finished"
    assert [r.exit.exit_code for r in records if r.WhichOneof("record_type") == "exit"] == [0]


def test_tensorboard_stays_on_beside_wandb_and_no_secret_is_written(run_dir):
    assert list((run_dir / "tensorboard").glob("events.out.tfevents.*"))
    for path in run_dir.rglob("*"):
        if path.is_file():
            assert FAKE_KEY.encode() not in path.read_bytes(), path
