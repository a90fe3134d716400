"""A Ray cluster address as the spec names it (``cluster.address``): parsed the way ``ray.init`` splits it.

Part of the spec so that loading a spec checks the address without importing the Ray-joining code
(grpo.sweep.execution.connect resolves, probes and joins it).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

CLIENT_PORT = 10001  # ray start --head --ray-client-server-port

_HOST = r"\[[0-9A-Fa-f:.]+\]|[^\s:/\[\]@]+"  # a name, an IPv4 address or a bracketed IPv6 address
_ADDRESS = re.compile(rf"^(?:(?P<client>ray)://)?(?P<host>{_HOST})(?::(?P<port>\d{{1,5}}))?$")


@dataclass(frozen=True)
class Target:
    """Where to connect: ``kind`` is ``local``, ``gcs`` (host:port) or ``client`` (ray://host:port)."""

    kind: str
    host: str = ""
    port: int = 0
    asked: str = ""  # what the spec or the flag said
    found_by: str = ""  # auto only: where the address came from

    @property
    def hostport(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host  # IPv6
        return f"{host}:{self.port}"

    @property
    def address(self) -> str:
        """What ``ray.init(address=...)`` gets."""
        if self.kind == "local":
            return "local"
        return f"ray://{self.hostport}" if self.kind == "client" else self.hostport

    @property
    def label(self) -> str:
        """The address as the user gave it, and what ``auto`` resolved it to."""
        if self.found_by:
            return f"{self.asked} ({self.address}, from {self.found_by})"
        return self.asked or self.address


def parse(address: str) -> Target:
    """``host:port`` or ``ray://host[:port]`` as a Target, the way Ray splits them; ``ValueError`` otherwise.

    A GCS address needs its port (``ray.init("head")`` is "Invalid address format" in Ray); a client address
    defaults to port 10001 as Ray's client does.
    """
    m = _ADDRESS.fullmatch(address.strip())
    if m is None or (m["port"] is None and not m["client"]):
        raise ValueError(
            f"must be local, auto, host:port (what `ray start --head` prints) or ray://host:port (got {address!r})"
        )
    port = int(m["port"]) if m["port"] is not None else CLIENT_PORT
    if not 0 < port < 65536:
        raise ValueError(f"the port of {address} must be 1-65535")
    return Target("client" if m["client"] else "gcs", m["host"].strip("[]"), port, asked=address)
