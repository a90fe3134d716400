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


class PostgresServer:
    """A server on a free port with database ``sweeps``, its files in a temporary folder; ``stop()`` and
    ``start()`` restart it on the same port and data (a database restart, as a study's driver sees one)."""

    def __init__(self, bindir: Path) -> None:
        self.bindir = bindir
        # The server refuses to run as root: as root, it runs as the postgres user in a folder it owns
        # (pytest's tmp_path sits under a root-only folder).
        self.root = Path(tempfile.mkdtemp(prefix="grpo-pg-"))
        self.user = "postgres" if os.getuid() == 0 else None
        if self.user:
            shutil.chown(self.root, self.user)
        self.data, self.sock_dir = self.root / "data", self.root / "sock"
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.url = f"postgresql://grpo@127.0.0.1:{self.port}/sweeps"
        self.process: subprocess.Popen | None = None

    def create(self) -> None:
        """A new cluster, started, with an empty database ``sweeps``."""
        self._run([str(self.bindir / "initdb"), "-D", str(self.data), "-U", "grpo", "--auth=trust"])
        self._run(["mkdir", str(self.sock_dir)])
        self.start()
        self._run([str(self.bindir / "createdb"), "-h", "127.0.0.1", "-p", str(self.port), "-U", "grpo", "sweeps"])

    def _as_user(self, cmd: list[str]) -> list[str]:
        return ["runuser", "-u", self.user, "--", *cmd] if self.user else cmd

    def _run(self, cmd: list[str]) -> None:
        subprocess.run(self._as_user(cmd), check=True, capture_output=True)

    def start(self) -> None:
        """Start the server and wait until it accepts connections."""
        self.process = subprocess.Popen(
            self._as_user([str(self.bindir / "postgres"), "-D", str(self.data), "-p", str(self.port),
                           "-k", str(self.sock_dir), "-c", "listen_addresses=127.0.0.1"]),
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        ready = [str(self.bindir / "pg_isready"), "-h", "127.0.0.1", "-p", str(self.port)]
        deadline = time.monotonic() + 30
        while subprocess.run(ready, capture_output=True).returncode != 0:
            if time.monotonic() > deadline:
                raise TimeoutError("postgres did not accept connections within 30 s")
            time.sleep(0.2)

    def stop(self) -> None:
        """A fast shutdown (``pg_ctl stop -m fast``): open sessions are cut, as in a restart or a failover."""
        self._run([str(self.bindir / "pg_ctl"), "-D", str(self.data), "-m", "fast", "-w", "stop"])
        if self.process is not None:
            self.process.wait(timeout=30)
            self.process = None

    def close(self) -> None:
        if self.process is not None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:  # a smart shutdown waits for clients: cut them
                self.process.kill()
                self.process.wait(timeout=30)
        shutil.rmtree(self.root, ignore_errors=True)


@contextlib.contextmanager
def postgres_instance(bindir: Path) -> Iterator[PostgresServer]:
    """A started ``PostgresServer``; stopped and its files deleted at the end."""
    server = PostgresServer(bindir)
    try:
        server.create()
        yield server
    finally:
        server.close()


@contextlib.contextmanager
def postgres_server(bindir: Path) -> Iterator[str]:
    """Start a server on a free port with database ``sweeps``; yield its URL; stop it and delete its files."""
    with postgres_instance(bindir) as server:
        yield server.url
