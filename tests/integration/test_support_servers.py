"""The test servers under pytest-xdist: a port that another process took between ``free_port()``
and the bind is given up for a fresh one, and a server that answers on it is never mistaken for
the one being started (it would be used, and flushed, in its place)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.engine_server import EngineServerProcess
from tests.support.postgres import PostgresServer
from tests.support.servers import PortInUse, RedisServer


def test_a_redis_server_whose_port_was_taken_starts_on_another_and_answers_itself(
    tmp_path: Path,
) -> None:
    first = RedisServer(tmp_path / "first").start()
    second = RedisServer(tmp_path / "second")
    second.port = first.port  # as if another worker had bound it meanwhile
    try:
        second.start()
        assert second.port != first.port
        assert second.proc is not None
        assert int(second.client().info("server")["process_id"]) == second.proc.pid
        assert int(first.client().info("server")["process_id"]) != second.proc.pid
    finally:
        second.stop()
        first.stop()


def test_a_redis_server_given_a_taken_port_says_so(tmp_path: Path) -> None:
    first = RedisServer(tmp_path / "first").start()
    try:
        with pytest.raises(PortInUse, match=f"port {first.port} is taken"):
            RedisServer(tmp_path / "second", port=first.port).start()
    finally:
        first.stop()


def test_an_engine_server_whose_port_was_taken_starts_on_another(tmp_path: Path) -> None:
    first = EngineServerProcess(tmp_path / "first").start()
    second = EngineServerProcess(tmp_path / "second")
    second.port = first.port
    try:
        second.start()
        assert second.port != first.port
        assert second.proc is not None
        with second.client() as c:
            assert int(c.info("server")["process_id"]) == second.proc.pid
    finally:
        second.stop()
        first.stop()


def test_a_postgres_whose_port_was_taken_starts_on_another_with_its_own_data() -> None:
    first = PostgresServer().start()
    second = PostgresServer()
    second.port = first.port
    try:
        second.start()
        assert second.port != first.port
        with second.connect() as conn:
            row = conn.execute("SHOW data_directory").fetchone()
        assert row is not None
        assert Path(row[0]).resolve() == second.data.resolve()
    finally:
        second.destroy()
        first.destroy()
