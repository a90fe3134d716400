"""Joining a Ray cluster (grpo/sweep/execution/connect.py): the address forms of ``ray.init(address=...)``, a one-line
error within 30 s for an address nothing usable answers at (before the study exists), and a real two-node
cluster started with ``ray start`` (the documented recipe) with Ray's token authentication on, joined by
``host:port``, ``auto`` and ``ray://host:port``.

What the tests mirror in Ray (2.60, read from its source): ``ray._private.services.canonicalize_bootstrap_address``
and ``get_ray_address_from_environment`` (``auto``: RAY_ADDRESS, else the latest ``ray start`` on this machine,
else a running GCS; a GCS address needs its port), ``ray.util.client`` (``ray://``, port 10001 by default),
``ray._private.authentication`` (``RAY_AUTH_MODE=token``; the token from RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH or
~/.ray/auth_token; an explicit address never turns token mode on by itself, which is why a ``host:port``
driver failed against a ``ray start`` cluster with a token).

The cluster's processes get their own temp dir, a throwaway HOME (no ~/.ray token of this machine is used)
and every port picked free (tests run beside another Ray: ``_node_ports``), and are stopped by SIGTERM to their ``ray start --block`` (which stops what it started),
then SIGKILL of their process groups; ``ray stop`` would stop every Ray on the machine.
"""

from __future__ import annotations

import inspect
import logging
import os
import random
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest
from sweep_helpers import cli_env, load, states, write_spec

from grpo.errors import UserError
from grpo.sweep.execution import connect
from grpo.sweep.spec.address import parse
from grpo.sweep.spec.load import load_spec

RAY = str(Path(sys.executable).parent / "ray")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def _is_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("", port))
        except OSError:
            return False
        return True


def _worker_ports(count: int = 40) -> list[str]:
    """``ray start`` flags for a block of ``count`` free ports as the node's worker ports. Every Ray on a machine
    hands its workers ports from the bottom of 10002-19999 up by default, so two clusters (another pytest-xdist
    worker's local Ray) race for the same ones: the CI failure "Starting Ray client server failed". A random block
    in 20000-22999 lies outside that range, Linux's ephemeral range (32768-60999, where bind(0) picks) and Ray's
    client servers (23000-23999)."""
    for _ in range(200):
        start = random.randrange(20000, 23000 - count)
        if all(_is_free(port) for port in range(start, start + count)):
            return [f"--min-worker-port={start}", f"--max-worker-port={start + count - 1}"]
    raise AssertionError("no block of free ports in 20000-22999")


def _node_ports() -> list[str]:
    """Every port of one ``ray start`` node picked free for this test (the fixed defaults, such as the dashboard
    agent's 52365, would be shared with any other Ray on the machine)."""
    named = ("node-manager-port", "object-manager-port", "dashboard-agent-listen-port", "dashboard-agent-grpc-port",
             "metrics-export-port", "runtime-env-agent-port")  # fmt: skip
    return [f"--{name}={_free_port()}" for name in named] + _worker_ports()


# -- address forms (no cluster) --------------------------------------------------------------------------


def test_address_forms_are_ray_s():
    """host:port splits as Ray's own parser splits it (ray._raylet.parse_address); ray:// defaults to the
    client port; a GCS address without a port is refused, as ``ray.init("head")`` is ("Invalid address")."""
    from ray._raylet import parse_address

    for text in ["192.0.2.7:6379", "head-node.example:46379", "[::1]:6379"]:
        target = parse(text)
        host, port = parse_address(text)
        assert (target.kind, target.host, target.port) == ("gcs", host, int(port))
        assert target.address == text  # what ray.init gets is what the user wrote
    assert parse("ray://head").address == "ray://head:10001"
    assert parse("ray://head:20001").kind == "client"
    for bad in ["head", "http://head:6379", "head:0", "head:70000", "ray://", "ray://a:b"]:
        with pytest.raises(ValueError):
            parse(bad)


def test_spec_takes_what_ray_start_prints(tmp_path):
    spec = write_spec(tmp_path)
    assert load_spec(spec, address="192.0.2.7:6379").cluster.address == "192.0.2.7:6379"
    assert load_spec(spec, address="ray://head").cluster.address == "ray://head"
    with pytest.raises(UserError) as err:
        load_spec(spec, address="head")
    assert str(err.value) == (
        f"{spec}: cluster.address: must be local, auto, host:port (what `ray start --head` prints) "
        "or ray://host:port (got 'head')"
    )


