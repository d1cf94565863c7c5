"""``streamworker publish`` and ``streamworker relay``: producing from the command line (argparse
glue; the work is in :mod:`streamworker.producing.producer` and :mod:`streamworker.idempotency.sql.outbox`)."""

from __future__ import annotations

import argparse
import datetime
import json
import re
import signal
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

import redis

from streamworker.cli.common import operator_client
from streamworker.cli.parsing import db_url_flag, redis_url_flag, runs
from streamworker.errors import ConfigError
from streamworker.extras import require_extra
from streamworker.observability.logging import configure_logging
from streamworker.producing.producer import StreamOptions, SyncProducer
from streamworker.settings import DEFAULT_REDIS_URL, Settings, load_settings


def _client(settings: Settings, command: str) -> redis.Redis:
    return operator_client(settings.redis_url_or(DEFAULT_REDIS_URL), command)


def parse_assignments(items: list[str]) -> dict[str, str]:
    """``["a=1", "b=x=y"]`` -> ``{"a": "1", "b": "x=y"}``; ConfigError for an item without ``=``
    or with an empty name, or a name given twice."""
    fields: dict[str, str] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise ConfigError(f"expected FIELD=VALUE, got {item!r}")
        if name in fields:
            raise ConfigError(f"field {name!r} given twice")
        fields[name] = value
    return fields


_DURATION = re.compile(r"^(\d+(?:\.\d+)?)(ms|s|m|h)$")
_UNIT_MS = {"ms": 1, "s": 1_000, "m": 60_000, "h": 3_600_000}


def parse_duration_ms(text: str) -> int:
    """``"2s"`` -> 2000: a number >= 0 with a unit ``ms``, ``s``, ``m`` or ``h``, in whole ms;
    ConfigError otherwise (a negative delay included)."""
    match = _DURATION.match(text.strip())
    if match is None:
        raise ConfigError(
            f"--delay must be a duration >= 0 like 500ms, 2s, 1.5m or 1h, not {text!r}"
        )
    return round(float(match.group(1)) * _UNIT_MS[match.group(2)])


def _delay_ms(args: argparse.Namespace) -> int | None:
    if args.delay is not None and args.delay_ms is not None:
        raise ConfigError("give --delay or --delay-ms, not both")
    if args.delay is not None:
        return parse_duration_ms(args.delay)
    if args.delay_ms is not None:
        try:
            return int(args.delay_ms)
        except ValueError:
            raise ConfigError(
                f"--delay-ms must be an integer >= 0, not {args.delay_ms!r}"
            ) from None
    return None


def _cmd_publish(args: argparse.Namespace) -> int:
    """Add one entry with FIELD=VALUE pairs (and/or --json) to STREAM, encoded as app.publish
    encodes it. Prints the stream key and the entry id."""
    value: dict[str, Any] = parse_assignments(args.fields)
    if args.json is not None:
        try:
            doc = json.loads(args.json)
        except ValueError as exc:
            raise ConfigError(f"--json is not valid JSON: {exc}") from None
        if not isinstance(doc, dict):
            raise ConfigError("--json must be a JSON object")
        overlap = set(doc) & set(value)
        if overlap:
            raise ConfigError(f"field(s) {', '.join(sorted(overlap))} given twice")
        value.update(doc)
    if not value:
        raise ConfigError("nothing to publish: give FIELD=VALUE pairs or --json")
    delay_ms = _delay_ms(args)
    settings = load_settings(
        redis_url=args.redis_url,
        wait_replicas=args.wait_replicas,
        wait_timeout_ms=args.wait_timeout_ms,
    )
    options = StreamOptions(partitions=args.partitions, body_field=args.body_field)
    producer = SyncProducer(
        _client(settings, "publish"),
        streams={args.stream: options},
        wait_replicas=settings.wait_replicas,
        wait_timeout_ms=settings.wait_timeout_ms,
        use_idmp=args.idmp,
    )
    receipt = producer.publish(
        args.stream,
        value,
        maxlen=args.maxlen,
        minid=args.minid,
        approximate=not args.exact,
        id=args.id,
        partition_key=args.key,
        idempotency_key=args.idempotency_key,
        delay_ms=delay_ms,
    )
    suffix = " (duplicate: already published, nothing added)" if receipt.duplicate else ""
    if receipt.due_ms is not None:
        due = datetime.datetime.fromtimestamp(receipt.due_ms / 1000, datetime.UTC)
        # The entry has no id yet: the workers add it to the stream when it is due.
        print(f"{receipt.stream} delayed until {due.isoformat(timespec='milliseconds')}{suffix}")
    else:
        print(f"{receipt.stream} {receipt.id}{suffix}")
    return 0


