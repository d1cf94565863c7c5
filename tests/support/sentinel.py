"""A Sentinel-managed Redis for tests: a redis-server 7.0 primary, one replica and three Sentinels
(``redis-server sentinel.conf --sentinel``, the same binary), on free loopback ports in a temp dir.

Quorum 2, ``down-after-milliseconds`` 1500 and a short ``failover-timeout``: a SIGKILLed primary is
replaced within a few seconds. Helpers lag the replica (SIGSTOP/SIGCONT), kill the primary, wait
for the Sentinels to name a new one, and bring the old primary back (it rejoins as a replica).
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import time
from pathlib import Path

import redis

from tests.support.servers import RedisServer, free_port, missing_service

SERVICE = "mymaster"
DOWN_AFTER_MS = 1500
# Above the Sentinels' 1 s PING period. At 1000 a Sentinel could mark the primary it had just
# promoted down about 1 s after the switch, before its first PING there was answered; the other
# Sentinels' "down" flags left from the failover made that an instant quorum, and a second
# failover promoted the restarted, empty old primary (1 run in about 7 of the chaos test
# test_failover_waiting; the Sentinels' logs show +sdown, +odown and +try-failover on the new
# primary 1.02 s after +switch-master).
FAILOVER_TIMEOUT_MS = 3000


class Sentinel:
    """One Sentinel process (``redis-server sentinel.conf --sentinel``)."""

    def __init__(self, workdir: Path, primary_port: int, *, password: str | None = None) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            missing_service("redis-server")
        self.binary = str(binary)
        self.dir = workdir
        self.dir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.password = password
        self.conf = self.dir / "sentinel.conf"
        lines = [
            f"port {self.port}",
            "bind 127.0.0.1",
            f"dir {self.dir}",
            f"logfile {self.dir / 'sentinel.log'}",
            "daemonize no",
            f"sentinel monitor {SERVICE} 127.0.0.1 {primary_port} 2",
            f"sentinel down-after-milliseconds {SERVICE} {DOWN_AFTER_MS}",
            f"sentinel failover-timeout {SERVICE} {FAILOVER_TIMEOUT_MS}",
            f"sentinel parallel-syncs {SERVICE} 1",
        ]
        if password:
            lines.append(f"requirepass {password}")
        # Sentinel rewrites its config file (the discovered replicas and peers): each its own.
        self.conf.write_text("\n".join(lines) + "\n")
        self.proc: subprocess.Popen[bytes] | None = None

    def client(self) -> redis.Redis:
        return redis.Redis(
            host="127.0.0.1", port=self.port, password=self.password, socket_timeout=5
        )

    def start(self) -> Sentinel:
        self.proc = subprocess.Popen(
            [self.binary, str(self.conf), "--sentinel"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                log = (self.dir / "sentinel.log").read_text(errors="replace")[-2000:]
                raise RuntimeError(f"redis-sentinel exited at start: {log}")
            try:
                if self.client().ping():
                    return self
            except redis.ConnectionError:
                time.sleep(0.02)
        raise RuntimeError("redis-sentinel did not answer within 10 s")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self.proc = None

    def primary(self) -> tuple[str, int] | None:
        """The primary this Sentinel names now (SENTINEL GET-MASTER-ADDR-BY-NAME)."""
        try:
            reply = self.client().sentinel_get_master_addr_by_name(SERVICE)
        except redis.RedisError:
            return None
        if not reply:
            return None
        host = reply[0].decode() if isinstance(reply[0], bytes) else str(reply[0])
        return host, int(reply[1])


class SentinelSetup:
    """Primary + replica + three Sentinels. :attr:`primary` and :attr:`replica` follow failovers
    (after :meth:`wait_for_failover`)."""

    def __init__(self, workdir: Path, *, sentinel_password: str | None = None) -> None:
        self.dir = workdir
        self.sentinel_password = sentinel_password
        self.servers = [
            RedisServer(workdir / "node-a", start_timeout_s=20),
            RedisServer(workdir / "node-b", start_timeout_s=20),
        ]
        self.primary = self.servers[0]
        self.replica = self.servers[1]
        self.sentinels: list[Sentinel] = []

    @property
    def url(self) -> str:
        """``redis+sentinel://127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3/mymaster/0``."""
        hosts = ",".join(f"127.0.0.1:{s.port}" for s in self.sentinels)
        return f"redis+sentinel://{hosts}/{SERVICE}/0"

    def start(self) -> SentinelSetup:
        self.primary.start()
        self.replica.extra_args = ["--replicaof", "127.0.0.1", str(self.primary.port)]
        self.replica.start()
        self.wait_in_sync()
        self.sentinels = [
            Sentinel(self.dir / f"sentinel-{i}", self.primary.port, password=self.sentinel_password)
            for i in range(3)
        ]
        for s in self.sentinels:
            s.start()
        # Failover needs the Sentinels to know each other and the replica (found through the
        # primary's INFO and the hello channel, within a few seconds).
        self._wait(self._sentinels_ready, 30, "the Sentinels to find the replica and each other")
        return self

    def stop(self) -> None:
        for s in self.sentinels:
            s.stop()
        for server in self.servers:
            if server.proc is not None:
                with_cont(server)
            server.stop(signal.SIGKILL)

    # -- state

    def _sentinels_ready(self) -> bool:
        for s in self.sentinels:
            try:
                state = s.client().sentinel_master(SERVICE)
                replicas = s.client().sentinel_slaves(SERVICE)
            except redis.RedisError:
                return False
            if int(state.get("num-other-sentinels", 0)) < 2:
                return False
            if not [
                r for r in replicas if not r["is_sdown"] and int(r["port"]) == self.replica.port
            ]:
                return False
        return True

    def named_primary(self) -> tuple[str, int] | None:
        """The primary a majority of the Sentinels names now, or None."""
        answers = [s.primary() for s in self.sentinels]
        for a in answers:
            if a is not None and answers.count(a) >= 2:
                return a
        return None

    def wait_in_sync(self, timeout_s: float = 20) -> None:
        """Until the replica's link is up and its offset equals the primary's."""

        def synced() -> bool:
            try:
                rep = self.replica.client().info("replication")
                pri = self.primary.client().info("replication")
            except redis.RedisError:
                return False
            return rep.get("master_link_status") == "up" and rep.get(
                "slave_repl_offset"
            ) == pri.get("master_repl_offset")

        self._wait(synced, timeout_s, "the replica to catch up")

    # -- faults

    def lag_replica(self) -> None:
        """SIGSTOP the replica: it takes nothing more until :meth:`resume_replica`."""
        assert self.replica.proc is not None
        self.replica.proc.send_signal(signal.SIGSTOP)

    def clog_replication(self, megabytes: int = 32) -> None:
        """With the replica stopped: write ``megabytes`` of filler to the primary, more than the
        loopback socket buffers between them hold. Writes after this wait in the primary's
        replica output buffer and die with the primary; without it, a stopped replica still
        finds the latest writes in its socket buffer when it resumes."""
        client = self.primary.client()
        chunk = b"f" * (8 * 1024 * 1024)
        for i in range(max(1, megabytes // 8)):
            client.set(f"sentinel-test:filler:{i}", chunk)

    def resume_replica(self) -> None:
        with_cont(self.replica)

    def kill_primary(self) -> RedisServer:
        """SIGKILL the primary (no persistence: its unreplicated writes die with it)."""
        old = self.primary
        assert old.proc is not None
        old.proc.kill()
        old.proc.wait(10)
        old.proc = None
        return old

    def wait_for_failover(self, timeout_s: float = 30) -> RedisServer:
        """Until a majority of the Sentinels names the replica as primary and it accepts writes;
        then :attr:`primary` and :attr:`replica` are swapped. Returns the new primary."""
        promoted = self.replica

        def named() -> bool:
            if self.named_primary() != ("127.0.0.1", promoted.port):
                return False
            try:
                return promoted.client().info("replication").get("role") == "master"
            except redis.RedisError:
                return False

        self._wait(named, timeout_s, "the Sentinels to promote the replica")
        self.primary, self.replica = promoted, self.primary
        return promoted

    def bring_back_old_primary(self, timeout_s: float = 30) -> None:
        """Restart the killed node (the current :attr:`replica` slot); the Sentinels turn it
        into a replica of the new primary. Waits until it is in sync."""
        node = self.replica
        node.extra_args = []
        node.start()
        self._wait(
            lambda: node.client().info("replication").get("role") == "slave",
            timeout_s,
            "the old primary to rejoin as a replica",
        )
        self.wait_in_sync(timeout_s)

    @staticmethod
    def _wait(check, timeout_s: float, what: str) -> None:  # type: ignore[no-untyped-def]
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                if check():
                    return
            except redis.RedisError:
                pass
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout_s:g} s waiting for {what}")
            time.sleep(0.05)


def with_cont(server: RedisServer) -> None:
    """SIGCONT ``server`` (harmless when it is not stopped)."""
    if server.proc is not None and server.proc.poll() is None:
        server.proc.send_signal(signal.SIGCONT)
