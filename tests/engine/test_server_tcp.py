"""The engine's RESP server over TCP: redis-cli and redis-py (sync and asyncio) unchanged,
pipelining, blocking, connection commands, AUTH, limits and hostile input, protected mode,
shutdown."""

from __future__ import annotations

import asyncio
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
import redis.asyncio

from streamworker.engine.server import ProtectedModeError, check_protected_mode
from tests.engine.conftest import pack, read_raw_reply
from tests.support.engine_server import EngineServerProcess, ThreadedServer
from tests.support.proc import run_cli
from tests.support.waiting import eventually


@pytest.fixture
def server() -> Iterator[ThreadedServer]:
    srv = ThreadedServer()
    yield srv
    srv.close()


class Raw:
    """A raw socket to the server: send bytes, read whole replies."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.buf = bytearray()

    def call(self, *args: bytes | str | int) -> bytes:
        self.sock.sendall(pack(args))
        return read_raw_reply(self.sock, self.buf)

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def reply(self) -> bytes:
        return read_raw_reply(self.sock, self.buf)

    def closed_by_server(self, timeout_s: float = 5) -> bool:
        self.sock.settimeout(timeout_s)
        try:
            while True:
                chunk = self.sock.recv(65536)
                if not chunk:
                    return True
                self.buf += chunk
        except (ConnectionResetError, BrokenPipeError):
            return True
        except TimeoutError:
            return False

    def close(self) -> None:
        self.sock.close()


def wait_blocked(server: ThreadedServer, n: int) -> None:
    """Wait until the server has ``n`` blocked clients."""
    admin = server.client()
    deadline = time.monotonic() + 10
    while int(admin.info("clients")["blocked_clients"]) != n:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    admin.close()


def redis_cli(port: int, *args: str, stdin: str | None = None) -> str:
    binary = shutil.which("redis-cli")
    if binary is None:
        pytest.skip("redis-cli is not installed")
    proc = subprocess.run(
        [binary, "-p", str(port), *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


# --- redis-cli -----------------------------------------------------------------------------------


def test_redis_cli_runs_commands_against_the_server(server: ThreadedServer) -> None:
    assert redis_cli(server.port, "PING") == "PONG\n"
    sid = redis_cli(server.port, "XADD", "s", "*", "f", "v").strip()
    assert redis_cli(server.port, "XRANGE", "s", "-", "+") == f"{sid}\nf\nv\n"
    assert redis_cli(server.port, "XINFO", "STREAM", "s").startswith("length\n1\n")


def test_redis_cli_speaks_resp3_after_hello_3(server: ThreadedServer) -> None:
    redis_cli(server.port, "HSET", "h", "a", "1")
    out = redis_cli(server.port, "-3", "--no-raw", "HGETALL", "h")
    assert out == '1# "a" => "1"\n'


def test_redis_cli_pipe_mode_mass_inserts(server: ThreadedServer) -> None:
    commands = "".join(f"SET key:{i} {i}\r\n" for i in range(2000))
    out = redis_cli(server.port, "--pipe", stdin=commands)
    assert "errors: 0, replies: 2000" in out
    assert redis_cli(server.port, "DBSIZE") == "2000\n"


def test_redis_cli_reports_errors_with_their_redis_text(server: ThreadedServer) -> None:
    out = redis_cli(server.port, "XREADGROUP", "GROUP", "g", "c", "STREAMS", "nope", ">")
    assert out.strip() == (
        "NOGROUP No such key 'nope' or consumer group 'g' in XREADGROUP with GROUP option"
    )


# --- redis-py --------------------------------------------------------------------------------------


@pytest.mark.parametrize("protocol", [2, 3])
def test_redis_py_sync_client_works_unchanged(server: ThreadedServer, protocol: int) -> None:
    r = server.client(protocol=protocol, decode_responses=True, client_name="sync-test")
    assert r.ping()
    r.xgroup_create("s", "g", "$", mkstream=True)
    ids = [r.xadd("s", {"n": i}) for i in range(3)]
    got = r.xreadgroup("g", "c", {"s": ">"}, count=10)
    entries = got["s"][0] if protocol == 3 else got[0][1]
    assert [e[0] for e in entries] == ids
    assert r.xack("s", "g", *ids) == 3
    assert r.xinfo_groups("s")[0]["pending"] == 0
    with r.pipeline() as pipe:
        pipe.set("a", "1").incr("a").get("a")
        assert pipe.execute() == [True, 2, "2"]
    assert r.client_getname() == "sync-test"
    r.close()


async def test_redis_py_asyncio_client_works_unchanged(server: ThreadedServer) -> None:
    r = redis.asyncio.Redis(host="127.0.0.1", port=server.port, decode_responses=True)
    try:
        await r.xgroup_create("s", "g", "$", mkstream=True)
        reader = asyncio.ensure_future(r.xreadgroup("g", "c", {"s": ">"}, block=5000))
        async with redis.asyncio.Redis(host="127.0.0.1", port=server.port) as writer:

            async def reader_blocked() -> bool:
                return int((await writer.info("clients"))["blocked_clients"]) == 1

            await eventually(reader_blocked, what="the XREADGROUP to block")
            sid = await writer.xadd("s", {"k": "v"})
        got = await asyncio.wait_for(reader, 5)
        entries = got["s"][0] if isinstance(got, dict) else got[0][1]
        assert entries[0][0] == sid.decode()
        async with r.pipeline(transaction=True) as pipe:
            pipe.incr("n").incr("n")
            assert await pipe.execute() == [1, 2]
    finally:
        await r.aclose()


def test_a_pipeline_of_many_commands_is_answered_in_order(server: ThreadedServer) -> None:
    r = server.client()
    with r.pipeline(transaction=False) as pipe:
        for i in range(5000):
            pipe.xadd("s", {"i": i}, id=f"{i + 1}-0")
            pipe.xlen("s")
        results = pipe.execute()
    assert results[0::2] == [f"{i + 1}-0".encode() for i in range(5000)]
    assert results[1::2] == list(range(1, 5001))
    r.close()


# --- blocking ------------------------------------------------------------------------------------


def test_blocked_readers_are_served_in_fifo_order(server: ThreadedServer) -> None:
    admin = server.client()
    admin.xgroup_create("s", "g", "$", mkstream=True)
    order: list[str] = []
    threads = []
    for name in ("first", "second", "third"):
        r = server.client(decode_responses=True)

        def read(r: redis.Redis = r, name: str = name) -> None:
            got = r.xreadgroup("g", name, {"s": ">"}, count=1, block=10_000)
            order.append(f"{name}:{got[0][1][0][1]['n']}")

        t = threading.Thread(target=read)
        t.start()
        threads.append(t)
        deadline = time.monotonic() + 5
        while int(admin.info("clients")["blocked_clients"]) < len(threads):
            assert time.monotonic() < deadline
            time.sleep(0.01)
    for i in range(3):
        admin.xadd("s", {"n": i})
    for t in threads:
        t.join(10)
    # Each reader got the entry of its place in the queue (they may return in any order).
    assert sorted(order) == ["first:0", "second:1", "third:2"]
    admin.close()


def test_a_blocking_read_times_out_with_a_null_reply(server: ThreadedServer) -> None:
    raw = Raw(server.port)
    raw.call("XGROUP", "CREATE", "s", "g", "$", "MKSTREAM")
    started = time.monotonic()
    assert raw.call("XREADGROUP", "GROUP", "g", "c", "BLOCK", "200", "STREAMS", "s", ">") == (
        b"*-1\r\n"
    )
    assert 0.15 < time.monotonic() - started < 3
    raw.close()


def test_commands_pipelined_behind_a_blocked_one_wait_for_it(server: ThreadedServer) -> None:
    raw = Raw(server.port)
    raw.send(pack(("XREAD", "BLOCK", "5000", "STREAMS", "s", "$")) + pack(("ECHO", "after")))
    wait_blocked(server, 1)
    other = Raw(server.port)
    sid = other.call("XADD", "s", "*", "f", "v")
    reply = raw.reply()
    assert sid[5:-2] in reply
    assert raw.reply() == b"$5\r\nafter\r\n"
    raw.close()
    other.close()


def test_a_disconnected_blocked_client_is_forgotten(server: ThreadedServer) -> None:
    raw = Raw(server.port)
    raw.call("XGROUP", "CREATE", "s", "g", "$", "MKSTREAM")
    raw.send(pack(("XREADGROUP", "GROUP", "g", "gone", "BLOCK", "0", "STREAMS", "s", ">")))
    wait_blocked(server, 1)
    raw.close()
    admin = server.client()
    deadline = time.monotonic() + 5
    while int(admin.info("clients")["blocked_clients"]):
        assert time.monotonic() < deadline
        time.sleep(0.01)
    admin.xadd("s", {"f": "v"})
    assert admin.xpending("s", "g")["pending"] == 0
    admin.close()


# --- connection commands ---------------------------------------------------------------------


def test_client_list_shows_real_per_connection_data(server: ThreadedServer) -> None:
    r = server.client(decode_responses=True, single_connection_client=True)
    r.client_setname("lister")
    r.select(3)
    r.ping()
    me = next(c for c in r.client_list() if c["name"] == "lister")
    local = r.connection._sock.getsockname()  # type: ignore[union-attr]
    assert me["addr"] == f"127.0.0.1:{local[1]}"
    assert me["laddr"] == f"127.0.0.1:{server.port}"
    assert int(me["fd"]) > 2
    assert me["db"] == "3"
    assert me["cmd"] == "client|list"
    assert int(me["id"]) == r.client_id()
    assert int(me["age"]) >= 0
    assert int(me["idle"]) >= 0
    r.close()


def test_client_setinfo_is_refused_as_7_0_15_refuses_it(server: ThreadedServer) -> None:
    raw = Raw(server.port)
    assert raw.call("CLIENT", "SETINFO", "LIB-NAME", "x") == (
        b"-ERR unknown subcommand 'SETINFO'. Try CLIENT HELP.\r\n"
    )
    raw.close()


def test_quit_answers_ok_then_closes(server: ThreadedServer) -> None:
    raw = Raw(server.port)
    raw.send(pack(("QUIT",)) + pack(("SET", "after-quit", "1")))
    assert raw.reply() == b"+OK\r\n"
    assert raw.closed_by_server()
    assert server.client().exists("after-quit") == 0


def test_select_switches_between_16_databases(server: ThreadedServer) -> None:
    raw = Raw(server.port)
    raw.call("SET", "k", "zero")
    assert raw.call("SELECT", "15") == b"+OK\r\n"
    assert raw.call("GET", "k") == b"$-1\r\n"
    assert raw.call("SELECT", "16") == b"-ERR DB index is out of range\r\n"
    assert raw.call("RESET") == b"+RESET\r\n"
    assert raw.call("GET", "k") == b"$4\r\nzero\r\n"
    raw.close()


def test_info_reports_the_fields_tools_poll(server: ThreadedServer) -> None:
    r = server.client()
    r.set("a", "1")
    info = r.info("all")
    for field in (
        "connected_clients",
        "blocked_clients",
        "used_memory",
        "aof_enabled",
        "aof_rewrite_in_progress",
        "aof_last_write_status",
        "loading",
    ):
        assert field in info, field
    assert info["db0"]["keys"] == 1
    assert info["connected_clients"] >= 1
    r.close()


def test_debug_log_and_function_flush_are_accepted(server: ThreadedServer) -> None:
    raw = Raw(server.port)
    assert raw.call("DEBUG", "LOG", "hello") == b"+OK\r\n"
    assert raw.call("FUNCTION", "FLUSH") == b"+OK\r\n"
    raw.close()


def test_config_set_changes_the_servers_limits(server: ThreadedServer) -> None:
    r = server.client(decode_responses=True)
    assert r.config_set("maxclients", 50)
    assert r.config_get("maxclients") == {"maxclients": "50"}
    r.config_set("client-output-buffer-limit", "normal 1mb 512kb 10")
    assert r.config_get("client-output-buffer-limit")["client-output-buffer-limit"].startswith(
        "normal 1048576 524288 10 "
    )
    r.close()


# --- AUTH ------------------------------------------------------------------------------------------


@pytest.fixture
def secured() -> Iterator[ThreadedServer]:
    srv = ThreadedServer(requirepass="s3cret")
    yield srv
    srv.close()


def test_commands_need_auth_when_a_password_is_set(secured: ThreadedServer) -> None:
    raw = Raw(secured.port)
    assert raw.call("GET", "k") == b"-NOAUTH Authentication required.\r\n"
    assert raw.call("AUTH", "wrong") == (
        b"-WRONGPASS invalid username-password pair or user is disabled.\r\n"
    )
    assert raw.call("HELLO", "3") == (
        b"-NOAUTH HELLO must be called with the client already authenticated, otherwise the "
        b"HELLO AUTH <user> <pass> option can be used to authenticate the client and select "
        b"the RESP protocol version at the same time\r\n"
    )
    assert raw.call("AUTH", "s3cret") == b"+OK\r\n"
    assert raw.call("GET", "k") == b"$-1\r\n"
    raw.close()


def test_hello_auth_authenticates_and_switches_protocol(secured: ThreadedServer) -> None:
    raw = Raw(secured.port)
    reply = raw.call("HELLO", "3", "AUTH", "default", "s3cret")
    assert reply.startswith(b"%7\r\n")
    assert raw.call("PING") == b"+PONG\r\n"
    raw.close()


def test_redis_py_authenticates_with_a_password(secured: ThreadedServer) -> None:
    r = secured.client(password="s3cret")
    assert r.set("a", "1")
    r.close()
    with pytest.raises(redis.AuthenticationError):
        secured.client(password="nope").ping()


def test_unauthenticated_clients_may_only_send_small_requests(secured: ThreadedServer) -> None:
    raw = Raw(secured.port)
    raw.send(b"*11\r\n")
    assert raw.reply() == b"-ERR Protocol error: unauthenticated multibulk length\r\n"
    assert raw.closed_by_server()
    raw = Raw(secured.port)
    raw.send(b"*2\r\n$16385\r\n")
    assert raw.reply() == b"-ERR Protocol error: unauthenticated bulk length\r\n"
    assert raw.closed_by_server()


# --- hostile input and limits ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "error"),
    [
        (b"*abc\r\n", b"-ERR Protocol error: invalid multibulk length\r\n"),
        (b"*1\r\nx\r\n", b"-ERR Protocol error: expected '$', got 'x'\r\n"),
        (b"*1\r\n$-5\r\n", b"-ERR Protocol error: invalid bulk length\r\n"),
        (b'"unbalanced\r\n', b"-ERR Protocol error: unbalanced quotes in request\r\n"),
        (b"*1\r\n$" + b"9" * 70000, b"-ERR Protocol error: too big bulk count string\r\n"),
        (b"x" * 70000, b"-ERR Protocol error: too big inline request\r\n"),
    ],
)
def test_malformed_input_gets_the_protocol_error_and_is_disconnected(
    server: ThreadedServer, data: bytes, error: bytes
) -> None:
    bystander = Raw(server.port)
    raw = Raw(server.port)
    raw.send(b"PING\r\n" + data)
    assert raw.reply() == b"+PONG\r\n"  # what came before the bad bytes is still served
    assert raw.reply() == error
    assert raw.closed_by_server()
    assert bystander.call("PING") == b"+PONG\r\n"
    bystander.close()


def test_bulk_lengths_are_bounded_by_proto_max_bulk_len(server: ThreadedServer) -> None:
    raw = Raw(server.port)
    assert raw.call("CONFIG", "SET", "proto-max-bulk-len", "1mb") == b"+OK\r\n"
    raw.send(b"*2\r\n$4\r\nECHO\r\n$1048577\r\n")
    assert raw.reply() == b"-ERR Protocol error: invalid bulk length\r\n"
    assert raw.closed_by_server()


def test_a_client_over_the_query_buffer_limit_is_disconnected(server: ThreadedServer) -> None:
    admin = Raw(server.port)
    admin.call("CONFIG", "SET", "client-query-buffer-limit", "1mb")
    raw = Raw(server.port)
    raw.send(b"*2\r\n$4\r\nECHO\r\n$3000000\r\n")
    try:
        for _ in range(40):
            raw.send(b"x" * 65536)
    except (BrokenPipeError, ConnectionResetError):
        pass
    assert raw.closed_by_server()
    assert admin.call("PING") == b"+PONG\r\n"


def test_a_client_that_never_reads_is_disconnected_past_the_output_limit(
    server: ThreadedServer,
) -> None:
    admin = server.client()
    admin.config_set("client-output-buffer-limit", "normal 2mb 0 0")
    admin.set("big", "x" * 100_000)
    sock = socket.create_connection(("127.0.0.1", server.port))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    request = pack(("GET", "big")) * 50
    closed = False
    try:
        for _ in range(200):  # 1 GB of replies if it were all buffered
            sock.sendall(request)
    except (BrokenPipeError, ConnectionResetError):
        closed = True
    if not closed:
        sock.settimeout(5)
        try:
            while sock.recv(1 << 20):
                pass
            closed = True
        except (ConnectionResetError, TimeoutError):
            closed = True
    assert closed
    assert admin.ping()
    clients = admin.client_list()
    assert all(int(c["omem"]) < 4 * 1024 * 1024 for c in clients)
    sock.close()
    admin.close()


def test_maxclients_refuses_extra_connections(server: ThreadedServer) -> None:
    admin = Raw(server.port)
    admin.call("CONFIG", "SET", "maxclients", "2")
    second = Raw(server.port)
    assert second.call("PING") == b"+PONG\r\n"
    third = Raw(server.port)
    assert third.reply() == b"-ERR max number of clients reached\r\n"
    assert third.closed_by_server()
    second.close()
    deadline = time.monotonic() + 10
    while b"connected_clients:1\r\n" not in admin.call("INFO", "clients"):
        assert time.monotonic() < deadline
        time.sleep(0.01)
    fourth = Raw(server.port)
    assert fourth.call("PING") == b"+PONG\r\n"


# --- protected mode, the command, shutdown ----------------------------------------------------


def test_protected_mode_refuses_a_public_address_without_a_password() -> None:
    with pytest.raises(ProtectedModeError, match="protected mode"):
        check_protected_mode("0.0.0.0", None)
    with pytest.raises(ProtectedModeError):
        check_protected_mode("127.0.0.1 192.168.1.10", None)
    check_protected_mode("0.0.0.0", "pass")
    check_protected_mode("127.0.0.1 ::1 localhost", None)


def test_engine_serve_exits_2_with_one_line_when_protected_mode_refuses() -> None:
    proc = run_cli("engine", "serve", "--bind", "0.0.0.0", "--port", "0")
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("streamworker: error: refusing to listen on 0.0.0.0")


def test_engine_serve_refuses_a_directory_in_use(tmp_path: Path) -> None:
    first = EngineServerProcess(tmp_path / "data").start()
    try:
        proc = run_cli("engine", "serve", "--port", "0", "--dir", str(tmp_path / "data"))
        assert proc.returncode == 1
        assert "is in use by another engine" in proc.stderr
    finally:
        first.stop()


def test_sigterm_flushes_and_exits_0(tmp_path: Path) -> None:
    srv = EngineServerProcess(tmp_path / "data", appendfsync="no").start()
    with srv.client() as r:
        r.xadd("s", {"f": "v"})
    assert srv.stop(signal.SIGTERM) == 0
    srv.start()
    try:
        with srv.client() as r:
            assert r.xlen("s") == 1
    finally:
        assert srv.stop(signal.SIGINT) == 0
