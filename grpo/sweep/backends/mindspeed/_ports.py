"""Port blocks: each trial supervised on a host leases one and shifts its runtime env's ports by it."""

from __future__ import annotations

import fcntl
import os
import socket
import tempfile
from pathlib import Path

from grpo.sweep.backends._base import TrialFailed

# Port blocks: concurrent trials supervised on one host each lease one (a lock file held while the trial
# runs) and shift every port setting of their runtime env by it, so that no two share an HCCL/LCAL port.
PORT_LEASE_DIR = "grpo-sweep-ports"  # under the host's temporary directory
PORT_BLOCKS = 64
HCCL_PORT_STRIDE = 64  # HCCL_IF_BASE_PORT reserves a run of ports from the base (16 per node in CANN's docs)
DEFAULT_HCCL_BASE_PORT = 12345  # MindSpeed-RL's configs/envs/runtime_env.yaml
MAX_PORT = 65520  # HCCL_IF_BASE_PORT's upper bound


class PortLease:
    """One port block of this host, held (an exclusive lock on its file) until ``release``.

    The lock dies with the process, so a killed supervisor never keeps a block.
    """

    def __init__(self, block: int, fd: int | None):
        self.block = block
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the file drops its lock
            self._fd = None


def lease_port_block(directory: Path | None = None) -> PortLease:
    """The lowest port block no other trial on this host holds (``TrialFailed`` when all are taken)."""
    folder = directory or Path(tempfile.gettempdir()) / PORT_LEASE_DIR
    folder.mkdir(parents=True, exist_ok=True)
    # Ports are the host's, not one user's: every user's trials must see (and lock) the same files, so the
    # folder is world-writable and sticky like /tmp, and lock files are rw for all, whatever the umask.
    _chmod_if_owned(folder, 0o1777)
    for block in range(PORT_BLOCKS):
        path = folder / f"block-{block:03d}.lock"
        try:
            fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o666)
        except PermissionError:  # another user's file we cannot open: treat that block as taken
            continue
        _chmod_if_owned(path, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            continue
        return PortLease(block, fd)
    raise TrialFailed(f"no free port block: {PORT_BLOCKS} trials already run on {socket.gethostname()}")


def _chmod_if_owned(path: Path, mode: int) -> None:
    """``chmod`` what this user created (the umask narrowed it); another user's file is left as it is."""
    try:
        if path.stat().st_uid == os.getuid() and path.stat().st_mode & 0o7777 != mode:
            path.chmod(mode)
    except OSError:
        pass


def _shift_port(name: str, value: str, offset: int) -> str:
    """``value`` (a port, ``host:port`` or a ``low-high`` range) moved ``offset`` blocks up."""
    text = str(value).strip()
    try:
        if name == "LCAL_COMM_ID":
            host, _, port = text.rpartition(":")
            return f"{host}:{int(port) + offset}"
        if name.endswith("_PORT_RANGE"):
            low, _, high = text.partition("-")
            width = int(high) - int(low) + 1
            return f"{int(low) + offset * width}-{int(high) + offset * width}"
        return str(int(text) + offset * HCCL_PORT_STRIDE)
    except ValueError:
        return text  # "auto" or a form we do not know: left as written


def trial_ports(env: dict[str, str], block: int) -> dict[str, str]:
    """The port settings of one trial: ``env``'s, each moved to port block ``block`` (block 0 keeps them).

    ``HCCL_IF_BASE_PORT`` (HCCL's host-NIC ports, a run from the base; MindSpeed-RL's default file sets
    12345, the base used when nothing sets it) moves by ``HCCL_PORT_STRIDE`` per block; ``LCAL_COMM_ID``
    (``host:port`` of MindSpeed's LCAL communicator) by one port; ``HCCL_HOST_SOCKET_PORT_RANGE`` and
    ``HCCL_NPU_SOCKET_PORT_RANGE`` (``low-high``) by their own width, so the trials' ranges are disjoint.
    """
    out = {"HCCL_IF_BASE_PORT": _shift_port("HCCL_IF_BASE_PORT", env.get("HCCL_IF_BASE_PORT", ""), block)}
    if not out["HCCL_IF_BASE_PORT"].isdigit():
        out["HCCL_IF_BASE_PORT"] = str(DEFAULT_HCCL_BASE_PORT + block * HCCL_PORT_STRIDE)
    if int(out["HCCL_IF_BASE_PORT"]) > MAX_PORT:
        raise TrialFailed(
            f"HCCL_IF_BASE_PORT for port block {block} is {out['HCCL_IF_BASE_PORT']}, above {MAX_PORT}: "
            f"lower the base in mindspeed.env or runtime_env.yaml"
        )
    for name in ("LCAL_COMM_ID", "HCCL_HOST_SOCKET_PORT_RANGE", "HCCL_NPU_SOCKET_PORT_RANGE"):
        if env.get(name):
            out[name] = _shift_port(name, env[name], block)
    return out
