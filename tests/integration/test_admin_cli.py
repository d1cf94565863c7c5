"""``streamworker pending`` and ``streamworker dlq`` as an operator runs them, on a real Redis."""

from __future__ import annotations

import json

import redis

from streamworker import App, Message
from streamworker.io.luasource import lua_source
from tests.support.proc import run_cli
from tests.support.worker import eventually, running_worker

DEAD_LETTER = lua_source("dead_letter")


def _dead_letter(client: redis.Redis, n: int) -> list[bytes]:
    """Put ``n`` orders through the real dead-letter script, as the worker does."""
    client.xgroup_create("orders", "billing", id="$", mkstream=True)
    ids = [client.xadd("orders", {"order_id": str(i), "note": "x y"}) for i in range(n)]
    client.xreadgroup("billing", "pod-0", {"orders": ">"}, count=n)
    for i, mid in enumerate(ids):
        client.eval(
            DEAD_LETTER,
            2,
            "orders",
            "{orders}:dlq",
            "billing",
            mid,
            "pod-0",
            3,
            f"ValueError: bad order {i}",
            "billing.on_order",
            1700000000000,
        )
    return ids


def test_pending_shows_each_consumer_with_its_oldest_entry(
    redis_url: str, redis_client: redis.Redis
) -> None:
    redis_client.xgroup_create("orders", "billing", id="$", mkstream=True)
    for i in range(5):
        redis_client.xadd("orders", {"n": str(i)})
    redis_client.xreadgroup("billing", "pod-a", {"orders": ">"}, count=3)
    redis_client.xreadgroup("billing", "pod-b", {"orders": ">"}, count=2)
    result = run_cli("pending", "orders", "billing", "--redis-url", redis_url)
    assert result.returncode == 0, result.stderr
    assert "pending 5" in result.stdout
    assert "pod-a" in result.stdout
    assert "pod-b" in result.stdout

    result = run_cli("pending", "orders", "billing", "--redis-url", redis_url, "--json")
    data = json.loads(result.stdout)
    assert data["pending"] == 5
    assert {c["name"]: c["pending"] for c in data["consumers"]} == {"pod-a": 3, "pod-b": 2}
    assert all(c["oldest_id"] for c in data["consumers"])


def test_pending_on_a_missing_group_is_one_clear_line(redis_url: str) -> None:
    result = run_cli("pending", "nostream", "nogroup", "--redis-url", redis_url)
    assert result.returncode == 2  # a name to fix, as for every command (test_cli_errors.py)
    assert result.stderr.strip() == "streamworker: error: stream 'nostream' does not exist"
    assert len(result.stderr.strip().splitlines()) == 1


def test_dlq_list_and_show(redis_url: str, redis_client: redis.Redis) -> None:
    ids = _dead_letter(redis_client, 2)
    result = run_cli("dlq", "list", "orders", "--redis-url", redis_url)
    assert result.returncode == 0, result.stderr
    assert ids[0].decode() in result.stdout
    assert "ValueError: bad order 1" in result.stdout

    dlq_id = redis_client.xrange("{orders}:dlq")[0][0].decode()
    shown = json.loads(run_cli("dlq", "show", "orders", dlq_id, "--redis-url", redis_url).stdout)
    assert shown["fields"] == {"order_id": "0", "note": "x y"}
    assert shown["provenance"]["dlq_id"] == ids[0].decode()
    assert shown["provenance"]["dlq_consumer"] == "pod-0"


async def test_dlq_replay_round_trip(redis_url: str, redis_client: redis.Redis) -> None:
    _dead_letter(redis_client, 3)
    dry = run_cli("dlq", "replay", "orders", "--all", "--dry-run", "--redis-url", redis_url)
    assert dry.returncode == 0, dry.stderr
    assert "would replay 3, skipped 0" in dry.stdout
    assert redis_client.xlen("{orders}:dlq") == 3

    result = run_cli("dlq", "replay", "orders", "--all", "--redis-url", redis_url)
    assert result.returncode == 0, result.stderr
    assert "replayed 3, skipped 0" in result.stdout
    assert redis_client.xlen("{orders}:dlq") == 0
    replayed = redis_client.xrange("orders")[-3:]
    assert [f for _, f in replayed] == [
        {b"order_id": str(i).encode(), b"note": b"x y"} for i in range(3)
    ]

    # The group delivers the replayed entries as new ones: a fixed handler now processes them.
    seen: list[str] = []
    app = App("t")

    @app.handler("orders", group="billing", block_ms=100)
    async def fixed(msg: Message) -> None:
        seen.append(msg.fields["order_id"])

    async with running_worker(app, redis_url, consumer="pod-1"):
        await eventually(lambda: seen == ["0", "1", "2"])

    again = run_cli("dlq", "replay", "orders", "--all", "--redis-url", redis_url)
    assert "replayed 0, skipped 0" in again.stdout


