"""Pub/Sub commands: (P|S)SUBSCRIBE, (P|S)UNSUBSCRIBE, PUBLISH, SPUBLISH, PUBSUB.

The registry and delivery live in :mod:`streamworker.engine.pubsub`. A (un)subscribe command
answers one frame per channel (a :class:`~streamworker.engine.replies.Frames` of
:class:`~streamworker.engine.replies.Push`): arrays in RESP2, ``>`` pushes in RESP3. With
no argument, an unsubscribe covers every subscription of its kind, and a client subscribed
to none still gets one frame with a null channel.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from streamworker.engine import msgs
from streamworker.engine.commands import command
from streamworker.engine.errors import CommandError
from streamworker.engine.pubsub import stringmatch
from streamworker.engine.replies import NULL_BULK, Frames, Push, Status

if TYPE_CHECKING:
    from collections.abc import Callable

    from streamworker.engine.context import ClientState, Ctx
    from streamworker.engine.replies import Reply

_FLAGS = ("pubsub", "noscript", "loading", "stale")
_SHARD_KEYS = {"first_key": 1, "last_key": -1, "step": 1}

# Refused where nobody could read the messages (an in-process client without push support).
_NO_PUSH = "ERR this connection cannot receive Pub/Sub messages (no push support)"


def _count(client: ClientState) -> int:
    # The count in (p)(un)subscribe frames: channels and patterns together (not shard).
    return len(client.sub_channels) + len(client.sub_patterns)


def _update_flag(client: ClientState) -> None:
    # CLIENT_PUBSUB goes once no subscription of any kind is left.
    if not (client.sub_channels or client.sub_patterns or client.sub_shard):
        client.pubsub = False


def _require_push(ctx: Ctx) -> None:
    if ctx.client.push_out is None:
        raise CommandError(_NO_PUSH)


@command("subscribe", arity=-2, flags=_FLAGS)
def subscribe(ctx: Ctx, args: list[bytes]) -> Reply:
    """SUBSCRIBE channel [channel ...] -> one ``subscribe`` frame per channel."""
    _require_push(ctx)
    client = ctx.client
    ps = ctx.engine.pubsub
    frames: list[Reply] = []
    for channel in args:
        ps.subscribe(client, channel)
        frames.append(Push([b"subscribe", channel, _count(client)]))
    client.pubsub = True
    return Frames(frames)


@command("psubscribe", arity=-2, flags=_FLAGS)
def psubscribe(ctx: Ctx, args: list[bytes]) -> Reply:
    """PSUBSCRIBE pattern [pattern ...] -> one ``psubscribe`` frame per pattern."""
    _require_push(ctx)
    client = ctx.client
    ps = ctx.engine.pubsub
    frames: list[Reply] = []
    for pattern in args:
        ps.psubscribe(client, pattern)
        frames.append(Push([b"psubscribe", pattern, _count(client)]))
    client.pubsub = True
    return Frames(frames)


@command("ssubscribe", arity=-2, flags=_FLAGS, **_SHARD_KEYS)
def ssubscribe(ctx: Ctx, args: list[bytes]) -> Reply:
    """SSUBSCRIBE shardchannel [shardchannel ...] -> one ``ssubscribe`` frame per channel.

    Refused inside EXEC, as Redis 7.0 refuses it for a client that must not block."""
    if ctx.in_multi:
        raise CommandError(msgs.deny_blocking_subscribe("SSUBSCRIBE"))
    _require_push(ctx)
    client = ctx.client
    ps = ctx.engine.pubsub
    frames: list[Reply] = []
    for channel in args:
        ps.subscribe(client, channel, shard=True)
        frames.append(Push([b"ssubscribe", channel, len(client.sub_shard)]))
    client.pubsub = True
    return Frames(frames)


def _unsubscribe_frames(
    ctx: Ctx,
    kind: bytes,
    names: list[bytes],
    held: dict[bytes, None],
    drop: Callable[[bytes], object],
    count: Callable[[], int],
) -> Reply:
    """The (P|S)UNSUBSCRIBE reply: ``drop`` each of ``names`` (every name in ``held``, the
    client's subscriptions of this kind, when none is given), one ``kind`` frame each with
    ``count()`` after it; one frame with a null name when there was nothing to drop."""
    client = ctx.client
    frames: list[Reply] = []
    for name in names if names else list(held):
        drop(name)
        frames.append(Push([kind, name, count()]))
    if not frames:
        frames.append(Push([kind, NULL_BULK, count()]))
    _update_flag(client)
    return Frames(frames)


@command("unsubscribe", arity=-1, flags=_FLAGS)
def unsubscribe(ctx: Ctx, args: list[bytes]) -> Reply:
    """UNSUBSCRIBE [channel ...] -> one ``unsubscribe`` frame per channel (all if none)."""
    client = ctx.client
    ps = ctx.engine.pubsub
    return _unsubscribe_frames(
        ctx,
        b"unsubscribe",
        args,
        client.sub_channels,
        lambda channel: ps.unsubscribe(client, channel),
        lambda: _count(client),
    )


@command("punsubscribe", arity=-1, flags=_FLAGS)
def punsubscribe(ctx: Ctx, args: list[bytes]) -> Reply:
    """PUNSUBSCRIBE [pattern ...] -> one ``punsubscribe`` frame per pattern (all if none)."""
    client = ctx.client
    ps = ctx.engine.pubsub
    return _unsubscribe_frames(
        ctx,
        b"punsubscribe",
        args,
        client.sub_patterns,
        lambda pattern: ps.punsubscribe(client, pattern),
        lambda: _count(client),
    )


@command("sunsubscribe", arity=-1, flags=_FLAGS, **_SHARD_KEYS)
def sunsubscribe(ctx: Ctx, args: list[bytes]) -> Reply:
    """SUNSUBSCRIBE [shardchannel ...] -> one ``sunsubscribe`` frame per channel (all if
    none); its count is of shard channels only."""
    client = ctx.client
    ps = ctx.engine.pubsub
    return _unsubscribe_frames(
        ctx,
        b"sunsubscribe",
        args,
        client.sub_shard,
        lambda channel: ps.unsubscribe(client, channel, shard=True),
        lambda: len(client.sub_shard),
    )


@command("publish", arity=3, flags=("pubsub", "loading", "stale", "fast"))
def publish(ctx: Ctx, args: list[bytes]) -> Reply:
    """PUBLISH channel message -> the number of deliveries (channel and pattern ones). The
    replicas get the PUBLISH (they deliver it to their own subscribers), the file does not."""
    ctx.propagate_to_replicas(ctx.argv)
    return ctx.engine.pubsub.publish(args[0], args[1])


@command("spublish", arity=3, flags=("pubsub", "loading", "stale", "fast"), first_key=1, last_key=1)
def spublish(ctx: Ctx, args: list[bytes]) -> Reply:
    """SPUBLISH shardchannel message -> the number of shard subscribers reached (streamed to
    the replicas as PUBLISH is)."""
    ctx.propagate_to_replicas(ctx.argv)
    return ctx.engine.pubsub.spublish(args[0], args[1])


def _channel_list(
    ctx: Ctx, table: dict[bytes, dict[ClientState, None]], args: list[bytes]
) -> Reply:
    if len(args) > 1:
        # Redis's subcommand arity is -2; it checks for at most one pattern itself, and
        # echoes the words as the client typed them.
        raise CommandError(
            msgs.unknown_subcommand_or_arity(
                ctx.argv[1].decode("utf-8", "surrogateescape"),
                ctx.argv[0].decode("utf-8", "surrogateescape").upper(),
            )
        )
    if not args:
        return list(table)
    pattern = args[0]
    return [channel for channel in table if stringmatch(pattern, channel)]


@command("pubsub|channels", arity=-2, flags=("pubsub", "loading", "stale"))
def pubsub_channels(ctx: Ctx, args: list[bytes]) -> Reply:
    """PUBSUB CHANNELS [pattern] -> the channels with at least one subscriber."""
    return _channel_list(ctx, ctx.engine.pubsub.channels, args)


@command("pubsub|shardchannels", arity=-2, flags=("pubsub", "loading", "stale"))
def pubsub_shardchannels(ctx: Ctx, args: list[bytes]) -> Reply:
    """PUBSUB SHARDCHANNELS [pattern] -> the shard channels with a subscriber."""
    return _channel_list(ctx, ctx.engine.pubsub.shard, args)


def _numsub(table: dict[bytes, dict[ClientState, None]], args: list[bytes]) -> Reply:
    out: list[Reply] = []
    for channel in args:
        subs = table.get(channel)
        out.append(channel)
        out.append(len(subs) if subs else 0)
    return out


@command("pubsub|numsub", arity=-2, flags=("pubsub", "loading", "stale"))
def pubsub_numsub(ctx: Ctx, args: list[bytes]) -> Reply:
    """PUBSUB NUMSUB [channel ...] -> channel, count, ... (pattern subscribers not counted)."""
    return _numsub(ctx.engine.pubsub.channels, args)


@command("pubsub|shardnumsub", arity=-2, flags=("pubsub", "loading", "stale"))
def pubsub_shardnumsub(ctx: Ctx, args: list[bytes]) -> Reply:
    """PUBSUB SHARDNUMSUB [shardchannel ...] -> shard channel, count, ..."""
    return _numsub(ctx.engine.pubsub.shard, args)


@command("pubsub|numpat", arity=2, flags=("pubsub", "loading", "stale"))
def pubsub_numpat(ctx: Ctx, args: list[bytes]) -> Reply:
    """PUBSUB NUMPAT -> the number of distinct patterns subscribed to."""
    return len(ctx.engine.pubsub.patterns)


_HELP = [
    "PUBSUB <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "CHANNELS [<pattern>]",
    "    Return the currently active channels matching a <pattern> (default: '*').",
    "NUMPAT",
    "    Return number of subscriptions to patterns.",
    "NUMSUB [<channel> ...]",
    "    Return the number of subscribers for the specified channels, excluding",
    "    pattern subscriptions(default: no channels).",
    "SHARDCHANNELS [<pattern>]",
    "    Return the currently active shard level channels matching a <pattern> (default: '*').",
    "SHARDNUMSUB [<shardchannel> ...]",
    "    Return the number of subscribers for the specified shard level channel(s)",
    "HELP",
    "    Prints this help.",
]


@command("pubsub|help", arity=2, flags=("loading", "stale"))
def pubsub_help(ctx: Ctx, args: list[bytes]) -> Reply:
    """PUBSUB HELP -> help lines."""
    return [Status(line) for line in _HELP]
