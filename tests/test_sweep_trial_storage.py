"""Trial storage (``trial_storage:``, grpo/sweep/execution/trial_storage.py): seed runs kept where every node sees them,
run in node-local scratch, resumed on any node.

The unit tests use a local folder as the storage (pyarrow's LocalFileSystem; an object store takes the same
calls: the object-store branch of the upload is exercised by turning ``local`` off). The end-to-end test runs
the real driver on a two-node Ray cluster on this machine (``ray.cluster_utils.Cluster``; the head has no CPU,
so trials run on the two worker nodes) with no shared trial directory: each node's scratch is its own folder
(keyed by its Ray node id). It removes the node running the trial once the trial's checkpoint is in trial
storage, after deleting that node's scratch, and sees the retry resume from that checkpoint on the other node.

The design mirrors Ray Train's ``StorageContext`` (ray/train/_internal/storage.py, Ray 2.60): a storage path or
URI opened with ``pyarrow.fs.FileSystem.from_uri`` (fsspec through ``PyFileSystem(FSSpecHandler(...))``),
checkpoints copied up with ``pyarrow.fs.copy_files`` (``persist_current_checkpoint``), a marker file the
driver writes and workers check (``_create_validation_file`` / ``_check_validation_file``).
"""

from __future__ import annotations

import json
import shutil
import threading
import time
from pathlib import Path

import pyarrow.fs as pafs
import pytest
from sweep_helpers import TESTS, write_spec

from grpo._fs import CHECKPOINT_TRACKER, atomic_write_text
from grpo.config import load_config
from grpo.errors import UserError
from grpo.sweep.backends import TrialBackend
from grpo.sweep.execution import trial_storage
from grpo.sweep.execution.trial_storage import (
    RunStorage,
    StagedRun,
    TrialStorage,
    TrialStorageError,
    join,
    run_path,
    study_location,
)
from grpo.sweep.spec.load import load_spec
from grpo.sweep.spec.locations import location_problem

RUN = run_path(0, 0)


def _save(ckpt: Path, iteration: int, keep: int | None = None, megatron: bool = False) -> None:
    """A checkpoint as the engine writes one (flat; MindSpeed-RL's Megatron one has mp_rank_XX/ folders): the
    iteration folder, then the tracker; older ones pruned."""
    folder = ckpt / f"iter_{iteration:07d}"
    folder.mkdir(parents=True)
    (folder / "trainer_state.json").write_text(json.dumps({"iteration": iteration}))
    (folder / "model.safetensors").write_bytes(bytes([iteration]) * 1000)
    if megatron:
        (folder / "mp_rank_00").mkdir()
        (folder / "mp_rank_00" / "model_optim_rng.pt").write_bytes(bytes([iteration]) * 10)
    atomic_write_text(ckpt / CHECKPOINT_TRACKER, str(iteration))
    if keep is not None:
        for old in sorted(ckpt.glob("iter_*"))[:-keep]:
            shutil.rmtree(old)


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


# -- the storage ---------------------------------------------------------------------------------------------
def test_a_checkpoint_round_trips_and_the_pruned_ones_leave_storage(tmp_path):
    store = TrialStorage(study_location(str(tmp_path / "store"), "s"))
    local = tmp_path / "run" / "ckpt"
    _save(local, 4)
    assert store.upload_checkpoint(local, RUN) == "4"
    remote = tmp_path / "store" / "s" / RUN / "ckpt"
    (remote / ".tmp-iter_0000006-1a2b3c4d").mkdir()  # what a worker SIGKILLed mid-upload leaves
    _save(local, 8, keep=1, megatron=True)
    assert store.upload_checkpoint(local, RUN) == "8"
    assert sorted(p.name for p in remote.iterdir()) == ["iter_0000008", CHECKPOINT_TRACKER]  # 4 was pruned
    assert store.iteration(RUN) == 8

    back = tmp_path / "back"
    assert store.download_checkpoint(RUN, back) == 8
    assert _files(back) == _files(local)  # the folder and the tracker, byte for byte
    assert store.download_checkpoint(run_path(5, 0), tmp_path / "none") is None  # nothing stored: a fresh start

    (local.parent / "metrics.jsonl").write_text('{"iteration": 1}\n{"iteration": 2}\n{"itera')  # cut by a kill
    (local.parent / "tensorboard").mkdir()
    (local.parent / "tensorboard" / "events").write_text("e")
    store.upload_files(local.parent, RUN)
    assert store.read_jsonl(f"{RUN}/metrics.jsonl") == [{"iteration": 1}, {"iteration": 2}]
    assert (tmp_path / "store" / "s" / RUN / "tensorboard" / "events").read_text() == "e"
    assert not list((tmp_path / "store").rglob(".tmp-*"))