def _cmd_relay(args: argparse.Namespace) -> int:
    """Relay the rows SQL handlers staged with streamworker.idempotency.sql.outbox.publish to
    their streams, in order, each exactly once, until SIGTERM/SIGINT (or, with --once, until
    the outbox is empty)."""
    require_extra("sql", "streamworker relay")
    from streamworker.idempotency.sql import SqlDatabase
    from streamworker.idempotency.sql.outbox import Relay, check_outbox

    settings = load_settings(
        redis_url=args.redis_url,
        db_url=args.db_url,
        wait_replicas=args.wait_replicas,
        wait_timeout_ms=args.wait_timeout_ms,
    )
    configure_logging(settings.log_format, settings.log_level)
    if not settings.db_url:
        raise ConfigError("no database URL: pass --db-url or set STREAMWORKER_DB_URL")
    # Before the database: relaying into an engine that dies with this process would delete
    # the outbox rows of entries nobody can ever read.
    client = _client(settings, "relay")
    db = SqlDatabase(settings.db_url)
    check_outbox(db)
    relay = Relay(
        db,
        client,
        batch_size=args.batch_size,
        window_ms=args.window_ms,
        wait_replicas=settings.wait_replicas,
        wait_timeout_ms=settings.wait_timeout_ms,
    )
    try:
        if args.once:
            total = 0
            while True:
                batch = relay.relay_once()
                total += batch.rows
                if batch.rows < relay.batch_size:
                    break
            print(f"relayed {total} row(s)")
            return 0
        stop = threading.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, stop_on_signal(stop))
        total = relay.run(stop, idle_ms=args.idle_ms)
        print(f"relayed {total} row(s)")
        return 0
    finally:
        db.sync_engine.dispose()


def stop_on_signal(stop: threading.Event) -> Callable[[int, FrameType | None], None]:
    """A signal handler that sets ``stop``, from a thread of its own.

    A handler runs in the main thread between two bytecodes, and there the main thread may be
    inside ``stop.wait()`` holding the event's lock, which is not reentrant: ``stop.set()``
    called by the handler itself would wait for that lock forever (the relay then ignored
    SIGTERM, now and then, until SIGKILLed). The thread waits for the lock instead."""

    def handler(signum: int, frame: FrameType | None) -> None:
        threading.Thread(target=stop.set, name="streamworker-stop", daemon=True).start()

    return handler


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, not {value}")
    return value


def _at_least_zero(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, not {value}")
    return value


def add_wait_flags(parser: argparse.ArgumentParser, what: str) -> None:
    """``--wait-replicas N`` and ``--wait-timeout-ms MS`` (default: the settings')."""
    parser.add_argument(
        "--wait-replicas",
        metavar="N",
        type=_at_least_zero,
        help=f"{what} only once N replicas acknowledged it (or STREAMWORKER_WAIT_REPLICAS; "
        "default 0)",
    )
    parser.add_argument(
        "--wait-timeout-ms",
        metavar="MS",
        type=_positive,
        help="fail (exit 1) when fewer replicas acknowledged within MS (or "
        "STREAMWORKER_WAIT_TIMEOUT_MS; default 1000)",
    )


def publish_arguments(pub: argparse.ArgumentParser) -> None:
    """The arguments of ``streamworker publish``."""
    runs(
        pub,
        _cmd_publish,
        example="streamworker publish orders order_id=7 amount_cents=150 --maxlen 100000",
    )
    pub.add_argument("stream", metavar="STREAM")
    pub.add_argument("fields", metavar="FIELD=VALUE", nargs="*")
    pub.add_argument("--json", metavar="OBJECT", help="fields as a JSON object")
    pub.add_argument("--body-field", metavar="F", help="put the whole body as JSON in field F")
    pub.add_argument("--maxlen", metavar="N", type=int, help="trim the stream to about N entries")
    pub.add_argument("--minid", metavar="ID", help="trim entries below ID")
    pub.add_argument("--exact", action="store_true", help="trim exactly (= instead of ~)")
    pub.add_argument("--id", metavar="ID", help="an explicit entry id (ms-seq)")
    pub.add_argument(
        "--delay",
        metavar="DURATION",
        help="deliver after DURATION (500ms, 2s, 1.5m, 1h): the workers of STREAM add it then",
    )
    pub.add_argument("--delay-ms", metavar="MS", help="as --delay, in milliseconds")
    pub.add_argument("--partitions", metavar="N", type=_positive, help="STREAM is partitioned")
    pub.add_argument("--key", metavar="K", help="the partition key (with --partitions)")
    pub.add_argument(
        "--idempotency-key", metavar="K", help="add nothing if K was published within 24 h"
    )
    pub.add_argument(
        "--idmp",
        action="store_true",
        help="with --idempotency-key: by XADD … IDMP where the server has it (Redis 8.6+; "
        "keeps the last 10,000 keys per stream), else the marker script",
    )
    redis_url_flag(pub)
    add_wait_flags(pub, "return")


def relay_arguments(relay: argparse.ArgumentParser) -> None:
    """The arguments of ``streamworker relay``."""
    runs(relay, _cmd_relay, example="streamworker relay --db-url postgresql://app@db/billing")
    db_url_flag(relay)
    redis_url_flag(relay)
    relay.add_argument("--batch-size", metavar="N", type=_positive, default=100)
    relay.add_argument(
        "--window-ms",
        metavar="MS",
        type=_positive,
        default=24 * 3_600_000,
        help="how long a relay that died mid-batch may stay down without duplicates (24 h)",
    )
    relay.add_argument(
        "--idle-ms", metavar="MS", type=_positive, default=200, help="poll interval when empty"
    )
    relay.add_argument(
        "--lock-timeout-ms",
        metavar="MS",
        type=_positive,
        default=10_000,
        help="PostgreSQL: give up waiting for another relay's rows after MS (retried)",
    )
    relay.add_argument(
        "--stalled-timeout-ms",
        metavar="MS",
        type=_positive,
        default=60_000,
        help="PostgreSQL: a relay idle this long inside its transaction is ended by the server",
    )
    relay.add_argument("--once", action="store_true", help="relay until empty, then exit")
    add_wait_flags(relay, "delete a relayed row")
