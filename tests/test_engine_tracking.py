"""W&B and TensorBoard from the engine, read back from the files they write (no network).

The W&B run is read from its offline transaction log (``run-<id>.wandb``): W&B's own format, a 7-byte
``:W&B`` header then LevelDB-log blocks of 32 KiB whose chunks (crc32, length, type full/first/middle/last)
carry ``wandb_internal_pb2.Record`` protobufs, the messages ``wandb sync`` uploads. Parsed with W&B's own
protobuf classes, so a group, config or summary the SDK did not record fails here."""

from __future__ import annotations

import io
import json
import logging
import re
import struct
import sys
import time
from pathlib import Path

import pytest

from grpo.config import load_config
from grpo.engine import train
from grpo.engine.metrics import MetricsSink, add_final_scalars, run_logger

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
        "actor_config.lr=3e-5", "engine.trial_params={actor_config.lr:3e-5,rl_config.kl_penalty:low_var_kl}"])
    train(cfg, tmp_path / "run")
    return tmp_path / "run"


def test_an_offline_wandb_run_is_grouped_configured_and_summarised(run_dir):
    (log,) = run_dir.glob("wandb/offline-run-*/run-*.wandb")  # offline despite the key and WANDB_MODE
    deadline = time.monotonic() + 20  # wandb-core's writer may still be flushing when finish() returns (loaded CI)
    records = list(wandb_records(log))
    while not any(r.WhichOneof("record_type") == "exit" for r in records):
        assert time.monotonic() < deadline, [r.WhichOneof("record_type") for r in records]
        time.sleep(0.1)
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
    assert list((run_dir / "tensorboard" / "trial-3-seed0").glob("events.out.tfevents.*"))  # the run's name
    for path in run_dir.rglob("*"):
        if path.is_file():
            assert FAKE_KEY.encode() not in path.read_bytes(), path


class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


ITERATION = {"grpo/score/mean": 0.5, "grpo/acc/mean": 0.5, "actor/kl_loss": 0.01, "actor/pg_clipfrac": 0.1,
             "response_length/mean": 12.0, "timing/all": 0.3}