@pytest.mark.parametrize("local_fs", [True, False], ids=["local file system", "object store order"])
def test_a_partial_upload_is_never_the_latest_checkpoint(tmp_path, monkeypatch, local_fs):
    store = TrialStorage(study_location(str(tmp_path / "store"), "s"))
    store.local = local_fs  # False: the object-store branch (folder in place, tracker last)
    local = tmp_path / "run" / "ckpt"
    _save(local, 4)
    store.upload_checkpoint(local, RUN)
    _save(local, 8)
    real_copy = pafs.copy_files

    def dies_half_way(source, destination, **kw):  # one file of the folder arrives, then the upload dies
        real_copy(str(Path(source) / "trainer_state.json"), f"{destination}/trainer_state.json", **kw)
        raise OSError("connection reset")

    monkeypatch.setattr(trial_storage.pafs, "copy_files", dies_half_way)
    with pytest.raises(OSError, match="connection reset"):
        store.upload_checkpoint(local, RUN)
    monkeypatch.setattr(trial_storage.pafs, "copy_files", real_copy)

    assert store.iteration(RUN) == 4  # the tracker still names the complete one
    remote = tmp_path / "store" / "s" / RUN / "ckpt"
    if local_fs:  # the half folder went under a temporary name, removed
        assert sorted(p.name for p in remote.iterdir()) == ["iter_0000004", CHECKPOINT_TRACKER]
    back = tmp_path / "back"
    assert store.download_checkpoint(RUN, back) == 4
    assert (back / "iter_0000004" / "model.safetensors").read_bytes() == bytes([4]) * 1000
    assert store.upload_checkpoint(local, RUN) == "8"  # the next upload completes it
    assert store.download_checkpoint(RUN, tmp_path / "back8") == 8


def test_a_staged_run_works_in_scratch_and_resumes_from_storage(tmp_path):
    location = study_location(str(tmp_path / "store"), "s")
    TrialStorage(location).ensure_marker()
    cfg = load_config("grpo_trainer_tiny_cpu", [])
    first = StagedRun(RunStorage(location, run_path(0, 0)), root=tmp_path / "scratch" / "node-a")
    ran = first.prepare(cfg, resume=False)
    assert Path(ran.actor_config.save) == first.run_dir / "ckpt" and first.run_dir.is_dir()
    assert cfg.actor_config.save != ran.actor_config.save  # the job's own config is left alone
    assert first.run_dir.relative_to(tmp_path / "scratch" / "node-a").parts[-4:] == ("trials", "0", "runs", "seed0")
    _save(first.run_dir / "ckpt", 3)
    first.sync()  # what the worker's report callback does
    assert TrialStorage(location).iteration(RUN) == 3
    (first.run_dir / "train.log").write_text("line 1\nline 2\n")
    first.finish()
    first.discard()
    assert not (tmp_path / "scratch" / "node-a").exists()  # scratch deleted, up to the node's folder
    assert trial_storage.stored_tail(RunStorage(location, RUN), "train.log") == ["line 1", "line 2"]

    second = StagedRun(RunStorage(location, run_path(1, 0), resume=RUN), root=tmp_path / "scratch" / "node-b")
    resumed = second.prepare(cfg, resume=True)
    assert Path(resumed.actor_config.load) == second.resume_dir
    assert (second.resume_dir / CHECKPOINT_TRACKER).read_text() == "3"
    assert (second.resume_dir / "iter_0000003" / "trainer_state.json").is_file()
    second.discard()


