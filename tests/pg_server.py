"""A throwaway PostgreSQL server (Debian's binaries) for the storage tests and benchmarks/kill_resume.py."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path


def postgres_bin() -> Path | None:
    """The newest installed server's bin folder (/usr/lib/postgresql/<version>/bin), or None."""
    for root in sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True):
        if (root / "initdb").exists() and (root / "postgres").exists():
            return root
    return None


@contextlib.contextmanager
def postgres_server(bindir: Path) -> Iterator[str]:
    """Start a server on a free port with database ``sweeps``; yield its URL; stop it and delete its files."""
    # The server refuses to run as root: as root, it runs as the postgres user in a folder it owns
    # (pytest's tmp_path sits under a root-only folder).
    root = Path(tempfile.mkdtemp(prefix="grpo-pg-"))
    user = "postgres" if os.getuid() == 0 else None

    def as_user(cmd: list[str]) -> list[str]:
        return ["runuser", "-u", user, "--", *cmd] if user else cmd

    if user:
        shutil.chown(root, user)
    data, sock_dir = root / "data", root / "sock"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    subprocess.run(as_user([str(bindir / "initdb"), "-D", str(data), "-U", "grpo", "--auth=trust"]),
                   check=True, capture_output=True)
    subprocess.run(as_user(["mkdir", str(sock_dir)]), check=True)
    server = subprocess.Popen(as_user([str(bindir / "postgres"), "-D", str(data), "-p", str(port), "-k", str(sock_dir),
                                       "-c", "listen_addresses=127.0.0.1"]),
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        ready = [str(bindir / "pg_isready"), "-h", "127.0.0.1", "-p", str(port)]
        deadline = time.monotonic() + 30
        while subprocess.run(ready, capture_output=True).returncode != 0:
            if time.monotonic() > deadline:
                raise TimeoutError("postgres did not accept connections within 30 s")
            time.sleep(0.2)
        subprocess.run(as_user([str(bindir / "createdb"), "-h", "127.0.0.1", "-p", str(port), "-U", "grpo", "sweeps"]),
                       check=True)
        yield f"postgresql://grpo@127.0.0.1:{port}/sweeps"
    finally:
        server.terminate()
        server.wait(timeout=30)
        shutil.rmtree(root, ignore_errors=True)
