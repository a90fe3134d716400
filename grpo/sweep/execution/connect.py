"""Joining a Ray cluster as Ray's own tools do, with a one-line error before anything is written.

``cluster.address`` (or ``--address``) takes the forms ``ray.init(address=...)`` takes, resolved the same way:

- ``local``: a new Ray started by this process (``ray.init(address="local")``), never a stale one.
- ``host:port``: the GCS address that ``ray start --head`` prints (``--port``, 6379 by default). The driver
  joins as a Ray driver, so this machine must be a node of the cluster (``ray start --address`` ran here).
- ``ray://host:port``: the Ray client server of the head (``--ray-client-server-port``, 10001 by default), for
  a driver outside the cluster.
- ``auto``: what Ray's ``auto`` finds: ``RAY_ADDRESS`` when set (any of the forms above), else the cluster of
  the latest ``ray start`` on this machine (``<ray temp dir>/ray_current_cluster``), else a Ray found running
  here; none is an error. The line printed after joining says which cluster it was and where it came from.

Before ``ray.init`` the address is probed with one gRPC call to the GCS (``GetClusterId``) or the client
server (a ``PING``), with a deadline of ``PROBE_TIMEOUT_S``: Ray itself retries an unreachable GCS for
minutes. The probe tells nothing listening, no answer, not a Ray service and "requires a token" apart, and each
becomes one ``UserError`` line naming the address; ``grpo-sweep run`` joins a remote cluster before it opens
the study, so nothing is written when it fails.

Ray's token authentication (Ray >= 2.52, ``RAY_AUTH_MODE=token``): Ray's driver sends its token only when
``RAY_AUTH_MODE=token`` is set, but ``ray start --head`` turns authentication on by itself when a token file
exists (Ray 2.59+). When the probe says the cluster requires a token and ``RAY_AUTH_MODE`` is unset, this
process sets ``RAY_AUTH_MODE=token`` and Ray uses the token found where Ray looks for it (``RAY_AUTH_TOKEN``,
else the file ``RAY_AUTH_TOKEN_PATH``, else ``~/.ray/auth_token``); a missing or wrong token is one line.
Ray's warning "Token authentication is enabled for this Ray cluster", logged by every new local cluster of
Ray 2.59+, is left out; the authentication stays as Ray sets it.
"""

from __future__ import annotations

import importlib
import logging
import os
import sys
import warnings
from dataclasses import dataclass, field
from pathlib import Path

from grpo.errors import UserError
from grpo.sweep.spec.address import CLIENT_PORT, Target, parse

GCS_PORT = 6379  # ray start --head --port
PROBE_TIMEOUT_S = 5.0  # one gRPC call; Ray gives a GCS connection 5 s too, but then retries it for minutes
CLIENT_ATTEMPTS = 2  # a Ray client server sometimes fails to start its per-client server once; a retry connects

_TOKEN_NOTICE = "Token authentication is enabled for this Ray cluster"
_AUTH_LOGGER = "ray._private.authentication.authentication_token_setup"


@dataclass
class Joined:
    """The cluster this process is connected to, as the line printed after joining describes it."""

    target: Target
    auth: str  # "token" or "none"
    nodes: int = 0
    resources: dict[str, float] = field(default_factory=dict)

    def line(self) -> str:
        auth = "token authentication" if self.auth == "token" else "no authentication"
        nodes = f"{self.nodes} node{'s' * (self.nodes != 1)}"
        return f"ray: joined {self.target.label}: {nodes}, {describe_resources(self.resources)}; {auth}"


def resolve(address: str, where: str = "cluster.address") -> Target:
    """The cluster ``address`` names; ``auto`` as Ray's ``auto`` resolves it (RAY_ADDRESS, the latest
    ``ray start`` here, a Ray running here). A one-line UserError when ``auto`` finds none."""
    address = (address or "local").strip()
    if address == "local":
        return Target("local", asked="local")
    if address != "auto":
        try:
            return parse(address)
        except ValueError as err:
            raise UserError(f"{where}: {err}") from None
    env = os.environ.get("RAY_ADDRESS", "").strip()
    if env:
        if env == "local":  # Ray's auto with RAY_ADDRESS=local starts a new local Ray
            return Target("local", asked="auto", found_by="RAY_ADDRESS")
        try:
            found = parse(env)
        except ValueError as err:
            raise UserError(f"{where} auto: RAY_ADDRESS={env}: {err}") from None
        return Target(found.kind, found.host, found.port, asked="auto", found_by="RAY_ADDRESS")
    from ray._private import services, utils

    try:
        hostport = services.get_ray_address_from_environment("auto", None)
    except ConnectionError:
        raise UserError(
            f"{where} auto: no running Ray cluster found on this machine (RAY_ADDRESS is unset and no `ray start` "
            "ran here): start one with `ray start --head`, or give its address (host:port or ray://host:port)"
        ) from None
    latest = utils.read_ray_address(None)
    how = "the latest `ray start` on this machine" if hostport == latest else "a Ray running on this machine"
    found = parse(hostport)
    return Target(found.kind, found.host, found.port, asked="auto", found_by=how)


