"""A real local Redis Cluster for tests: redis-server processes on free loopback ports in a temp
dir, joined by ``redis-cli --cluster create``, ready once every node reports ``cluster_state:ok``
and agrees on the slot map."""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest
import redis
import redis.cluster

from streamworker.io.redisio import open_sync_redis
from tests.support.servers import RedisServer, free_port, missing_service

# The cluster bus listens at port + 10000, so a node's port must leave room for it.
_MAX_PORT = 55535


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def cluster_port(taken: set[int]) -> int:
    """A free loopback port whose cluster-bus port (+10000) is free too."""
    while True:
        port = free_port()
        if port <= _MAX_PORT and port not in taken and _bindable(port + 10000):
            return port


def wait_until(check, timeout_s: float, what: str, interval_s: float = 0.05) -> None:  # type: ignore[no-untyped-def]
    """Poll ``check`` until truthy; fail with ``what`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if check():
                return
        except (redis.RedisError, OSError):
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout_s}s waiting for {what}")
        time.sleep(interval_s)


class ClusterNodeProcess(RedisServer):
    """One cluster-enabled redis-server; ``kill()`` and ``start()`` keep port and directory."""

    def __init__(self, binary: str, workdir: Path, port: int, node_timeout_ms: int) -> None:
        super().__init__(
            workdir,
            port=port,
            start_timeout_s=20.0,
            extra_args=[
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                str(workdir / "nodes.conf"),
                "--cluster-node-timeout",
                str(node_timeout_ms),
                # A replica may be promoted however long it was cut off: the test kills masters.
                "--cluster-replica-validity-factor",
                "0",
            ],
        )
        self.binary = binary

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def kill(self) -> None:
        """SIGKILL: no shutdown, as a crashed machine."""
        self.stop(signal.SIGKILL)


class LocalCluster:
    """``masters`` masters with ``replicas`` replicas each, on loopback, in ``workdir``."""

    def __init__(
        self, workdir: Path, *, masters: int = 3, replicas: int = 0, node_timeout_ms: int = 5000
    ) -> None:
        binary = shutil.which("redis-server")
        cli = shutil.which("redis-cli")
        if binary is None:
            missing_service("redis-server")
        if cli is None:
            missing_service("redis-cli (Debian package redis-tools)")
        self.cli = str(cli)
        self.masters = masters
        self.replicas = replicas
        taken: set[int] = set()
        self.nodes: list[ClusterNodeProcess] = []
        for i in range(masters * (1 + replicas)):
            port = cluster_port(taken)
            taken.add(port)
            self.nodes.append(
                ClusterNodeProcess(str(binary), workdir / f"node-{i}", port, node_timeout_ms)
            )

    @property
    def url(self) -> str:
        """``redis+cluster://`` with every node as a startup node."""
        return "redis+cluster://" + ",".join(n.address for n in self.nodes)

    def client(self) -> redis.cluster.RedisCluster:
        """A sync cluster client (bytes replies)."""
        return redis.cluster.RedisCluster(
            startup_nodes=[
                redis.cluster.ClusterNode("127.0.0.1", n.port)  # type: ignore[no-untyped-call]
                for n in self.nodes
                if n.proc is not None
            ],
            socket_timeout=10,
        )

    def start(self) -> LocalCluster:
        try:
            for node in self.nodes:
                node.start()
            result = subprocess.run(
                [
                    self.cli,
                    "--cluster",
                    "create",
                    *(n.address for n in self.nodes),
                    "--cluster-replicas",
                    str(self.replicas),
                    "--cluster-yes",
                ],
                capture_output=True,
                text=True,
                timeout=120,
                check=False,
            )
            if result.returncode != 0:
                raise RuntimeError(f"redis-cli --cluster create failed: {result.stdout[-3000:]}")
            self.wait_healthy()
        except BaseException:
            self.stop()
            raise
        return self

    def live_nodes(self) -> list[ClusterNodeProcess]:
        return [n for n in self.nodes if n.proc is not None]

    def wait_healthy(self, timeout_s: float = 60.0) -> None:
        """Every live node says ``cluster_state:ok``, knows every live node as connected, sees
        ``masters`` masters holding all 16384 slots, and the live replicas are in sync."""

        def healthy() -> bool:
            live = self.live_nodes()
            for node in live:
                with node.client() as c:
                    info = c.cluster("info")
                    if info["cluster_state"] != "ok":
                        return False
                    if int(info["cluster_slots_ok"]) != 16384:
                        return False
                    nodes = c.cluster("nodes")
                    masters = [
                        a
                        for a, n in nodes.items()
                        if "master" in n["flags"] and "fail" not in n["flags"] and n["connected"]
                    ]
                    if len(masters) != self.masters:
                        return False
                    role = c.info("replication")
                    if role["role"] == "slave" and role.get("master_link_status") != "up":
                        return False
            return True

        wait_until(healthy, timeout_s, "cluster_state:ok on every node", interval_s=0.1)

    def flushall(self) -> None:
        for node in self.live_nodes():
            with node.client() as c:
                if c.info("replication")["role"] == "master":
                    c.flushall()
                    c.script_flush()

    def master_of(self, key: str) -> ClusterNodeProcess:
        """The live node serving ``key``'s slot as master."""
        slot = redis.cluster.key_slot(key.encode())
        for node in self.live_nodes():
            with node.client() as c:
                if c.info("replication")["role"] != "master":
                    continue
                for start, end, owner, *_replicas in c.cluster("slots"):
                    if start <= slot <= end:
                        port = int(owner[1])
                        return next(n for n in self.nodes if n.port == port)
        raise RuntimeError(f"no master serves the slot of {key!r}")

    def replicas_of(self, master: ClusterNodeProcess) -> list[ClusterNodeProcess]:
        with master.client() as c:
            info = c.info("replication")
        ports = {int(v["port"]) for k, v in info.items() if k.startswith("slave") and "port" in v}
        return [n for n in self.nodes if n.port in ports]

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()


def url_and_flush(request: pytest.FixtureRequest, kind: str) -> str:
    """The URL of a fresh, empty backend of ``kind``: ``"redis"`` (the session redis-server) or
    ``"cluster"`` (the session's 3-master Redis Cluster)."""
    if kind == "cluster":
        cluster: LocalCluster = request.getfixturevalue("redis_cluster")
        cluster.flushall()
        return cluster.url
    server = request.getfixturevalue("redis_server")
    server.client().flushall()
    return str(server.url)


def sync_client_for(url: str) -> redis.Redis:
    """A sync client for ``url``: redis-py's cluster client for ``redis+cluster://``."""
    if url.startswith("redis+cluster:"):
        return open_sync_redis(url)
    return redis.Redis.from_url(url)
