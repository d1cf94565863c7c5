"""``streamworker pending`` and ``streamworker dlq …``: the operator commands (argparse glue and
output; the work is in :mod:`streamworker.ops.pending` and :mod:`streamworker.ops.dead_letters`)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import redis

from streamworker.cli.common import operator_client, require_group
from streamworker.cli.parsing import runs
from streamworker.cli.produce import add_wait_flags
from streamworker.errors import ConfigError
from streamworker.io.keys import dead_letter_stream
from streamworker.ops import dead_letters, pending
from streamworker.ops.progress import Progress
from streamworker.settings import DEFAULT_REDIS_URL, load_settings


def _client(args: argparse.Namespace) -> redis.Redis:
    url = load_settings(redis_url=args.redis_url).redis_url_or(DEFAULT_REDIS_URL)
    command = args.command if args.command != "dlq" else f"dlq {args.dlq_command}"
    return operator_client(url, command)


def _dlq_key(args: argparse.Namespace) -> str:
    return str(args.dlq or dead_letter_stream(args.stream))


def _age(ms: int | None) -> str:
    if ms is None:
        return "-"
    seconds = ms / 1000
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds / size:.1f}{unit}"
    return f"{seconds:.1f}s"


def _cmd_pending(args: argparse.Namespace) -> int:
    """Summarise the pending entries (delivered, not acknowledged) of GROUP on STREAM."""
    client = _client(args)
    require_group(client, args.stream, args.group)
    report = pending.pending_report(client, args.stream, args.group)
    if args.json:
        data: dict[str, Any] = {
            "stream": report.stream,
            "group": report.group,
            "pending": report.pending,
            "min_id": report.min_id,
            "max_id": report.max_id,
            "oldest_age_ms": report.oldest_age_ms,
            "lag": report.lag,
            "last_delivered_id": report.last_delivered_id,
            "consumers": [
                c.__dict__ if hasattr(c, "__dict__") else _slots(c) for c in report.consumers
            ],
        }
        print(json.dumps(data, indent=2))
        return 0
    print(f"stream {report.stream}  group {report.group}")
    print(
        f"pending {report.pending}  lag {report.lag if report.lag is not None else 'unknown'}  "
        f"last delivered {report.last_delivered_id or '-'}"
    )
    if report.pending:
        print(f"oldest pending {report.min_id} (added {_age(report.oldest_age_ms)} ago)")
    if report.consumers:
        print()
        print(f"{'consumer':<32} {'pending':>8} {'oldest idle':>12} {'seen':>10}  oldest id")
        for c in report.consumers:
            print(
                f"{c.name:<32} {c.pending:>8} {_age(c.oldest_idle_ms):>12} "
                f"{_age(c.idle_ms):>10}  {c.oldest_id or '-'}"
            )
    return 0


def _slots(obj: Any) -> dict[str, Any]:
    return {name: getattr(obj, name) for name in obj.__slots__}


def _check_dlq_exists(client: redis.Redis, args: argparse.Namespace) -> None:
    """A dead-letter stream that does not exist is no news when its stream exists (nothing was
    dead-lettered yet); when neither exists the name is probably mistyped: say so."""
    key = _dlq_key(args)
    if client.exists(key):
        return
    if args.dlq:
        raise ConfigError(f"dead-letter stream {key!r} does not exist")
    if not client.exists(args.stream):
        raise ConfigError(
            f"stream {args.stream!r} does not exist (nor its dead-letter stream {key!r})"
        )


def _cmd_dlq_list(args: argparse.Namespace) -> int:
    client = _client(args)
    _check_dlq_exists(client, args)
    entries = list(dead_letters.iter_dead_letters(client, _dlq_key(args), count=args.count))
    if args.json:
        print(json.dumps([_slots(e) for e in entries], indent=2))
        return 0
    if not entries:
        print(f"{_dlq_key(args)}: no dead letters")
        return 0
    print(f"{'dead letter id':<22} {'original id':<22} {'tries':>5}  error")
    for e in entries:
        error = e.error if len(e.error) <= 70 else e.error[:67] + "..."
        print(
            f"{e.id:<22} {e.original_id or '-':<22} {e.provenance.get('dlq_deliveries', '-'):>5}  {error}"
        )
    return 0


def _cmd_dlq_show(args: argparse.Namespace) -> int:
    client = _client(args)
    _check_dlq_exists(client, args)
    entry = dead_letters.get_dead_letter(client, _dlq_key(args), args.id)
    if entry is None:
        raise ConfigError(f"no dead letter {args.id} in {_dlq_key(args)!r}")
    print(json.dumps(_slots(entry), indent=2))
    return 0


def _dlq_for(args: argparse.Namespace, verb: str) -> tuple[redis.Redis, str]:
    """The client and the dead-letter stream of ``dlq replay``/``dlq purge``, once the command
    says which dead letters it acts on and the stream exists."""
    if not args.all and not args.id:
        raise ConfigError(f"say which dead letters to {verb}: --id ID (repeatable) or --all")
    client = _client(args)
    _check_dlq_exists(client, args)
    return client, _dlq_key(args)


def _cmd_dlq_replay(args: argparse.Namespace) -> int:
    client, key = _dlq_for(args, "replay")
    progress = Progress(f"{'dry run of ' if args.dry_run else ''}replay {key}", sys.stderr)
    with progress.phase("reading the dead letters"):
        entries = dead_letters.load_dead_letters(client, key, None if args.all else args.id)
    settings = load_settings(
        redis_url=args.redis_url,
        wait_replicas=args.wait_replicas,
        wait_timeout_ms=args.wait_timeout_ms,
    )
    result = dead_letters.replay_dead_letters(
        client,
        key,
        entries,
        dry_run=args.dry_run,
        progress=progress.update,
        wait_replicas=settings.wait_replicas,
        wait_timeout_ms=settings.wait_timeout_ms,
    )
    progress.finish()
    verb = "would replay" if args.dry_run else "replayed"
    if args.json:
        data = {
            "dead_letter_stream": key,
            "dry_run": args.dry_run,
            "replayed": [
                {"id": dlq_id, "stream": stream, "new_id": new_id or None}
                for dlq_id, stream, new_id in result.replayed
            ],
            "skipped": [{"id": dlq_id, "reason": reason} for dlq_id, reason in result.skipped],
        }
        print(json.dumps(data, indent=2))
        return 0
    for dlq_id, stream, new_id in result.replayed:
        suffix = f" as {new_id}" if new_id else ""
        print(f"{verb} {dlq_id} -> {stream}{suffix}")
    for dlq_id, reason in result.skipped:
        print(f"skipped {dlq_id}: {reason}")
    print(f"{verb} {len(result.replayed)}, skipped {len(result.skipped)}")
    return 0


def _cmd_dlq_purge(args: argparse.Namespace) -> int:
    client, key = _dlq_for(args, "purge")
    if args.all and not args.yes:
        n = client.xlen(key)
        raise ConfigError(f"refusing to delete all {n} dead letters of {key!r} without --yes")
    progress = Progress(f"purge {key}", sys.stderr)
    removed = dead_letters.purge_dead_letters(
        client, key, None if args.all else args.id, progress=progress.update
    )
    progress.finish()
    if args.json:
        print(json.dumps({"dead_letter_stream": key, "deleted": removed}, indent=2))
        return 0
    print(f"deleted {removed} dead letters from {key}")
    return 0


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--redis-url",
        metavar="URL",
        help=f"default: $STREAMWORKER_REDIS_URL, else {DEFAULT_REDIS_URL}",
    )


def pending_arguments(pending: argparse.ArgumentParser) -> None:
    """The arguments of ``streamworker pending``."""
    runs(pending, _cmd_pending)
    pending.add_argument("stream", metavar="STREAM")
    pending.add_argument("group", metavar="GROUP")
    pending.add_argument("--json", action="store_true", help="machine-readable output")
    _common(pending)


def dlq_arguments(dlq: argparse.ArgumentParser) -> None:
    """The actions of ``streamworker dlq`` and their arguments."""
    dlq.description = (
        "Work with the dead-letter stream of STREAM ({STREAM}:dlq, or STREAM:dlq when STREAM "
        "has a hash tag; --dlq names another)."
    )
    dlq_sub = dlq.add_subparsers(dest="dlq_command", metavar="ACTION")
    dlq_sub.required = True

    def action(name: str, help_text: str) -> argparse.ArgumentParser:
        p: argparse.ArgumentParser = dlq_sub.add_parser(name, help=help_text, description=help_text)
        p.add_argument("stream", metavar="STREAM", help="the original stream")
        p.add_argument("--dlq", metavar="KEY", help="the dead-letter stream, when not the default")
        _common(p)
        return p

    p = action("list", "list dead letters, oldest first")
    p.add_argument("--count", type=int, default=100, help="at most this many (default 100)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=_cmd_dlq_list)

    p = action("show", "show one dead letter: its fields and provenance")
    p.add_argument("id", metavar="ID", help="the dead letter's id")
    p.set_defaults(func=_cmd_dlq_show)

    p = action(
        "replay", "move dead letters back to their stream with fresh ids (atomically, one by one)"
    )
    p.add_argument(
        "--id", action="append", metavar="ID", help="a dead letter to replay (repeatable)"
    )
    p.add_argument("--all", action="store_true", help="replay every dead letter")
    p.add_argument(
        "--dry-run", action="store_true", help="say what would be replayed; change nothing"
    )
    p.add_argument("--json", action="store_true", help="machine-readable result on stdout")
    add_wait_flags(p, "count a replay as done")
    p.set_defaults(func=_cmd_dlq_replay)

    p = action("purge", "delete dead letters for good")
    p.add_argument(
        "--id", action="append", metavar="ID", help="a dead letter to delete (repeatable)"
    )
    p.add_argument("--all", action="store_true", help="delete every dead letter (needs --yes)")
    p.add_argument("--yes", action="store_true", help="confirm --all")
    p.add_argument("--json", action="store_true", help="machine-readable result on stdout")
    p.set_defaults(func=_cmd_dlq_purge)