def local_token() -> tuple[str, str] | None:
    """This machine's Ray token and where it came from, looked up as Ray does: ``RAY_AUTH_TOKEN``, else the
    file ``RAY_AUTH_TOKEN_PATH``, else ``~/.ray/auth_token``; None when there is none."""
    value = os.environ.get("RAY_AUTH_TOKEN", "").strip()
    if value:
        return value, "RAY_AUTH_TOKEN"
    path = os.environ.get("RAY_AUTH_TOKEN_PATH", "").strip()
    if path:
        try:
            text = Path(path).expanduser().read_text().strip()
        except OSError as err:
            raise UserError(f"RAY_AUTH_TOKEN_PATH={path}: cannot read the Ray token file ({err.strerror})") from None
        if not text:
            raise UserError(f"RAY_AUTH_TOKEN_PATH={path}: the Ray token file is empty")
        return text, path
    default = Path.home() / ".ray" / "auth_token"
    try:
        text = default.read_text().strip()
    except OSError:
        return None
    return (text, str(default)) if text else None


def probe(target: Target, token: str | None = None, timeout: float = PROBE_TIMEOUT_S) -> tuple[str, str]:
    """One gRPC call to the cluster: ``("OK", "")`` or the gRPC status name and its details.

    ``gcs``: ``NodeInfoGcsService.GetClusterId`` (what Ray's GcsClient asks first); ``client``: the Ray client's
    ``ClusterInfo(PING)`` (what ``ray.init("ray://...")`` asks first). With TLS (``RAY_USE_TLS``) or without
    Ray's generated stubs only a TCP connection is tried (``("OK", "")`` when it opens).
    """
    if os.environ.get("RAY_USE_TLS", "0").lower() in ("1", "true"):
        return _tcp_probe(target, timeout)
    try:
        import grpc

        # Ray's generated protobuf modules (their stubs lack the message classes: typed as modules)
        gcs_service_pb2 = importlib.import_module("ray.core.generated.gcs_service_pb2")
        gcs_service_pb2_grpc = importlib.import_module("ray.core.generated.gcs_service_pb2_grpc")
        ray_client_pb2 = importlib.import_module("ray.core.generated.ray_client_pb2")
        ray_client_pb2_grpc = importlib.import_module("ray.core.generated.ray_client_pb2_grpc")
    except ImportError:
        return _tcp_probe(target, timeout)
    metadata = [("authorization", f"Bearer {token}")] if token else None
    channel = grpc.insecure_channel(target.hostport)
    try:
        if target.kind == "gcs":
            gcs = gcs_service_pb2_grpc.NodeInfoGcsServiceStub(channel)
            gcs.GetClusterId(gcs_service_pb2.GetClusterIdRequest(), timeout=timeout, metadata=metadata)
        else:
            ping = ray_client_pb2.ClusterInfoRequest(type=ray_client_pb2.ClusterInfoType.PING)
            ray_client_pb2_grpc.RayletDriverStub(channel).ClusterInfo(ping, timeout=timeout, metadata=metadata)
        return "OK", ""
    except grpc.RpcError as err:
        return err.code().name, " ".join((err.details() or "").split())
    finally:
        channel.close()


def _tcp_probe(target: Target, timeout: float) -> tuple[str, str]:
    import socket

    try:
        socket.create_connection((target.host, target.port), timeout=timeout).close()
        return "OK", ""
    except TimeoutError:
        return "DEADLINE_EXCEEDED", ""
    except OSError as err:
        return "UNAVAILABLE", err.strerror or str(err)


def _unreachable(target: Target, code: str, detail: str, timeout: float) -> str:
    """What a failed probe means, in words, with what to check."""
    low = detail.lower()
    if target.kind == "client":
        check = f"is the head's Ray client server on this port ({CLIENT_PORT} unless --ray-client-server-port)?"
    else:
        check = "is `ray start --head` running there, with this --port?"
    if target.found_by == "the latest `ray start` on this machine":
        check = "that cluster is gone: `ray start --head` again, or give the address"
    if code == "DEADLINE_EXCEEDED":
        return (
            f"no answer from {target.hostport} within {timeout:g} s (wrong host, a firewall or a closed port); {check}"
        )
    if code == "UNAVAILABLE" and "refused" in low:
        return f"nothing listens at {target.hostport} (connection refused); {check}"
    if code == "UNAVAILABLE" and ("resolv" in low or ("name" in low and "not" in low)):
        return f"the host name {target.host} does not resolve"
    if code == "UNIMPLEMENTED" and target.kind == "gcs":
        return (
            f"something answers at {target.hostport}, but not a Ray cluster's GCS: give the address `ray start "
            f"--head` prints (port {GCS_PORT} unless --port), or ray://host:port for the Ray client port"
        )
    if code == "UNIMPLEMENTED":
        return (
            f"something answers at {target.hostport}, but not a Ray client server ({CLIENT_PORT} unless "
            "--ray-client-server-port); for the GCS address `ray start` prints, drop ray://"
        )
    server = "Ray client server" if target.kind == "client" else "Ray cluster"
    said = f": {detail[:200]}" if detail else ""
    return f"{target.hostport} did not answer as a {server} ({code}{said}); {check}"