def test_an_unreachable_address_is_one_line_within_30_s_with_nothing_written(tmp_path):
    """The worst case: a port that accepts connections and never answers (Ray's own connect retries it for
    minutes). ``grpo-sweep run`` stops with one line naming the address, before the study exists."""
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)  # the kernel completes the handshake; nothing ever answers
    port = silent.getsockname()[1]
    spec = write_spec(tmp_path)
    try:
        started = time.monotonic()
        done = subprocess.run(
            [sys.executable, "-m", "grpo.cli", "run", str(spec), "--address", f"127.0.0.1:{port}", "--quiet"],
            cwd=tmp_path, env=cli_env(), capture_output=True, text=True, timeout=60,
        )
        took = time.monotonic() - started
    finally:
        silent.close()
    lines = (done.stdout + done.stderr).strip().splitlines()
    assert done.returncode == 2, lines
    assert lines == [
        f"error: --address 127.0.0.1:{port}: no answer from 127.0.0.1:{port} within 5 s (wrong host, a firewall "
        "or a closed port); is `ray start --head` running there, with this --port?"
    ]
    assert took < 30, f"{took:.1f} s"
    print(f"unreachable address: one line after {took:.1f} s (probe {connect.PROBE_TIMEOUT_S:g} s)")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.yaml"]  # no studies/, no reports/


def test_refused_and_client_failures_are_one_line(monkeypatch):
    port = _free_port()  # closed again: nothing listens
    for address, says in [
        (f"127.0.0.1:{port}", "is `ray start --head` running there"),
        (f"ray://127.0.0.1:{port}", "is the head's Ray client server on this port (10001 unless"),
    ]:
        with pytest.raises(UserError) as err:
            connect.settle_auth(connect.resolve(address), where="--address")
        assert str(err.value).startswith(f"--address {address}: nothing listens at 127.0.0.1:{port} (connection refused)")
        assert says in str(err.value) and "\n" not in str(err.value)
    monkeypatch.setenv("RAY_ADDRESS", f"127.0.0.1:{port}")
    with pytest.raises(UserError) as err:
        connect.settle_auth(connect.resolve("auto"))
    assert str(err.value).startswith(f"cluster.address auto (127.0.0.1:{port}, from RAY_ADDRESS): nothing listens")
    with pytest.raises(UserError, match="does not resolve"):
        connect.settle_auth(connect.resolve("no-such-host.invalid:6379"))


def test_ray_s_token_notice_is_left_out(capsys):
    """Ray 2.59+ logs "Token authentication is enabled for this Ray cluster" from every new local cluster
    (``authentication_token_setup._warn_token_auth_enabled``); connect filters exactly that record."""
    import ray
    from ray._private.authentication import authentication_token_setup as setup

    assert setup.logger.name == connect._AUTH_LOGGER
    if not hasattr(setup, "_warn_token_auth_enabled"):  # Ray 2.52-2.58 (MindSpeed-RL's 2.54): no such notice
        pytest.skip(f"Ray {ray.__version__} never turns token authentication on by itself")
    assert connect._TOKEN_NOTICE in inspect.getsource(setup._warn_token_auth_enabled)
    connect._quiet_token_notice()
    records: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: records.append(record.getMessage())  # type: ignore[method-assign]
    setup.logger.addHandler(handler)
    propagate, setup.logger.propagate = setup.logger.propagate, False  # keep the test's output clean
    try:
        setup._warn_token_auth_enabled()
        setup._warn_token_auth_disabled()  # other warnings still pass
    finally:
        setup.logger.removeHandler(handler)
        setup.logger.propagate = propagate
    assert len(records) == 1 and records[0].startswith("Token authentication is disabled")


def test_a_ray_client_failure_is_one_line_and_retried_once(monkeypatch):
    """Seen on a token cluster: the first ``ray.init("ray://...")`` raised ConnectionAbortedError with the
    client server's traceback (its per-client server failed to start), the second connected."""
    import ray

    failure = ConnectionAbortedError(
        "Initialization failure from server:\nTraceback (most recent call last):\n  File \"proxier.py\", line 772,"
        " in Datapath\n    raise RuntimeError(\nRuntimeError: Starting Ray client server failed. See "
        "ray_client_server_23000.err for detailed logs.\n"
    )
    calls: list[str] = []

    def init(address: str, **_: object) -> None:
        calls.append(address)
        if len(calls) <= failures:
            raise failure

    monkeypatch.setattr(ray, "init", init)
    monkeypatch.setattr(ray, "shutdown", lambda: None)
    target = parse("ray://head:10001")
    failures = 1
    connect._init_remote(target, {}, "--address")
    assert calls == ["ray://head:10001"] * 2
    calls.clear()
    failures = 2
    with pytest.raises(UserError) as err:
        connect._init_remote(target, {}, "--address")
    assert str(err.value) == (
        "--address ray://head:10001: Ray could not connect: ConnectionAbortedError: Initialization failure from "
        "server: RuntimeError: Starting Ray client server failed. See ray_client_server_23000.err for detailed logs."
    )


