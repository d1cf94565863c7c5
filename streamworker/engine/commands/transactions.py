"""MULTI / EXEC / DISCARD / WATCH / UNWATCH.

Queueing happens in core (``Engine._dispatch``): while ``client.in_multi``, commands other than
EXEC/DISCARD/MULTI/WATCH/QUIT/RESET are checked (existence, arity) and queued with a +QUEUED
reply; a rejected command marks the transaction so EXEC replies EXECABORT.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from streamworker.engine import msgs
from streamworker.engine.commands import command
from streamworker.engine.errors import CommandError
from streamworker.engine.keyspace import WatchedKey, discard_transaction, unwatch_all
from streamworker.engine.replies import NULL_ARRAY, OK, Frames

if TYPE_CHECKING:
    from streamworker.engine.context import ClientState, Ctx
    from streamworker.engine.replies import Reply

_TX = ("noscript", "loading", "stale", "fast", "allow-busy")


@command("multi", arity=1, flags=_TX)
def multi(ctx: Ctx, args: list[bytes]) -> Reply:
    """MULTI -> OK; starts queueing."""
    client = ctx.client
    if client.in_multi:
        raise CommandError(msgs.MULTI_NESTED)
    client.in_multi = True
    client.multi_queue = []
    client.multi_error = False
    return OK


def _watched_key_expired(client: ClientState) -> bool:
    return any(not wk.expired and wk.db.is_expired(wk.key) for wk in client.watched)


@command("exec", arity=1, flags=("noscript", "loading", "stale", "skip-slowlog"))
def exec_(ctx: Ctx, args: list[bytes]) -> Reply:
    """EXEC -> array of the queued commands' replies; nil if a WATCHed key changed;
    EXECABORT if a command was rejected while queueing."""
    client = ctx.client
    if not client.in_multi:
        raise CommandError(msgs.EXEC_WITHOUT_MULTI)
    if _watched_key_expired(client):
        client.dirty_cas = True
    if client.multi_error:
        discard_transaction(client)
        raise CommandError(msgs.EXECABORT)
    if client.dirty_cas:
        discard_transaction(client)
        return NULL_ARRAY
    queue = client.multi_queue
    unwatch_all(client)
    client.multi_queue = []
    client.in_multi = False
    run = ctx.engine.run_queued
    ctx.in_multi = True
    # Messages a queued command sends this very client (a RESP3 subscriber publishing to
    # itself) land inside EXEC's array, just before that command's reply: Redis has written
    # the array's header before it runs the commands.
    outer = client.push_out
    pushed: list[Reply] = []
    if outer is not None:
        client.push_out = pushed.append
    replies: list[Reply] = []
    try:
        for spec, argv in queue:
            reply = run(ctx, spec, argv)
            if pushed:
                reply = Frames([*pushed, reply])
                pushed.clear()
            replies.append(reply)
    finally:
        ctx.in_multi = False
        if outer is not None:
            client.push_out = outer
    discard_transaction(client)
    return replies


@command("discard", arity=1, flags=_TX)
def discard(ctx: Ctx, args: list[bytes]) -> Reply:
    """DISCARD -> OK; drops the queued commands."""
    if not ctx.client.in_multi:
        raise CommandError(msgs.DISCARD_WITHOUT_MULTI)
    discard_transaction(ctx.client)
    return OK


@command("watch", arity=-2, flags=_TX, first_key=1, last_key=-1, step=1)
def watch(ctx: Ctx, args: list[bytes]) -> Reply:
    """WATCH key [key ...] -> OK; EXEC fails if any of them is modified first."""
    client = ctx.client
    if client.in_multi:
        raise CommandError(msgs.WATCH_IN_MULTI)
    if client.dirty_cas:
        # Already doomed: no point in watching more.
        return OK
    db = ctx.db
    for key in args:
        if any(wk.db is db and wk.key == key for wk in client.watched):
            continue
        wk = WatchedKey(client, db, key, db.is_expired(key))
        db.watchers.setdefault(key, []).append(wk)
        client.watched.append(wk)
    return OK


@command("unwatch", arity=1, flags=("noscript", "loading", "stale", "fast", "allow-busy"))
def unwatch(ctx: Ctx, args: list[bytes]) -> Reply:
    """UNWATCH -> OK."""
    unwatch_all(ctx.client)
    ctx.client.dirty_cas = False
    return OK