def settle_auth(target: Target, where: str = "cluster.address", timeout: float = PROBE_TIMEOUT_S) -> str:
    """Probe ``target``; return ``"none"`` or ``"token"`` (the cluster requires Ray's token and this machine's
    token opens it: then ``RAY_AUTH_MODE=token`` is set for this process when it was unset). Anything else
    is a one-line UserError naming the address."""
    at = f"{where} {target.label}"
    code, detail = probe(target, None, timeout)
    if code == "OK":
        return "none"
    if code != "UNAUTHENTICATED":
        raise UserError(f"{at}: {_unreachable(target, code, detail, timeout)}")
    mode = os.environ.get("RAY_AUTH_MODE", "").strip().lower()
    ask = "copy the head's token (`ray get-auth-token` there) into RAY_AUTH_TOKEN or ~/.ray/auth_token"
    if mode == "disabled":
        raise UserError(
            f"{at}: the cluster requires Ray's token authentication but RAY_AUTH_MODE=disabled here: "
            f"set RAY_AUTH_MODE=token and {ask}"
        )
    found = local_token()
    if found is None:
        raise UserError(f"{at}: the cluster requires Ray's token authentication and this machine has no token: {ask}")
    token, source = found
    code, detail = probe(target, token, timeout)
    if code == "UNAUTHENTICATED":
        raise UserError(f"{at}: the cluster rejected the Ray token from {source} (not the cluster's token): {ask}")
    if code != "OK":
        raise UserError(f"{at}: {_unreachable(target, code, detail, timeout)}")
    if not mode:
        _use_token_auth()
    return "token"


def check_node_here(target: Target, auth: str, where: str = "cluster.address") -> None:
    """A ``host:port`` driver attaches to a node of the cluster running on this machine, found as Ray finds it
    (its raylet processes here, ``services.find_node_ids``, that the GCS lists as alive); without one Ray waits
    60 s and fails. No such node is one line; when the check itself cannot run, Ray decides."""
    try:
        import grpc
        from ray._private import services

        gcs_pb2 = importlib.import_module("ray.core.generated.gcs_pb2")
        gcs_service_pb2 = importlib.import_module("ray.core.generated.gcs_service_pb2")
        gcs_service_pb2_grpc = importlib.import_module("ray.core.generated.gcs_service_pb2_grpc")
        here = set(services.find_node_ids())
        found = local_token() if auth == "token" else None
        metadata = [("authorization", f"Bearer {found[0]}")] if found else None
        with grpc.insecure_channel(target.hostport) as channel:
            reply = gcs_service_pb2_grpc.NodeInfoGcsServiceStub(channel).GetAllNodeInfo(
                gcs_service_pb2.GetAllNodeInfoRequest(), timeout=PROBE_TIMEOUT_S, metadata=metadata
            )
        alive = {n.node_id.hex() for n in reply.node_info_list if n.state == gcs_pb2.GcsNodeInfo.ALIVE}
    except Exception:
        return
    if alive and not here & alive:
        raise UserError(
            f"{where} {target.label}: this machine is not a node of that cluster (no Ray node of it runs here): run "
            f"`ray start --address={target.hostport}` here first, or use the Ray client, ray://<head>:{CLIENT_PORT}"
        )


def _use_token_auth() -> None:
    """What Ray does when it turns token authentication on for a process (its ``_enable_token_auth``)."""
    os.environ["RAY_AUTH_MODE"] = "token"
    try:
        from ray._raylet import AuthenticationTokenLoader, Config  # type: ignore[attr-defined]

        Config.initialize("")  # Ray caches its config: refresh it so this process sees token mode
        AuthenticationTokenLoader.instance().reset_cache()
    except (ImportError, AttributeError):  # a Ray without token authentication reads no RAY_AUTH_MODE
        pass


