"""Where trial runs may be kept (the spec's ``trial_storage``): a path or a URI, checked without opening it.

Part of the spec so that loading a spec checks the value without the storage code
(grpo.sweep.execution.trial_storage opens and uses the location when the study runs).
"""

from __future__ import annotations

import re
from pathlib import Path

import pyarrow
import pyarrow.fs as pafs

URI = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
# pyarrow.fs's own file systems (FileSystem.from_uri); the class tells whether this pyarrow build has it.
PYARROW_SCHEMES = {
    "s3": "S3FileSystem",
    "gs": "GcsFileSystem",
    "gcs": "GcsFileSystem",
    "hdfs": "HadoopFileSystem",
    "viewfs": "HadoopFileSystem",
    "abfs": "AzureFileSystem",
    "abfss": "AzureFileSystem",
}
IN_MEMORY = ("mock", "memory")  # one process's file system: no other node (nor the next run) sees it
NEEDS_HOST = ("s3", "gs", "gcs", "abfs", "abfss")  # the bucket or container is the URI's host


def is_uri(location: str) -> bool:
    return URI.match(location) is not None


def location_problem(value: str) -> str | None:
    """What is wrong with a ``trial_storage`` value (None: nothing), without touching the storage: a network
    file system is only opened when the study runs."""
    if not value.strip():
        return "must be a path or a storage URI such as s3://bucket/sweeps (got '')"
    if re.search(r"[\x00-\x1f\x7f]", value):
        return f"must be one line with no control characters (got {value!r})"
    match = URI.match(value)
    if match is None:
        path = Path(value).expanduser()
        if path.exists() and not path.is_dir():
            return f"{value}: is a file, not a folder"
        return None
    scheme = match.group(1).lower()
    if scheme in IN_MEMORY:
        return f"{value}: an in-memory file system ({scheme}://) is seen by no other node nor by the next run"
    if scheme == "file":
        try:
            pafs.FileSystem.from_uri(value)  # local: no I/O
        except (pyarrow.ArrowInvalid, ValueError) as err:
            return f"{value}: {err} (a file URI is file:///absolute/path)"
        return None
    if scheme in PYARROW_SCHEMES:
        if not hasattr(pafs, PYARROW_SCHEMES[scheme]):
            return f"{value}: this pyarrow ({pyarrow.__version__}) was built without {PYARROW_SCHEMES[scheme]}"
        rest = value[match.end() :]
        if scheme in NEEDS_HOST and not rest.split("/", 1)[0].split("?", 1)[0]:
            return f"{value}: names no bucket ({scheme}://BUCKET/PATH)"
        return None
    fsspec_known = _fsspec_schemes()
    if scheme in fsspec_known:
        try:
            import fsspec

            fsspec.get_filesystem_class(scheme)  # imports its package; connects to nothing
        except (ImportError, ValueError) as err:
            return f"{value}: fsspec cannot open {scheme}:// here ({err})"
        return None
    known = "a path, file://, s3://, gs://, hdfs:// or abfs:// (pyarrow.fs)"
    more = ", or a scheme fsspec knows" if fsspec_known else " (fsspec is not installed for other schemes)"
    return f"{value}: unknown scheme {scheme}://; use {known}{more}"


def _fsspec_schemes() -> set[str]:
    try:
        from fsspec.registry import known_implementations
    except ImportError:
        return set()
    return set(known_implementations)
