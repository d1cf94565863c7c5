"""Dead letters behind ``streamworker dlq`` and the dashboard: list, show, replay, purge.

All functions take a sync redis-py client (bytes replies) and do no printing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import redis

from streamworker.errors import StreamworkerError
from streamworker.io.luasource import lua_source
from streamworker.io.redisio import as_text
from streamworker.io.replicawait import (
    DEFAULT_WAIT_TIMEOUT_MS,
    ReplicaWait,
    Stopwatch,
    WaitObserver,
)

PROVENANCE_FIELDS = (
    "dlq_stream",
    "dlq_id",
    "dlq_group",
    "dlq_consumer",
    "dlq_deliveries",
    "dlq_error",
    "dlq_handler",
    "dlq_at_ms",
    "dlq_traceback",
    "dlq_body_missing",
)


@dataclass(frozen=True, slots=True)
class DeadLetterEntry:
    """A dead-letter entry split into the original fields and streamworker's provenance."""

    id: str
    fields: dict[str, str]
    provenance: dict[str, str] = field(default_factory=dict)

    @property
    def original_stream(self) -> str | None:
        return self.provenance.get("dlq_stream")

    @property
    def original_id(self) -> str | None:
        return self.provenance.get("dlq_id")

    @property
    def error(self) -> str:
        return self.provenance.get("dlq_error", "")


def split_dead_letter(entry_id: Any, raw: Any) -> DeadLetterEntry:
    """Split a raw entry (a field dict or a flat list): everything from the last ``dlq_stream``
    field on is provenance."""
    if raw is None:
        raw = {}
    pairs = (
        list(raw.items()) if isinstance(raw, dict) else list(zip(raw[::2], raw[1::2], strict=True))
    )
    names = [as_text(k, errors="replace") for k, _ in pairs]
    cut = max((i for i, n in enumerate(names) if n == "dlq_stream"), default=len(names))
    fields = {names[i]: as_text(pairs[i][1], errors="replace") for i in range(cut)}
    provenance = {names[i]: as_text(pairs[i][1], errors="replace") for i in range(cut, len(names))}
    return DeadLetterEntry(
        id=as_text(entry_id, errors="replace"), fields=fields, provenance=provenance
    )


def iter_dead_letters(
    client: redis.Redis, dlq: str, *, start: str = "-", count: int | None = None, page: int = 500
) -> Iterator[DeadLetterEntry]:
    """Dead letters of ``dlq`` from ``start`` on, oldest first (at most ``count``)."""
    left = count
    cursor = start
    while left is None or left > 0:
        size = page if left is None else min(page, left)
        rows = client.xrange(dlq, min=cursor, max="+", count=size)
        if not rows:
            return
        for entry_id, raw in rows:
            yield split_dead_letter(entry_id, raw)
        if left is not None:
            left -= len(rows)
        cursor = "(" + as_text(rows[-1][0], errors="replace")
        if len(rows) < size:
            return


def get_dead_letter(client: redis.Redis, dlq: str, entry_id: str) -> DeadLetterEntry | None:
    """One dead letter by id, or None."""
    rows = client.xrange(dlq, min=entry_id, max=entry_id)
    return split_dead_letter(rows[0][0], rows[0][1]) if rows else None


@dataclass
class ReplayResult:
    """What a replay did (or, with ``dry_run``, would do)."""

    replayed: list[tuple[str, str, str]] = field(default_factory=list)  # (dlq id, stream, new id)
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (dlq id, reason)


def _replay_script(client: redis.Redis) -> Any:
    return client.register_script(lua_source("replay_dead_letter"))


def load_dead_letters(
    client: redis.Redis, dlq: str, ids: list[str] | None = None
) -> list[DeadLetterEntry]:
    """The given dead letters of ``dlq`` (StreamworkerError for an id that is not there), or
    all of them, oldest first."""
    if ids is None:
        return list(iter_dead_letters(client, dlq))
    entries = []
    for entry_id in ids:
        found = get_dead_letter(client, dlq, entry_id)
        if found is None:
            raise StreamworkerError(f"no dead letter {entry_id} in {dlq!r}")
        entries.append(found)
    return entries