def test_log_lines_print_whole_above_the_progress_bar_not_into_it(tmp_path, monkeypatch):
    out = FakeTerminal()
    monkeypatch.setattr(sys, "stdout", out)
    console = logging.StreamHandler(out)  # as Hydra's console handler: bound to the stdout of its set-up time
    console.setFormatter(logging.Formatter("LOG %(message)s"))
    logging.getLogger().addHandler(console)
    try:
        sink = MetricsSink(tmp_path, load_config("grpo_trainer_tiny_cpu", []), 3, log=run_logger(tmp_path))
        assert sink.progress is not None  # a terminal: the bar is drawn
        for iteration in (1, 2, 3):
            sink.write(iteration, ITERATION)
        sink.close()
    finally:
        logging.getLogger().removeHandler(console)
    assert console.stream is out  # given back when the bar is gone
    lines = [re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", line).split("\r")[-1] for line in out.getvalue().split("\n")]
    logged = [line for line in lines if "iteration " in line]
    assert len(logged) == 3 and all(line.startswith("LOG iteration ") for line in logged), logged
    assert any("GRPO" in line and "3/3" in line for line in lines)  # the bar, on lines of its own


def test_no_progress_bar_off_a_terminal(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "stdout", io.StringIO())
    sink = MetricsSink(tmp_path, load_config("grpo_trainer_tiny_cpu", []), 3)
    sink.write(1, ITERATION)
    sink.close()
    assert sink.progress is None and sys.stdout.getvalue() == ""


def hparams_session_groups(logdir: Path):
    """The rows of TensorBoard's HParams tab for ``logdir``, through the plugin's own request handler."""
    from tensorboard import context
    from tensorboard.backend.event_processing import data_provider, plugin_event_multiplexer
    from tensorboard.plugins import base_plugin
    from tensorboard.plugins.hparams import api_pb2, backend_context, list_session_groups

    multiplexer = plugin_event_multiplexer.EventMultiplexer()
    multiplexer.AddRunsFromDirectory(str(logdir))
    multiplexer.Reload()
    tb = base_plugin.TBContext(logdir=str(logdir), multiplexer=multiplexer,
                               data_provider=data_provider.MultiplexerDataProvider(multiplexer, str(logdir)))
    request = api_pb2.ListSessionGroupsRequest(
        allowed_statuses=[api_pb2.STATUS_UNKNOWN, api_pb2.STATUS_SUCCESS, api_pb2.STATUS_FAILURE,
                          api_pb2.STATUS_RUNNING], start_index=0, slice_size=100)
    handler = list_session_groups.Handler(context.RequestContext(), backend_context.Context(tb), "", request)
    return handler.run().session_groups


def test_tensorboard_hparams_show_the_trials_parameters_and_final_metrics(run_dir):
    cfg = load_config("grpo_trainer_tiny_cpu",
                      ["rl_config.use_tensorboard=true", "rl_config.wandb_exp_name=trial-3-seed0"])
    assert add_final_scalars(cfg, run_dir, {"objective/eval/acc_greedy (auc)": 0.75}, 2) == (
        run_dir / "tensorboard" / "trial-3-seed0")  # what the sweep adds once the trial is decided
    (group,) = hparams_session_groups(run_dir / "tensorboard")
    hparams = {k: v.WhichOneof("kind") and getattr(v, v.WhichOneof("kind")) for k, v in group.hparams.items()}
    assert hparams == {"actor_config.lr": pytest.approx(3e-5), "rl_config.kl_penalty": "low_var_kl"}
    (session,) = group.sessions
    assert session.name == "trial-3-seed0"  # the run folder: trial and seed
    from tensorboard.plugins.hparams import api_pb2

    assert session.status == api_pb2.STATUS_SUCCESS
    metrics = {m.name.tag: m.value for m in session.metric_values}
    final = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()][-1]
    assert metrics["grpo/score/mean"] == pytest.approx(final["grpo/score/mean"]) and final["iteration"] == 2
    assert {"actor/kl_loss", "grpo/acc/mean"} <= set(metrics)
    assert metrics["objective/eval/acc_greedy (auc)"] == pytest.approx(0.75)


def test_a_sweep_names_each_seed_run_and_hands_it_the_trials_parameters(tmp_path, monkeypatch):
    from sweep_helpers import write_spec

    from grpo.sweep.backends import load_backend
    from grpo.sweep.run.trial_builder import TrialBuilder
    from grpo.sweep.spec.load import load_spec
    from grpo.sweep.spec.space import SearchSpace

    monkeypatch.chdir(tmp_path)
    spec = load_spec(str(write_spec(tmp_path, tracking={"tensorboard": True}, seeds=2, search={
        "actor_config.lr": "tag(log, interval(1e-6, 1e-4))", "rl_config.kl_penalty": "choice(kl, low_var_kl)"})))
    space = SearchSpace.from_spec(spec)
    builder = TrialBuilder(spec, space, load_backend(spec), load_config(spec.base, spec.overrides), ("h", 1),
                           no_plan=True)
    params = {"actor_config.lr": 1.2345678901234e-05, "rl_config.kl_penalty": "low_var_kl"}
    plan = builder.build(7, params, tmp_path / "trials" / "7", None, builder.seeds([0, 1]))
    runs = [job.run.cfg for job in plan.jobs]
    assert [cfg.rl_config.wandb_exp_name for cfg in runs] == ["trial-7-seed0", "trial-7-seed1"]
    assert all(cfg.engine.trial_params == params and cfg.rl_config.use_tensorboard for cfg in runs)
    assert not runs[0].rl_config.use_wandb  # named for TensorBoard; W&B stays off