def test_dlq_replay_of_one_id(redis_url: str, redis_client: redis.Redis) -> None:
    _dead_letter(redis_client, 2)
    first = redis_client.xrange("{orders}:dlq")[0][0].decode()
    result = run_cli("dlq", "replay", "orders", "--id", first, "--redis-url", redis_url)
    assert result.returncode == 0, result.stderr
    assert redis_client.xlen("{orders}:dlq") == 1


def test_large_replay_reports_progress(redis_url: str, redis_client: redis.Redis) -> None:
    _dead_letter(redis_client, 300)
    result = run_cli("dlq", "replay", "orders", "--all", "--redis-url", redis_url)
    assert result.returncode == 0, result.stderr
    assert "replay {orders}:dlq: 300/300 entries (100%" in result.stderr
    assert redis_client.xlen("{orders}:dlq") == 0


def test_dlq_purge_needs_confirmation_for_all(redis_url: str, redis_client: redis.Redis) -> None:
    _dead_letter(redis_client, 2)
    refused = run_cli("dlq", "purge", "orders", "--all", "--redis-url", redis_url)
    assert refused.returncode == 2
    assert "without --yes" in refused.stderr
    assert redis_client.xlen("{orders}:dlq") == 2
    done = run_cli("dlq", "purge", "orders", "--all", "--yes", "--redis-url", redis_url)
    assert done.returncode == 0
    assert "deleted 2 dead letters" in done.stdout
    assert redis_client.xlen("{orders}:dlq") == 0


def test_dlq_commands_need_a_reachable_redis() -> None:
    from tests.support.servers import free_port

    result = run_cli("dlq", "list", "orders", "--redis-url", f"redis://127.0.0.1:{free_port()}/0")
    assert result.returncode == 1
    assert "cannot reach Redis" in result.stderr


def test_an_unreachable_redis_is_named_without_its_password() -> None:
    from tests.support.servers import free_port

    url = f"redis://ops:s3cr@t@127.0.0.1:{free_port()}/0"
    result = run_cli("dlq", "list", "orders", "--redis-url", url)
    assert result.returncode == 1
    assert "cannot reach Redis at redis://ops:***@127.0.0.1:" in result.stderr
    assert "s3cr" not in result.stderr + result.stdout


def test_dlq_list_on_a_stream_that_does_not_exist_says_so(redis_url: str) -> None:
    result = run_cli("dlq", "list", "ordrs", "--redis-url", redis_url)
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "streamworker: error: stream 'ordrs' does not exist (nor its dead-letter stream "
        "'{ordrs}:dlq')"
    )


def test_dlq_list_on_a_stream_without_dead_letters_says_there_are_none(
    redis_url: str, redis_client: redis.Redis
) -> None:
    redis_client.xadd("orders", {"order_id": "1"})
    result = run_cli("dlq", "list", "orders", "--redis-url", redis_url)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "{orders}:dlq: no dead letters"


def test_dlq_list_of_a_named_dead_letter_stream_that_does_not_exist_says_so(
    redis_url: str, redis_client: redis.Redis
) -> None:
    redis_client.xadd("orders", {"order_id": "1"})
    result = run_cli("dlq", "list", "orders", "--dlq", "orders-dead", "--redis-url", redis_url)
    assert result.returncode == 2
    assert "dead-letter stream 'orders-dead' does not exist" in result.stderr


def test_dlq_purge_refuses_a_live_stream(redis_url: str, redis_client: redis.Redis) -> None:
    live = [redis_client.xadd("orders", {"n": str(i)}) for i in range(3)]
    everything = run_cli(
        "dlq", "purge", "orders", "--dlq", "orders", "--all", "--yes", "--redis-url", redis_url
    )
    assert everything.returncode != 0
    assert "not a dead-letter stream" in everything.stderr
    assert len(everything.stderr.strip().splitlines()) == 1  # one line, no traceback
    one = run_cli(
        "dlq",
        "purge",
        "orders",
        "--dlq",
        "orders",
        "--id",
        live[0].decode(),
        "--redis-url",
        redis_url,
    )
    assert one.returncode != 0
    assert redis_client.xlen("orders") == 3


def test_dlq_purge_of_ids_leaves_an_entry_that_is_not_a_dead_letter(
    redis_url: str, redis_client: redis.Redis
) -> None:
    _dead_letter(redis_client, 2)
    stray = redis_client.xadd("{orders}:dlq", {"n": "added by hand"})
    dead = [i.decode() for i, _ in redis_client.xrange("{orders}:dlq")][:2]
    result = run_cli(
        "dlq", "purge", "orders", "--id", dead[0], "--id", stray.decode(), "--redis-url", redis_url
    )
    assert result.returncode != 0
    assert "not streamworker dead letters" in result.stderr
    assert [i for i, _ in redis_client.xrange("{orders}:dlq")] == [dead[1].encode(), stray]