def replay_dead_letters(
    client: redis.Redis,
    dlq: str,
    ids: list[str] | list[DeadLetterEntry] | None = None,
    *,
    dry_run: bool = False,
    progress: Callable[[int, int], None] | None = None,
    wait_replicas: int = 0,
    wait_timeout_ms: int = DEFAULT_WAIT_TIMEOUT_MS,
    wait_observer: WaitObserver | None = None,
) -> ReplayResult:
    """Move dead letters back to their original streams with fresh ids: the given ``ids`` (or
    entries already loaded with :func:`load_dead_letters`), or all.

    Each entry moves atomically (one script: XADD to the original stream without the provenance
    fields, XDEL from ``dlq``), so a replay interrupted at any point loses and duplicates nothing;
    running it again continues where it stopped. ``progress(done, total)`` is called as it goes.

    ``wait_replicas``: each move is followed by a WAIT on its connection and counts as done only
    once that many replicas have it (a failover cannot then take a replay back after its
    message was processed, and a second replay add it again); ReplicaWaitTimeout after
    ``wait_timeout_ms`` (the move stands on the primary; the entries before it are replayed).
    """
    wait = ReplicaWait(wait_replicas, wait_timeout_ms)
    if ids is None or all(isinstance(i, str) for i in ids):
        entries = load_dead_letters(client, dlq, None if ids is None else [str(i) for i in ids])
    else:
        entries = [e for e in ids if isinstance(e, DeadLetterEntry)]
    script = None if dry_run else _replay_script(client)
    result = ReplayResult()
    if progress is not None:
        progress(0, len(entries))
    for done, entry in enumerate(entries, start=1):
        target = entry.original_stream
        if target is None:
            result.skipped.append((entry.id, "not a streamworker dead letter"))
        elif not entry.fields:
            result.skipped.append((entry.id, "kept no original fields"))
        elif dry_run:
            result.replayed.append((entry.id, target, ""))
        else:
            assert script is not None
            if wait.active:
                new_id = _replay_waiting(client, script, dlq, target, entry.id, wait, wait_observer)
            else:
                new_id = script(keys=[dlq, target], args=[entry.id])
            if new_id == 0:
                result.skipped.append((entry.id, "already gone"))
            else:
                result.replayed.append((entry.id, target, as_text(new_id, errors="replace")))
        if progress is not None:
            progress(done, len(entries))
    return result


def _replay_waiting(
    client: redis.Redis,
    script: Any,
    dlq: str,
    target: str,
    entry_id: str,
    wait: ReplicaWait,
    observer: WaitObserver | None,
) -> Any:
    """One move and its WAIT in one pipeline (the WAIT must follow the write on its connection)."""
    stopwatch = Stopwatch(observer, "dlq_replay")
    pipe = client.pipeline(transaction=False)
    script(keys=[dlq, target], args=[entry_id], client=pipe)
    pipe.execute_command(*wait.command())  # type: ignore[no-untyped-call]
    new_id, waited = pipe.execute()
    if new_id == 0:
        return new_id  # already gone: nothing written now, nothing to wait for
    wait.check(
        waited,
        f"replay of dead letter {entry_id} to {target!r}",
        retry_safe=True,
        retry="replaying again skips it (moved already); check a replica before relying on it",
        stopwatch=stopwatch,
    )
    return new_id


_PURGE_CHUNK = 500


def _is_dead_letter_stream(client: redis.Redis, dlq: str) -> bool:
    """False when ``dlq`` holds entries and none of its newest ten is a dead letter (carries
    ``dlq_stream``): a live stream named by mistake. An empty or missing key is True."""
    rows = client.xrevrange(dlq, count=10)
    return not rows or any(split_dead_letter(i, raw).original_stream for i, raw in rows)


def purge_dead_letters(
    client: redis.Redis,
    dlq: str,
    ids: list[str] | None = None,
    *,
    progress: Callable[[int, int], None] | None = None,
) -> int:
    """Delete the given dead letters (in chunks, by ``purge_dead_letters.lua``, which deletes
    only entries that carry the dead-letter provenance), or all of them (UNLINK of the stream
    key: freed in the background, not blocking Redis); returns how many. StreamworkerError,
    with nothing deleted, when ``dlq`` is not a dead-letter stream; with the others deleted,
    when some of ``ids`` are not dead letters. ``progress(done, total)`` is called as it goes."""
    if not _is_dead_letter_stream(client, dlq):
        raise StreamworkerError(
            f"{dlq!r} is not a dead-letter stream (its entries carry no dlq_stream field): "
            "refusing to purge it"
        )
    if ids is None:
        n = int(client.xlen(dlq))
        client.unlink(dlq)
        if progress is not None:
            progress(n, n)
        return n
    script = client.register_script(lua_source("purge_dead_letters"))
    removed = refused = 0
    for start in range(0, len(ids), _PURGE_CHUNK):
        chunk = ids[start : start + _PURGE_CHUNK]
        deleted, not_dead, _ = script(keys=[dlq], args=chunk)
        removed += int(deleted)
        refused += int(not_dead)
        if progress is not None:
            progress(start + len(chunk), len(ids))
    if refused:
        raise StreamworkerError(
            f"left {refused} entries of {dlq!r} alone: not streamworker dead letters "
            f"(deleted {removed} dead letters)"
        )
    return removed