def test_a_node_that_does_not_see_the_storage_fails_its_seed_without_writing_there(tmp_path):
    location = study_location(str(tmp_path / "store"), "s")  # no marker: the driver's folder is not here
    staged = StagedRun(RunStorage(location, RUN), root=tmp_path / "scratch")
    with pytest.raises(TrialStorageError, match=r"does not see \.grpo-sweep-trial-storage"):
        staged.prepare(load_config("grpo_trainer_tiny_cpu", []), resume=False)
    staged.finish()
    assert not (tmp_path / "store").exists()


def test_locations_join_and_are_checked_without_touching_the_storage(tmp_path):
    assert join("s3://bucket/sweeps?region=eu-west-1", "s", "trials") == "s3://bucket/sweeps/s/trials?region=eu-west-1"
    assert study_location("gs://b/x/", "s") == "gs://b/x/s"
    assert study_location("rel/store", "s") == str(Path.cwd() / "rel" / "store" / "s")
    for good in [
        "s3://bucket/sweeps",
        "s3://bucket/x?region=us-east-1",
        "gs://b",
        "hdfs://nn:8020/x",
        "file:///mnt/nfs/x",
        str(tmp_path),
        "not/there/yet",
    ]:
        assert location_problem(good) is None, good
    (tmp_path / "a_file").write_text("x")
    for bad, says in [
        ("foo://x/y", "unknown scheme foo://"),
        ("s3:///x", "names no bucket"),
        ("mock://x/y", "in-memory"),
        ("file://relative/x", "file:///absolute/path"),
        ("", "must be a path or a storage URI"),
        ("a\nb", "one line"),
        (str(tmp_path / "a_file"), "is a file, not a folder"),
    ]:
        assert says in (location_problem(bad) or ""), bad


def test_the_spec_key_is_checked_at_load(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    spec = load_spec(write_spec(tmp_path, trial_storage="s3://bucket/sweeps"))
    assert spec.trial_storage == "s3://bucket/sweeps"
    assert load_spec(write_spec(tmp_path)).trial_storage is None
    with pytest.raises(UserError) as err:
        load_spec(write_spec(tmp_path, trial_storage="ftp2://host/x"))
    assert str(err.value).startswith(f"{tmp_path / 's.yaml'}: trial_storage: ftp2://host/x: unknown scheme ftp2://")
    assert list(tmp_path.iterdir()) == [tmp_path / "s.yaml"]  # nothing written


# -- a trial resumes on another node ---------------------------------------------------------------------------
class StoredCheckpointBackend(TrialBackend):
    """A checkpoint every iteration (a folder, then the tracker, as the engine writes them), 0.05 s apart;
    ``where.json`` in the run dir says on which node it ran and from what it loaded. A fresh run stops
    moving after its checkpoint at iteration 3 (it waits to be killed); a resumed one runs to the end."""

    name = "stored-checkpoint"

    def run(self, cfg, trial_dir: Path, report, resume: bool) -> dict:
        import ray

        save, start = Path(cfg.actor_config.save), 1
        if resume:
            start = int((Path(cfg.actor_config.load) / CHECKPOINT_TRACKER).read_text()) + 1
        (trial_dir / "where.json").write_text(json.dumps({
            "node_id": ray.get_runtime_context().get_node_id(), "save": str(save),
            "load": str(cfg.actor_config.load) if resume else None, "start": start,
        }))  # fmt: skip
        for it in range(start, int(cfg.megatron_training.train_iters) + 1):
            time.sleep(0.05)
            _save(save, it, keep=1)
            with open(trial_dir / "metrics.jsonl", "a") as fh:
                fh.write(json.dumps({"iteration": it, "grpo/score/mean": 0.1 * it}) + "\n")
            if report(it, {"grpo/score/mean": 0.1 * it}):
                return {"stopped_early": True}
            if it == 3 and not resume:
                time.sleep(120)  # the test removes this node now
        return {}


@pytest.fixture
def two_nodes(tmp_path):
    import ray
    from ray.cluster_utils import Cluster

    scratch = tmp_path / "scratch"  # each node's scratch: scratch/<its Ray node id>
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False})
    nodes = [cluster.add_node(num_cpus=1) for _ in range(2)]
    cluster.wait_for_nodes()
    ray.init(
        address=cluster.address,
        log_to_driver=False,
        configure_logging=False,
        runtime_env={"env_vars": {"PYTHONPATH": str(TESTS), trial_storage.SCRATCH_ENV: str(scratch)}},
    )
    try:
        yield cluster, {node.node_id: node for node in nodes}, scratch
    finally:
        ray.shutdown()
        cluster.shutdown()