# -- a two-node cluster with token authentication ---------------------------------------------------------


class _Cluster:
    def __init__(self) -> None:
        self.base = Path(tempfile.mkdtemp(prefix="gsc", dir="/tmp"))  # short: Ray's socket paths have a limit
        self.home = self.base / "home"
        self.home.mkdir()
        self.token = secrets.token_hex(32)
        self.gcs_port, self.client_port = _free_port(), _free_port()
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
        # The recipe of docs/sweep_spec.md: the same token and RAY_AUTH_MODE=token on every node.
        self.env.update(HOME=str(self.home), RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=self.token)
        self.procs: list[subprocess.Popen] = []
        self.address = ""

    def start(self, args: list[str], name: str) -> None:
        log = open(self.base / f"{name}.log", "w")
        self.procs.append(subprocess.Popen(
            [RAY, "start", "--block", "--disable-usage-stats", "--temp-dir", str(self.base / name), *args],
            cwd=self.base, env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        ))

    def wait_for(self, predicate, what: str, timeout: float = 90) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if any(p.poll() is not None for p in self.procs):
                logs = "\n".join(f.read_text()[-2000:] for f in self.base.glob("*.log"))
                raise AssertionError(f"a `ray start` exited while waiting for {what}:\n{logs}")
            if predicate():
                return
            time.sleep(0.3)
        raise AssertionError(f"timed out waiting for {what}")

    def alive_nodes(self) -> int:
        """Alive nodes, asked of the GCS with the token (plain gRPC: no Ray state in the test process)."""
        import grpc
        from ray.core.generated import gcs_pb2, gcs_service_pb2, gcs_service_pb2_grpc

        with grpc.insecure_channel(self.address) as channel:
            try:
                reply = gcs_service_pb2_grpc.NodeInfoGcsServiceStub(channel).GetAllNodeInfo(
                    gcs_service_pb2.GetAllNodeInfoRequest(), timeout=5,
                    metadata=[("authorization", f"Bearer {self.token}")],
                )
            except grpc.RpcError:
                return 0
        return sum(1 for node in reply.node_info_list if node.state == gcs_pb2.GcsNodeInfo.ALIVE)

    def stop(self) -> None:
        for proc in reversed(self.procs):  # `ray start --block` stops its own processes on SIGTERM
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                pass
        time.sleep(1)
        for proc in self.procs:  # what is left of each group (workers, agents): by its own group id
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            proc.wait(timeout=10)
        shutil.rmtree(self.base, ignore_errors=True)


@pytest.fixture(scope="module")
def token_cluster():
    """Head (no CPUs: trials must run on the other node) and one worker node with 2 CPUs, token auth on."""
    cluster = _Cluster()
    try:
        cluster.start(["--head", f"--port={cluster.gcs_port}", f"--ray-client-server-port={cluster.client_port}",
                       "--num-cpus=0", "--include-dashboard=false", f"--dashboard-port={_free_port()}",
                       *_node_ports()], "head")
        current = cluster.base / "head" / "ray_current_cluster"  # what `ray start --head` printed
        cluster.wait_for(current.is_file, "the head")
        cluster.address = current.read_text().strip()
        assert cluster.address.endswith(f":{cluster.gcs_port}")
        cluster.start([f"--address={cluster.address}", "--num-cpus=2", '--resources={"side": 1}', *_node_ports()],
                      "node")
        cluster.wait_for(lambda: cluster.alive_nodes() == 2, "the second node")
        yield cluster
    finally:
        cluster.stop()


def _driver_env(cluster: _Cluster, **extra: str) -> dict:
    """A driver on this machine given only the cluster's token (no RAY_AUTH_MODE: connect sets it)."""
    env = {k: v for k, v in cli_env().items() if not k.startswith("RAY_")}
    env.update(HOME=str(cluster.home), RAY_AUTH_TOKEN=cluster.token, **extra)
    return env


