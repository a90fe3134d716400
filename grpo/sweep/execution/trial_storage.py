"""Trial storage (``trial_storage:`` in the spec): seed runs kept where every node sees them, run on node-local scratch.

Without ``trial_storage`` a seed runs in ``studies/<study>/trials/<N>/runs/seed<k>``, which every node must then
see (a shared file system). With it, as Ray Train's ``storage_path``, the study's run folders live in
``<trial_storage>/<study>/trials/<N>/runs/seed<k>`` (a local or NFS path, or a URI that ``pyarrow.fs`` opens:
``s3://``, ``gs://``, ``hdfs://``, ``abfs://``; or one fsspec knows, when fsspec is installed) and each seed job:

1. runs in a node-local scratch folder (``$GRPO_SWEEP_SCRATCH`` or ``<tmp>/grpo-sweep-scratch``, then the Ray
   node id: two Ray nodes on one machine never share one), ``actor_config.save`` pointing there;
2. a resumed seed first downloads the latest checkpoint of the run it continues into scratch
   (``actor_config.load`` pointing there);
3. uploads each new checkpoint when the engine's tracker file (``latest_checkpointed_iteration.txt``) moves,
   with the run's small files (``metrics.jsonl``, ``train.log``, ...), and everything once more at its end;
4. deletes its scratch.

An upload never leaves a partial checkpoint named as the latest: the iteration folder is uploaded first (on a
local file system under a temporary name, then renamed), the tracker file last (written under a temporary name
and moved: one object put on an object store); the upload also drops the iteration folders the engine pruned
(``keep_checkpoints``). Before running, a seed checks that it sees the marker file the driver wrote in the
study's folder: trial storage on a path only the driver's machine has fails the seed with one clear line.

    where = RunStorage(study_location("s3://bucket/sweeps", "kl"), run_path(3, 0))
    staged = StagedRun(where)            # on the worker
    cfg = staged.prepare(cfg, resume=False)
    ...; staged.sync()                   # in the report callback
    staged.finish(); staged.discard()
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import posixpath
import shutil
import socket
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow
import pyarrow.fs as pafs

from grpo._fs import CHECKPOINT_DIR, CHECKPOINT_TRACKER, atomic_write_text, checkpoint_iteration, pid_alive
from grpo.config import GRPOConfig
from grpo.sweep.spec.locations import is_uri

SCRATCH_ENV = "GRPO_SWEEP_SCRATCH"  # a node-local folder for the runs (default: <tmp>/grpo-sweep-scratch)
MARKER = ".grpo-sweep-trial-storage"  # written by the driver in the study's folder; every seed checks it


class TrialStorageError(OSError):
    """Trial storage cannot be used (not visible from this node, a checkpoint missing there, ...)."""


# -------------------------------------------------------------------------------------- locations
def join(location: str, *parts: str) -> str:
    """``location`` with ``parts`` appended (a URI keeps its ``?query`` at the end)."""
    base, sep, query = location.partition("?") if is_uri(location) else (location, "", "")
    joined = base.rstrip("/") + "/" + "/".join(p.strip("/") for p in parts if p) if parts else base
    return joined + sep + query


def study_location(trial_storage: str, study: str) -> str:
    """The study's folder in trial storage: ``<trial_storage>/<study>`` (a local path made absolute here, on the
    driver: a worker may run in another working directory)."""
    if is_uri(trial_storage):
        return join(trial_storage, study)
    return str(Path(trial_storage).expanduser().resolve() / study)


def local_folder(location: str) -> Path | None:
    """The local path a location is (a plain path or ``file://``), else None (an object store)."""
    if not is_uri(location):
        return Path(location)
    if location.lower().startswith("file://"):
        return Path(pafs.FileSystem.from_uri(location)[1])
    return None


def run_path(number: int, index: int) -> str:
    """Seed ``index`` of trial ``number``, under the study's folder (the study dir's own layout)."""
    return f"trials/{number}/runs/seed{index}"


@dataclass(frozen=True)
class RunStorage:
    """Where one seed run is kept: ``study`` (the study's folder in trial storage), ``run`` (this run under
    it) and ``resume`` (the run, under it, whose latest checkpoint this one continues from; None: fresh)."""

    study: str
    run: str
    resume: str | None = None

    @property
    def location(self) -> str:
        return join(self.study, self.run)

    def scratch_key(self) -> str:
        """The run's folder under a node's scratch root: the study's name and a hash of its location (two
        studies of one name, in two storages, never meet), then the run's own path."""
        name = posixpath.basename(self.study.partition("?")[0].rstrip("/")) or "study"
        digest = hashlib.sha256(self.study.encode()).hexdigest()[:8]
        return f"{name}-{digest}/{self.run}"


# -------------------------------------------------------------------------------------- the storage
def _folder_of(tracker: str) -> str:
    """The checkpoint folder a tracker text names (Megatron's layout: ``iter_0000010``, or ``release``)."""
    return "release" if tracker == "release" else f"iter_{int(tracker):07d}"


class TrialStorage:
    """The study's folder in trial storage, opened through ``pyarrow.fs``; paths below are relative to it."""

    def __init__(self, location: str):
        self.location = location
        self.fs, self.root = _open(location)
        self.local = isinstance(self.fs, pafs.LocalFileSystem)

    def path(self, *parts: str) -> str:
        return posixpath.join(self.root, *parts)

    def exists(self, relative: str) -> bool:
        return bool(self.fs.get_file_info(self.path(relative)).type != pafs.FileType.NotFound)

    def read_text(self, relative: str) -> str | None:
        """A file's text; None when it is not there (or cannot be read)."""
        try:
            with self.fs.open_input_stream(self.path(relative)) as fh:
                return bytes(fh.read()).decode("utf-8", errors="replace")
        except (OSError, pyarrow.ArrowException):
            return None

    def read_jsonl(self, relative: str) -> list[dict[str, Any]]:
        """The JSON objects of a jsonl file, as ``grpo._fs.read_jsonl`` reads a local one."""
        rows = []
        for line in (self.read_text(relative) or "").splitlines():
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue  # blank, or cut short by a kill
            if isinstance(row, dict):
                rows.append(row)
        return rows

    def tracker(self, run: str) -> str | None:
        text = self.read_text(posixpath.join(run, CHECKPOINT_DIR, CHECKPOINT_TRACKER))
        return text.strip() if text is not None else None

    def iteration(self, run: str) -> int | None:
        """The iteration of ``run``'s latest uploaded checkpoint (0 for ``release``), or None."""
        text = self.tracker(run)
        if text is None:
            return None
        try:
            return 0 if text == "release" else int(text)
        except ValueError:
            return None

    # -- driver side ------------------------------------------------------------------------------------
    def ensure_marker(self) -> None:
        """The file each seed looks for before running (Ray Train's validation marker, same idea)."""
        if not self.exists(MARKER):
            self.fs.create_dir(self.root)
            self._put_text(MARKER, f"grpo-sweep trial storage, written by the driver on {socket.gethostname()}\n")

    def check_marker(self) -> None:
        if not self.exists(MARKER):
            raise TrialStorageError(
                f"trial_storage {self.location}: this node ({socket.gethostname()}) does not see {MARKER}, which the "
                "driver wrote there: trial storage must be a path every node sees (a shared file system) or an "
                "object store URI"
            )

    # -- uploads ----------------------------------------------------------------------------------------
    def upload_checkpoint(self, local_ckpt: Path, run: str) -> str | None:
        """Upload the checkpoint ``local_ckpt``'s tracker names into ``run``'s checkpoint folder, then the tracker;
        drop the iteration folders the engine no longer keeps. Returns the tracker text uploaded (None: none)."""
        try:
            text = (local_ckpt / CHECKPOINT_TRACKER).read_text().strip()
            folder = _folder_of(text)
        except (OSError, ValueError):
            return None
        source = local_ckpt / folder
        if not source.is_dir():
            return None
        remote = posixpath.join(run, CHECKPOINT_DIR)
        final = self.path(remote, folder)
        if self.local:  # a rename is atomic here: the folder appears whole
            tmp = self.path(remote, f".tmp-{folder}-{uuid.uuid4().hex[:8]}")
            try:
                self._copy_up(source, tmp)
                if self.fs.get_file_info(final).type != pafs.FileType.NotFound:
                    self.fs.delete_dir(final)  # the same iteration saved again (a rerun): the new one replaces it
                self.fs.move(tmp, final)
            except BaseException:
                self._delete(tmp)
                raise
        else:  # an object store: objects appear whole; the tracker, written last, names only complete folders
            self._copy_up(source, final)
        self._put_text(posixpath.join(remote, CHECKPOINT_TRACKER), text)
        kept = {p.name for p in local_ckpt.iterdir() if p.is_dir()}
        for info in self.fs.get_file_info(pafs.FileSelector(self.path(remote), allow_not_found=True)):
            name = posixpath.basename(info.path)
            pruned = info.type == pafs.FileType.Directory and name.startswith("iter_") and name not in kept
            if pruned or name.startswith(".tmp-"):  # .tmp-: what an upload killed half-way left
                self._delete(info.path)
        return text

    def upload_files(self, local_run: Path, run: str) -> None:
        """Everything in a run folder but its checkpoints (``metrics.jsonl``, ``train.log``, ``tensorboard/``...):
        a file under a temporary name then moved (a reader never sees half of it), a folder file by file."""
        self.fs.create_dir(self.path(run))
        for entry in sorted(local_run.iterdir()):
            if entry.name == CHECKPOINT_DIR or entry.name.startswith("."):
                continue
            if entry.is_dir():
                self._copy_up(entry, self.path(run, entry.name))
            elif entry.is_file():
                tmp = self.path(run, f".tmp-{entry.name}-{uuid.uuid4().hex[:8]}")
                pafs.copy_files(
                    str(entry), tmp, source_filesystem=pafs.LocalFileSystem(), destination_filesystem=self.fs
                )
                self.fs.move(tmp, self.path(run, entry.name))

    def download_checkpoint(self, run: str, local_ckpt: Path) -> int | None:
        """Copy ``run``'s latest uploaded checkpoint into ``local_ckpt`` (its folder, then its tracker): a save
        dir ``actor_config.load`` can name. Returns its iteration; None when ``run`` has none."""
        text = self.tracker(run)
        if text is None:
            return None
        try:
            folder = _folder_of(text)
        except ValueError:
            return None
        source = self.path(run, CHECKPOINT_DIR, folder)
        if self.fs.get_file_info(source).type != pafs.FileType.Directory:
            raise TrialStorageError(
                f"trial_storage {self.location}: {run}/{CHECKPOINT_DIR}: names {folder}, which is not there"
            )
        (local_ckpt / folder).mkdir(parents=True, exist_ok=True)  # copy_files makes only the folders below it
        pafs.copy_files(source, str(local_ckpt / folder), source_filesystem=self.fs,
                        destination_filesystem=pafs.LocalFileSystem())  # fmt: skip
        atomic_write_text(local_ckpt / CHECKPOINT_TRACKER, text)
        return checkpoint_iteration(local_ckpt)

    def remove_checkpoints(self, run: str) -> bool:
        """Remove ``run``'s checkpoint folder (the tracker with it); True when there was one. Raises OSError."""
        ckpt = self.path(run, CHECKPOINT_DIR)
        if self.fs.get_file_info(ckpt).type != pafs.FileType.Directory:
            return False
        self._delete(ckpt, quiet=False)
        return True

    def _copy_up(self, source: Path, destination: str) -> None:
        self.fs.create_dir(destination)
        pafs.copy_files(
            str(source), destination, source_filesystem=pafs.LocalFileSystem(), destination_filesystem=self.fs
        )

    def _put_text(self, relative: str, text: str) -> None:
        final = self.path(relative)
        tmp = posixpath.join(posixpath.dirname(final), f".tmp-{posixpath.basename(final)}-{uuid.uuid4().hex[:8]}")
        with self.fs.open_output_stream(tmp) as fh:
            fh.write(text.encode())
        self.fs.move(tmp, final)

    def _delete(self, path: str, quiet: bool = True) -> None:
        """Remove a file or folder; errors are ignored when ``quiet``, else raised as OSError."""
        try:
            info = self.fs.get_file_info(path)
            if info.type == pafs.FileType.Directory:
                self.fs.delete_dir(path)
            elif info.type == pafs.FileType.File:
                self.fs.delete_file(path)
        except (OSError, pyarrow.ArrowException) as err:
            if not quiet:
                raise OSError(str(err)) from None


def _open(location: str) -> tuple[pafs.FileSystem, str]:
    if not is_uri(location):
        return pafs.LocalFileSystem(), str(Path(location).expanduser().resolve())
    try:
        fs, path = pafs.FileSystem.from_uri(location)
        return fs, path
    except (pyarrow.ArrowInvalid, ValueError) as err:
        if "Unrecognized filesystem type" not in str(err):
            raise TrialStorageError(f"trial_storage {location}: {err}") from None
    try:  # a scheme pyarrow lacks: through fsspec, as Ray Train does
        from fsspec.core import url_to_fs
    except ImportError:
        raise TrialStorageError(
            f"trial_storage {location}: pyarrow.fs cannot open it and fsspec is not installed"
        ) from None
    fs, path = url_to_fs(location)
    return pafs.PyFileSystem(pafs.FSSpecHandler(fs)), path


@functools.lru_cache(maxsize=8)
def open_storage(location: str) -> TrialStorage:
    """The study's trial storage, opened once per process (opening an object store may cost a request)."""
    return TrialStorage(location)


def stored_tail(where: RunStorage, name: str, n: int = 20) -> list[str]:
    """The last ``n`` lines of a run's file in trial storage ([] when it is not there)."""
    text = open_storage(where.study).read_text(posixpath.join(where.run, name))
    return text.splitlines()[-n:] if text else []


# -------------------------------------------------------------------------------------- the worker side
def node_scratch() -> Path:
    """This Ray node's scratch root: ``$GRPO_SWEEP_SCRATCH`` (or ``<tmp>/grpo-sweep-scratch``) / node id."""
    root = Path(os.environ.get(SCRATCH_ENV) or Path(tempfile.gettempdir()) / "grpo-sweep-scratch")
    return root / _node_id()


def _node_id() -> str:
    try:
        import ray

        if ray.is_initialized():
            node = ray.get_runtime_context().get_node_id()
            if node:
                return str(node)
    except Exception:
        pass
    return f"host-{socket.gethostname()}"


class StagedRun:
    """One seed job's run in node-local scratch, kept in trial storage (see the module docstring)."""

    def __init__(self, where: RunStorage, root: Path | None = None):
        self.where = where
        self.root = root if root is not None else node_scratch()
        self.run_dir = self.root / where.scratch_key()  # .../trials/<N>/runs/seed<k>
        self.resume_dir = self.run_dir.parent.parent / "resume" / self.run_dir.name
        self.owner = self.run_dir.with_name(self.run_dir.name + ".owner")
        self.uploaded: str | None = None  # the tracker text last uploaded
        self.ready = False  # prepared: the storage is visible from here and scratch is set up

    @property
    def store(self) -> TrialStorage:
        return open_storage(self.where.study)

    def prepare(self, cfg: GRPOConfig, resume: bool) -> GRPOConfig:
        """Check the storage is visible, set up scratch (downloading the checkpoint a resumed run continues
        from); the config with ``actor_config.save`` (and ``load`` when resuming) in scratch."""
        self.store.check_marker()
        self.ready = True
        self._clear_dead_runs()
        for folder in (self.run_dir, self.resume_dir):
            shutil.rmtree(folder, ignore_errors=True)
        self.run_dir.mkdir(parents=True)
        self.owner.write_text(f"{socket.gethostname()} {os.getpid()}\n")
        cfg = cfg.model_copy(deep=True)
        cfg.actor_config.save = str(self.run_dir / CHECKPOINT_DIR)
        if resume and self.where.resume is not None:
            if self.store.download_checkpoint(self.where.resume, self.resume_dir) is None:
                raise TrialStorageError(
                    f"trial_storage {self.where.study}: {self.where.resume}: no checkpoint to resume from"
                )
            cfg.actor_config.load = str(self.resume_dir)
        return cfg

    def sync(self) -> None:
        """Upload the run's checkpoint (and its small files) when the engine saved a new one since the last call."""
        ckpt = self.run_dir / CHECKPOINT_DIR
        try:
            text = (ckpt / CHECKPOINT_TRACKER).read_text().strip()
        except OSError:
            return
        if text == self.uploaded:
            return
        self.upload_files()
        self.uploaded = self.store.upload_checkpoint(ckpt, self.where.run) or self.uploaded

    def upload_files(self) -> None:
        self.store.upload_files(self.run_dir, self.where.run)

    def finish(self) -> None:
        """The run's end: its last checkpoint and every file it wrote, into trial storage."""
        if not self.ready or not self.run_dir.is_dir():
            return  # nothing ran here (the storage is not visible from this node: never write to it)
        self.sync()
        self.upload_files()

    def discard(self) -> None:
        """Delete the run's scratch, and the folders above it that are left empty."""
        shutil.rmtree(self.run_dir, ignore_errors=True)
        shutil.rmtree(self.resume_dir, ignore_errors=True)
        self.owner.unlink(missing_ok=True)
        folder = self.resume_dir.parent
        for parent in (folder, *self.run_dir.parents):
            if parent == self.root or self.root not in parent.parents:
                break
            try:
                parent.rmdir()
            except OSError:
                pass
        try:
            self.root.rmdir()
        except OSError:
            pass

    def _clear_dead_runs(self) -> None:
        """Scratch of runs on this node whose worker died (killed: no ``discard``) is removed."""
        host = socket.gethostname()
        for owner in self.root.glob("*/trials/*/runs/*.owner"):
            try:
                owner_host, pid = owner.read_text().split()
                dead = owner_host == host and not pid_alive(int(pid))
            except (OSError, ValueError):
                continue
            if dead:
                run = owner.with_suffix("")
                shutil.rmtree(run, ignore_errors=True)
                shutil.rmtree(run.parent.parent / "resume" / run.name, ignore_errors=True)
                owner.unlink(missing_ok=True)