@pytest.mark.slow
def test_a_trial_killed_with_its_node_resumes_from_trial_storage_on_the_other_node(two_nodes, tmp_path, monkeypatch):
    from optuna.trial import TrialState

    from grpo.sweep.run.driver import run_study

    cluster, nodes, scratch = two_nodes
    store = tmp_path / "store"  # under neither node's scratch, and no trial dir of the driver's
    monkeypatch.chdir(tmp_path)
    spec = load_spec(write_spec(
        tmp_path, trials=1, concurrency=1, retries=1, trial_storage=str(store),
        overrides=["megatron_training.train_iters=6", "megatron_training.save_interval=1"],
        backend="test_sweep_trial_storage:StoredCheckpointBackend",
    ))  # fmt: skip
    outcome: dict = {}

    def drive() -> None:
        try:
            outcome["run"] = run_study(spec)
        except BaseException as err:  # shown by the assertion below
            outcome["error"] = err

    driver = threading.Thread(target=drive, daemon=True)
    driver.start()
    tracker = store / "s" / RUN / "ckpt" / CHECKPOINT_TRACKER
    deadline = time.monotonic() + 40
    while not (tracker.is_file() and tracker.read_text() == "3"):
        assert time.monotonic() < deadline and driver.is_alive(), ("no checkpoint 3 in trial storage", outcome)
        time.sleep(0.05)
    (first,) = [p.name for p in scratch.iterdir() if list(p.glob("*/trials/0/runs/seed0"))]
    assert first in nodes
    shutil.rmtree(scratch / first)  # what that node had is gone: the retry can only use trial storage
    cluster.remove_node(nodes[first])
    driver.join(timeout=60)
    assert not driver.is_alive() and "error" not in outcome, outcome

    failed, retry = sorted(outcome["run"].study.trials, key=lambda t: t.number)
    assert failed.state == TrialState.FAIL and "worker process died" in failed.user_attrs["failure_reason"]
    assert retry.state == TrialState.COMPLETE and retry.user_attrs["retry_of"] == failed.number
    assert retry.user_attrs["resumed_at_iteration"] == {"1234": 3}
    (second,) = set(nodes) - {first}
    assert retry.user_attrs["node_id"] == second
    where = json.loads((store / "s" / run_path(1, 0) / "where.json").read_text())  # uploaded from its scratch
    assert where["node_id"] == second and where["start"] == 4
    assert Path(where["load"]).is_relative_to(scratch / second)  # downloaded into the second node's scratch
    assert not (scratch / first).exists()
    final = store / "s" / run_path(1, 0) / "ckpt"
    assert (final / CHECKPOINT_TRACKER).read_text() == "6"
    assert json.loads((final / "iter_0000006" / "trainer_state.json").read_text()) == {"iteration": 6}
    assert not list((scratch / second).glob("*/trials/1/runs/seed0"))  # its scratch deleted at the end
    metrics = tmp_path / "studies" / "s" / "trials" / "1" / "metrics.jsonl"
    rows = [json.loads(line) for line in metrics.read_text().splitlines()]
    assert [r["iteration"] for r in rows] == list(range(1, 7))  # adopted 1-3, ran 4-6
    runs = tmp_path / "studies" / "s" / "trials" / "1" / "runs"
    assert runs.is_symlink() and list(runs.parent.glob("runs/seed*/metrics.jsonl"))  # the report reads them there