def test_a_sweep_joins_a_token_cluster_by_host_port(token_cluster, tmp_path):
    spec = write_spec(tmp_path, trials=2, concurrency=2)
    done = subprocess.run(
        [sys.executable, "-m", "grpo.cli", "run", str(spec), "--address", token_cluster.address, "--quiet",
         "--no-report"],
        cwd=tmp_path, env=_driver_env(token_cluster), capture_output=True, text=True, timeout=120,
    )
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    joined = [line for line in out.splitlines() if line.startswith("ray: ")]
    assert joined == [f"ray: joined {token_cluster.address}: 2 nodes, 2 CPU, 1 side, " + joined[0].split(", ")[-1]]
    assert joined[0].endswith("GiB memory; token authentication")
    assert "Token authentication is enabled" not in out and "Traceback" not in out
    assert states(load(tmp_path)) == {"COMPLETE": 2}  # ran on the second node: the head has no CPU


def test_auto_and_ray_client_join_and_say_which(token_cluster, tmp_path):
    script = textwrap.dedent(f"""
        import ray
        from grpo.sweep.execution.connect import connect, disconnect
        for address in ["auto", "ray://127.0.0.1:{token_cluster.client_port}"]:
            assert connect(address)
            print("task", ray.get(ray.remote(lambda: 6 * 7).remote()), flush=True)
            disconnect()
    """)
    done = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=120,
                          env=_driver_env(token_cluster, RAY_ADDRESS=token_cluster.address))
    out = done.stdout
    assert done.returncode == 0, out
    lines = [line for line in out.splitlines() if line.startswith(("ray: ", "task"))]
    tail = "2 nodes, 2 CPU, 1 side, "
    assert lines[0].startswith(f"ray: joined auto ({token_cluster.address}, from RAY_ADDRESS): {tail}"), lines
    assert lines[2].startswith(f"ray: joined ray://127.0.0.1:{token_cluster.client_port}: {tail}"), lines
    assert lines[1] == lines[3] == "task 42"
    assert all(line.endswith("token authentication") for line in lines[::2])


def test_token_and_port_mistakes_are_one_line(token_cluster, monkeypatch):
    """Probe only (no ray.init): the errors come before anything is written, in milliseconds."""
    monkeypatch.setenv("HOME", str(token_cluster.home))
    for key in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH", "RAY_ADDRESS"):
        monkeypatch.delenv(key, raising=False)
    target = connect.resolve(token_cluster.address)
    at = f"cluster.address {token_cluster.address}: "
    with pytest.raises(UserError, match="requires Ray's token authentication and this machine has no token"):
        connect.settle_auth(target)
    monkeypatch.setenv("RAY_AUTH_TOKEN", "not-the-token")
    with pytest.raises(UserError) as err:
        connect.settle_auth(target)
    assert str(err.value).startswith(at + "the cluster rejected the Ray token from RAY_AUTH_TOKEN")
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    with pytest.raises(UserError, match="but RAY_AUTH_MODE=disabled here: set RAY_AUTH_MODE=token"):
        connect.settle_auth(target)
    monkeypatch.delenv("RAY_AUTH_MODE")
    client_as_gcs = connect.resolve(f"127.0.0.1:{token_cluster.client_port}")  # the client port without ray://
    with pytest.raises(UserError, match="but not a Ray cluster's GCS: give the address `ray start --head` prints"):
        connect.settle_auth(client_as_gcs)
    gcs_as_client = connect.resolve(f"ray://{token_cluster.address}")
    with pytest.raises(UserError, match="but not a Ray client server"):
        connect.settle_auth(gcs_as_client)
    assert "RAY_AUTH_MODE" not in os.environ  # a failed check changes nothing in this process


def test_a_host_port_driver_must_run_on_a_node(token_cluster, monkeypatch):
    """Ray attaches a host:port driver to a raylet of the cluster on its own machine (found by
    ``services.find_node_ids``, a process scan); from a machine without one it waits 60 s and fails."""
    from ray._private import services

    monkeypatch.setenv("RAY_AUTH_TOKEN", token_cluster.token)
    target = connect.resolve(token_cluster.address)
    connect.check_node_here(target, "token")  # this machine runs both nodes
    monkeypatch.setattr(services, "find_node_ids", lambda: [])  # as seen from another machine
    with pytest.raises(UserError) as err:
        connect.check_node_here(target, "token")
    assert str(err.value) == (
        f"cluster.address {token_cluster.address}: this machine is not a node of that cluster (no Ray node of it "
        f"runs here): run `ray start --address={token_cluster.address}` here first, or use the Ray client, "
        "ray://<head>:10001"
    )