class _NoTokenNotice(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith(_TOKEN_NOTICE)


def _quiet_token_notice() -> None:
    logger = logging.getLogger(_AUTH_LOGGER)
    if not any(isinstance(f, _NoTokenNotice) for f in logger.filters):
        logger.addFilter(_NoTokenNotice())


def worker_env() -> dict[str, str]:
    """Environment for Ray workers: what the driver can import, they can (user backends, tests)."""
    paths = [p for p in [os.getcwd(), *sys.path] if p and os.path.isdir(p)]
    env = {"PYTHONPATH": os.pathsep.join(dict.fromkeys(paths))}
    for key in ("GRPO_CACHE_DIR", "GRPO_CONFIG_DIR", "WANDB_MODE"):
        if os.environ.get(key):
            env[key] = os.environ[key]
    return env


_joined: Joined | None = None  # the connection connect() made (None: not connected by us)


def connect(
    address: str,
    *,
    where: str = "cluster.address",
    num_cpus: int | None = None,
    resources: dict | None = None,
    announce: bool = True,
) -> bool:
    """Connect this process to Ray at ``address``; True when the connection is this module's (the caller
    ends it with ``disconnect()``), False when Ray was already initialised by someone else (a test fixture).

    A remote cluster is probed first (one-line UserError when it cannot be joined) and announced with one
    line on stderr: the address, how ``auto`` found it, its nodes, resources and authentication.
    """
    import ray

    global _joined
    if ray.is_initialized():
        return _joined is not None
    target = resolve(address, where)
    runtime_env = {"env_vars": worker_env()}
    _quiet_token_notice()
    if target.kind == "local":
        ray.init(
            address="local",  # always a new local cluster, never a stale one found on disk
            num_cpus=num_cpus or os.cpu_count(),
            resources=resources or None,
            include_dashboard=False,
            log_to_driver=False,
            configure_logging=False,
            runtime_env=runtime_env,
        )
        _joined = Joined(target, auth="")
        return True
    auth = settle_auth(target, where)
    if target.kind == "gcs":
        check_node_here(target, auth, where)
    _init_remote(target, runtime_env, where)
    joined = Joined(target, auth)
    try:
        joined.nodes = sum(1 for node in ray.nodes() if node.get("Alive"))
        joined.resources = {k: float(v) for k, v in ray.cluster_resources().items()}
    except Exception:  # the line is information; the connection works
        pass
    _joined = joined
    if announce:
        print(joined.line(), file=sys.stderr, flush=True)
    return True


def _init_remote(target: Target, runtime_env: dict, where: str) -> None:
    import ray

    attempts = CLIENT_ATTEMPTS if target.kind == "client" else 1
    for attempt in range(1, attempts + 1):
        try:
            with warnings.catch_warnings():  # Ray's client warns before it raises; the error says it once
                warnings.simplefilter("ignore")
                ray.init(address=target.address, log_to_driver=False, configure_logging=False, runtime_env=runtime_env)
            return
        except Exception as err:
            _shutdown_quietly()
            if attempt == attempts or not isinstance(err, ConnectionError):  # ConnectionAbortedError too
                why = f"Ray could not connect: {type(err).__name__}: {one_line(str(err))}"
                raise UserError(f"{where} {target.label}: {why}") from None


def one_line(message: str, limit: int = 400) -> str:
    """Ray's message on one line; a server-side traceback in it becomes its first and last lines."""
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    if any(line.startswith("Traceback (most recent call last)") for line in lines):
        lines = [lines[0], lines[-1]] if len(lines) > 1 else lines
    text = " ".join(" ".join(lines).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _shutdown_quietly() -> None:
    import ray

    try:
        ray.shutdown()
    except Exception:
        pass


def joined() -> Joined | None:
    """The cluster ``connect()`` joined, or None."""
    return _joined


def disconnect() -> None:
    """End the connection ``connect()`` made (a local Ray it started stops)."""
    import ray

    global _joined
    _joined = None
    ray.shutdown()


def describe_resources(total: dict[str, float]) -> str:
    """Cluster resources in one phrase: ``4 CPU, 16 NPU, 62.1 GiB memory`` (node and object store entries left out)."""
    skip = ("node:", "accelerator_type:")
    items = {k: v for k, v in total.items() if not k.startswith(skip) and k not in ("memory", "object_store_memory")}
    first = [k for k in ("CPU", "GPU", "NPU") if k in items]
    parts = [f"{_num(items[k])} {k}" for k in first + sorted(set(items) - set(first))]
    if total.get("memory"):
        parts.append(f"{total['memory'] / 2**30:.1f} GiB memory")
    return ", ".join(parts) or "no resources"


def _num(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def join_remote(address: str, where: str = "cluster.address") -> None:
    """Join a remote cluster now (``grpo-sweep run`` calls this before it opens the study, so a cluster that
    cannot be joined is one line with nothing written); a local Ray is left to start with the scheduler."""
    if resolve(address, where).kind != "local":
        connect(address, where=where)