@pytest.mark.slow
def test_the_engine_resumes_from_a_checkpoint_it_downloaded_from_trial_storage(tmp_path, monkeypatch):
    """The embedded engine's own checkpoint (weights, reference, optimizer, RNG, tokenizer) through the builder and
    the worker, as the driver runs them (in this process): trial 0 saves at 2 and 4; trial 1, its retry with two
    more iterations, resumes at 4 from what it downloaded into its scratch, and its checkpoint 6 is stored."""
    from grpo.sweep.backends import load_backend
    from grpo.sweep.execution import worker
    from grpo.sweep.run.preflight import preflight
    from grpo.sweep.run.trial_builder import TrialBuilder, adopted_history
    from grpo.sweep.spec.space import SearchSpace

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(trial_storage.SCRATCH_ENV, str(tmp_path / "scratch"))
    monkeypatch.setattr(worker, "_placement", dict)  # no Ray in this process
    store = tmp_path / "store"

    def trial(number: int, iters: int, resume_from: str | None):
        spec = load_spec(
            write_spec(
                tmp_path,
                backend="embedded",
                trial_storage=str(store),
                overrides=[
                    f"megatron_training.train_iters={iters}",
                    "megatron_training.save_interval=2",
                    "engine.eval_every=null",
                ],
            )
        )
        space, backend = SearchSpace.from_spec(spec), load_backend(spec)
        builder = TrialBuilder(spec, space, backend, preflight(spec, space, backend, no_plan=True).base_cfg,
                               ("here", 1), no_plan=True)  # fmt: skip
        trial_dir = (tmp_path / "studies" / "s" / "trials" / str(number)).resolve()
        plan = builder.build(number, {"rl_config.clip_ratio": 0.2}, trial_dir, resume_from, [1234])
        plan.write_files(trial_dir)
        return plan, trial_dir

    first, first_dir = trial(0, 4, None)
    assert worker.TrialWorker().run(first.jobs[0])["status"] == "complete"
    retry, _ = trial(1, 6, str(first_dir))
    assert retry.resumed and adopted_history(str(first_dir), retry.jobs)[0] == {1234: 4}
    result = worker.TrialWorker().run(retry.jobs[0])
    assert result["status"] == "complete" and result["summary"]["iterations"] == 6, result
    log = (store / "s" / run_path(1, 0) / "train.log").read_text()
    assert "resumed from " + str(tmp_path / "scratch") in log and "at iteration 4" in log
    final = store / "s" / run_path(1, 0) / "ckpt"
    assert (final / CHECKPOINT_TRACKER).read_text() == "6" and (final / "iter_0000006" / "optim.pt").is_file()
    assert [p.name for p in final.iterdir() if p.is_dir()] == ["iter_0000006"]  # keep_checkpoints: 1
    assert not any(p.is_file() for p in (tmp_path / "scratch").rglob("*"))  # scratch deleted


def test_retention_removes_a_trials_checkpoints_from_an_object_store(tmp_path):
    """keep_final_checkpoints on trial storage that is not a local folder: the stored checkpoints go (the
    tracker with them, so nothing names a removed checkpoint as the latest), the run's other files stay."""
    from grpo.sweep.run.retention import remove_stored_checkpoints

    location = "file://" + study_location(str(tmp_path / "store"), "s")  # opened as a URI, through pyarrow.fs
    store = TrialStorage(location)
    for index in (0, 1):
        local = tmp_path / f"run{index}" / "ckpt"
        _save(local, 4)
        store.upload_checkpoint(local, run_path(3, index))
        (local.parent / "metrics.jsonl").write_text('{"iteration": 4}\n')
        store.upload_files(local.parent, run_path(3, index))
    assert remove_stored_checkpoints(location, 3, seeds=2) == (2, [])
    for index in (0, 1):
        assert store.iteration(run_path(3, index)) is None
        assert store.read_jsonl(f"{run_path(3, index)}/metrics.jsonl") == [{"iteration": 4}]
    assert remove_stored_checkpoints(location, 3, seeds=2) == (0, [])  # nothing left: nothing to do
