"""``idempotency="lua"``: the handler returns the Redis writes it wants as
:class:`~streamworker.core.effects.Effects`; one script per batch applies each message's effects and
XACKs it, atomically, so that the effects of a message apply once.

The guarantee, precisely
------------------------

For a message M of stream S read by group G:

* **At most once per delivery cycle.** M's effects are applied only by a script run that finds M
  in G's pending entries list (PEL), owned by the calling consumer, and that same script run
  XACKs M. Redis runs a script atomically and replicates and persists its writes as one
  MULTI/EXEC, so a crash of the worker, of Redis (AOF) or a failover leaves either the effects
  *and* the ack, or neither. Once acked, M is not in the PEL, so no later run applies it again.
* **At least once.** M is acked only by that script (or by the dead-letter script, which moves it
  to the dead-letter stream with its body and reason). A crash before the script, an effect that
  cannot apply, or a lost connection leaves M pending: it is delivered again.
* **Replays.** An acked entry enters G's PEL again only by an explicit rewind of the group:
  ``XGROUP SETID`` to an id before M, deleting and re-creating the group (streamworker re-creates
  a missing group at ``start_id``), or ``XCLAIM … FORCE``. That is a deliberate replay and applies
  M's effects again, unless ``dedup_field`` recognises M within ``dedup_window_ms`` (below).
* **No partial effects.** Every effect of a message is checked before its first write: key types
  (TYPE), that the number under a key or field is one (as INCRBY/INCRBYFLOAT would parse it), and
  that the result does not overflow (integers: refused within 8192 of the 64-bit limits, where
  Redis would still take it). A message whose effects cannot apply gets an
  :class:`~streamworker.core.effects.EffectError` with the reason: nothing of it is written, it is not
  acked, and it is retried and dead-lettered like a failing handler; the rest of the batch goes on.

Bookkeeping memory: none beyond the PEL entries Redis keeps for every consumer group anyway (and
removes with the XACK). There is no set of processed ids to grow or expire.

Producer duplicates: ``dedup_field``
-----------------------------------

A producer that retries an XADD adds the same event twice under two entry ids; no id-based
record can tell. With ``dedup_field="order_id"`` the value of that field is the message's
business key: a message whose business key was *applied* less than ``dedup_window_ms`` ago is
acked without its effects (and without running its handler when the check before the handlers
already sees it). The record is one sorted set per (stream, group),
:func:`~streamworker.io.keys.dedup_record_key`, member = business key, score = when it was applied,
by the workers' clocks (keep them in sync; the window is exact up to their skew). Each batch's
script first drops members older than the window, and the set expires ``dedup_window_ms`` after
its last insert, so its size is the number of distinct business keys applied in the last
``dedup_window_ms``: about 100 bytes each plus the key's length (``MEMORY USAGE``), flat under a
steady load.

Why a sorted set: one key per business key with ``PX`` costs more (measured for a 14-character
business key: 133 bytes with its prefix, against 112 in the sorted set) and leaves reclaiming
memory to Redis's background expiry, which lags under a high expiry rate; time-bucketed hashes
are smaller per key (67 bytes) but hold up to two windows' keys and free a whole bucket at once
(one blocking DEL of millions of fields). The sorted set
is trimmed by the script itself, exactly and a little at every batch, and is one key to watch
(``ZCARD``, ``MEMORY USAGE``). A message without the field is dead-lettered before
its handler runs. Keys of messages whose effects failed are not recorded.

Choose the window above the longest time between an event and its duplicate being *processed*:
the producer's retry horizon plus the time a message can spend pending (retries up to
``max_deliveries``). A duplicate processed later than that is applied again.

Side effects outside Redis
--------------------------

Handlers may also call HTTP services, send e-mails, write elsewhere, and return ``None``. Before
the handlers of a batch run, one round trip (``check_ownership.lua``) reads which of its entries
are still pending for this consumer; entries another consumer has claimed meanwhile (or acked) are
skipped, so a claim race that happened before the batch started does not run a handler twice. A
*fresh* batch (just read with ``>``, less than half of ``claim_idle_ms`` ago) without
``dedup_field`` skips that round trip: no other consumer can have claimed its entries yet, and the
apply script checks ownership again anyway. That is all the check does. A claim that happens
*while* a handler runs, or a crash between a handler's external call and the script's XACK, runs
the handler again (here or elsewhere): external effects are at-least-once, as with any framework.
Pass an idempotency key such as ``f"{msg.stream}:{msg.group}:{msg.id}"`` (or the business key) to
the services you call.

Redis Cluster
-------------

Every key one script touches must be in one slot: the record uses the stream's hash tag
(``{S}:dedup:G``), and effect keys must carry it too (``{clicks}:views`` for stream ``clicks``).
When the server reports ``cluster_enabled:1`` (``INFO cluster``), an effect on a key of another
slot is refused with an :class:`~streamworker.core.effects.EffectError` naming both slots, before the
script is called. With a ``redis+cluster://`` URL the worker's client is redis-py's cluster
client, which sends each script to the master of the stream's slot (docs/scaling.md); a
cluster-enabled node reached with a plain ``redis://`` URL must serve that slot itself. A script's
writes replicate as one unit, so a failover keeps or loses a batch's effects together with its
XACK: never one without the other. Effects may not change the consumed stream (XADD to it is
allowed) nor the record.

Thread and task safety: one :class:`LuaStrategy` serves one subscription; ``process`` is called
by one consume loop at a time.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any, cast

import redis.asyncio as aioredis
import redis.exceptions as rex
import structlog
from redis.crc import key_slot

from streamworker.core.effects import Effect, EffectError, Effects
from streamworker.core.keyed import KeyFunc, run_keyed
from streamworker.core.message import Message
from streamworker.core.outcomes import ACKED, CLAIMED_AWAY, DUPLICATE, Action, Outcome, decide
from streamworker.errors import PermanentFailure
from streamworker.idempotency.base import (
    Batch,
    BuildContext,
    HandlerConfig,
    PlainPlugin,
    SpanPhases,
    Strategy,
    decide_failed,
)
from streamworker.io.keys import dedup_record_key, hash_tag
from streamworker.io.redisio import LuaScript, NextRead, connection_errors

_CHECK = LuaScript("check_ownership")

# What this strategy provides to handlers: nothing (one shared empty mapping, not one per call).
_NOTHING: Mapping[type, Any] = MappingProxyType({})
_APPLY = LuaScript("apply_effects")

# Statuses returned by the scripts (see their headers).
_OWNED = 0
_NOT_PENDING = 1
_CLAIMED = 2
_BUSINESS_DUPLICATE = 3
_RECORD_EXPIRED = 4

# ARGV index of the first business key / effect argument of apply_effects.lua.
_FIRST_PAYLOAD = 9

# After the shutdown deadline, the finished part of a batch is still applied, within this bound.
_APPLY_ON_CANCEL_TIMEOUT_S = 2.0

DEFAULT_DEDUP_WINDOW_MS = 600_000
"""``dedup_window_ms`` when not given: 10 minutes."""


def effects_of(value: Any) -> tuple[Effect, ...]:
    """The effects a handler returned: ``None`` is none; anything but an Effects is an error."""
    if value is None:
        return ()
    if isinstance(value, Effects):
        return value.ops
    raise EffectError(
        f"the handler returned {type(value).__name__}; an idempotency='lua' handler returns "
        f"Effects or None"
    )


class LuaStrategy:
    """``idempotency="lua"`` for one subscription; see the module docstring for the guarantee.

    Args:
        client: the Redis client (the two scripts, INFO cluster once).
        stream, group, consumer: the subscription and this consumer's name.
        concurrency: how many handlers of a batch run at once.
        key: per-key concurrency (``key_field``): messages of one key run one after another in
            batch order, up to ``concurrency`` keys at once; their effects still apply in one
            script for the batch.
        max_deliveries: to decide on a message whose effects could not apply.
        dedup_field: the entry field holding the business key (None: no business dedup).
        dedup_window_ms: how long an applied business key is remembered.
    """

    name = "lua"
    trace_phases = SpanPhases(commit="script", ack="script")
    """One script applies the effects and acks, atomically: it is both steps in a trace."""

    def __init__(
        self,
        client: aioredis.Redis,
        *,
        stream: str,
        group: str,
        consumer: str,
        concurrency: int = 1,
        key: KeyFunc | None = None,
        max_deliveries: int = 5,
        dedup_field: str | None = None,
        dedup_window_ms: int = DEFAULT_DEDUP_WINDOW_MS,
    ) -> None:
        self._client = client
        self.stream = stream
        self.group = group
        self.consumer = consumer
        self._concurrency = concurrency
        self._key = key
        self._max_deliveries = max_deliveries
        self.dedup_field = dedup_field
        self.dedup_window_ms = dedup_window_ms
        self.record_key = dedup_record_key(stream, group)
        self._stream_key = stream.encode()
        self._record = self.record_key.encode()
        # None until INFO cluster was read; then the stream's slot, or -1 when not a cluster.
        self._slot: int | None = None
        self._log = structlog.get_logger("streamworker.lua").bind(
            stream=stream, group=group, consumer=consumer
        )

    # Kept as methods so that crash tests can stop the process at these exact points.
    async def _check(self, args: Sequence[str | bytes | int]) -> list[Any] | int:
        result: list[Any] | int = await _CHECK(self._client, [self._stream_key, self._record], args)
        return result

    async def _apply(
        self,
        keys: Sequence[bytes],
        args: Sequence[str | bytes | int],
        next_read: NextRead | None,
    ) -> list[Any] | int:
        # The batch's last call: the consume loop's next read goes out behind it.
        result: list[Any] | int = await _APPLY.then_read(self._client, keys, args, next_read)
        return result

    def _cutoff(self, now_ms: int) -> str:
        return str(now_ms - self.dedup_window_ms) if self.dedup_field else ""

    async def process(self, work: Batch) -> list[Outcome]:
        """See :class:`~streamworker.idempotency.base.Strategy`. Raises ConnectionLost when Redis
        is away (nothing of the unfinished part of the batch was applied or acked).

        A ``fresh`` batch without ``dedup_field`` goes to its handlers without the check round
        trip: nobody can have claimed or acked its entries yet, and the apply script checks
        ownership again anyway. The apply script (the batch's last call) sends
        ``work.next_read`` behind it."""
        batch = work.messages
        if not batch:
            return []
        outcomes: list[Outcome | None] = [None] * len(batch)
        bkeys = [""] * len(batch)
        if self.dedup_field:
            self._business_keys(batch, outcomes, bkeys)
        todo = [i for i, o in enumerate(outcomes) if o is None]
        run: list[int] = []
        skip_handler: list[int] = []
        if todo and work.fresh and not self.dedup_field:
            run = todo
        elif todo:
            ids = [batch[i].id for i in todo]
            low, high = _id_range(ids)
            args: list[str | bytes | int] = [
                self.group,
                self.consumer,
                self._cutoff(_now_ms()),
                low,
                high,
                len(ids),
                " ".join(ids),
            ]
            if self.dedup_field:
                args += [bkeys[i] for i in todo]
            reply = await self._check(args)
            if isinstance(reply, int):  # every entry is ours, no business key to look up
                run = todo
            else:
                for i, status in zip(todo, reply, strict=True):
                    if status == _OWNED:
                        run.append(i)
                    elif status == _BUSINESS_DUPLICATE:
                        skip_handler.append(i)
                    else:
                        outcomes[i] = self._lost(batch[i], int(status), before=True)
        try:
            await self._run_handlers(batch, run, outcomes, work)
        except asyncio.CancelledError:
            # The shutdown deadline: what finished is still applied and acked (or it runs again).
            with contextlib.suppress(Exception):
                await asyncio.wait_for(
                    # Without the next read: the loop is stopping.
                    asyncio.shield(self._finish(batch, outcomes, bkeys, skip_handler, None)),
                    _APPLY_ON_CANCEL_TIMEOUT_S,
                )
            raise
        await self._finish(batch, outcomes, bkeys, skip_handler, work.next_read)
        return cast("list[Outcome]", outcomes)  # every slot is filled by now

    def _business_keys(
        self, batch: Sequence[Message[Any]], outcomes: list[Outcome | None], bkeys: list[str]
    ) -> None:
        assert self.dedup_field is not None
        for i, msg in enumerate(batch):
            value = msg.fields.get(self.dedup_field, "")
            if value:
                bkeys[i] = value
            else:
                outcomes[i] = decide(
                    PermanentFailure(
                        f"field {self.dedup_field!r} (the handler's dedup_field) is missing "
                        f"or empty"
                    ),
                    msg.delivery_count,
                    self._max_deliveries,
                )

    async def _run_handlers(
        self,
        batch: Sequence[Message[Any]],
        run: list[int],
        outcomes: list[Outcome | None],
        work: Batch,
    ) -> None:
        many = work.handle_batch
        if many is not None:
            # A batch handler: one call for the messages to run; the effects it returns for each
            # are applied, marked and acked per message by the apply script, as single handlers'.
            if run:
                ran = await many([batch[i] for i in run], _NOTHING)
                for i, outcome in zip(run, ran.outcomes, strict=True):
                    outcomes[i] = outcome
            return
        handle = work.handle
        if self._concurrency == 1 or len(run) <= 1:
            # One after another; each outcome lands in ``outcomes`` as it is known (also when
            # cancelled: the caller applies what finished).
            done: list[Outcome] = []
            try:
                await work.handle_each(
                    batch if len(run) == len(batch) else [batch[i] for i in run], _NOTHING, done
                )
            finally:
                for i, outcome in zip(run, done, strict=False):
                    outcomes[i] = outcome
            return
        key = self._key
        if key is not None:

            async def one(_: int, i: int) -> None:
                outcomes[i] = await handle(batch[i], _NOTHING)

            await run_keyed(run, self._concurrency, lambda i: key(batch[i]), one)
            return
        sem = asyncio.Semaphore(self._concurrency)

        async def limited(i: int) -> None:
            async with sem:
                outcomes[i] = await handle(batch[i], _NOTHING)

        tasks = [asyncio.ensure_future(limited(i)) for i in run]
        try:
            await asyncio.gather(*tasks)
        except asyncio.CancelledError:
            for t in tasks:
                t.cancel()
            raise

    async def _finish(
        self,
        batch: Sequence[Message[Any]],
        outcomes: list[Outcome | None],
        bkeys: list[str],
        skip_handler: list[int],
        next_read: NextRead | None,
    ) -> None:
        """One apply script for the messages whose handler succeeded (with their effects) and the
        business duplicates found before the handlers (ack only); updates ``outcomes``."""
        # (batch index, effects or None: ack only if still a business duplicate), in batch order
        items: list[tuple[int, tuple[Effect, ...] | None]] = []
        # The common case (handlers with no Redis effects, no business keys): the layout is the
        # ids, and the script acks them with one XPENDING and one XACK.
        # (By identity: an Outcome carrying Effects compares equal to ACKED.)
        plain = not self.dedup_field and all(o is ACKED for o in outcomes)
        if plain:
            # (i, ()) for every index, the tuples made by zip rather than one by one
            items = list(zip(range(len(batch)), itertools.repeat((), len(batch)), strict=True))
        else:
            await self._collect(batch, outcomes, skip_handler, items)
            if not items:
                return
        await self._apply_items(batch, outcomes, bkeys, items, plain, next_read)

    async def _collect(
        self,
        batch: Sequence[Message[Any]],
        outcomes: list[Outcome | None],
        skip_handler: list[int],
        items: list[tuple[int, tuple[Effect, ...] | None]],
    ) -> None:
        """Append to ``items`` what the apply script must handle: messages acked by their handler
        (with their effects, once checked; a refused effect updates ``outcomes`` instead) and the
        business duplicates whose handler was skipped."""
        for i, outcome in enumerate(outcomes):
            if outcome is None:
                if i in skip_handler:
                    items.append((i, None))
                continue
            if outcome.action is not Action.ACK or outcome.duplicate:
                continue
            if outcome.value is None:
                items.append((i, ()))
                continue
            try:
                effects = effects_of(outcome.value)
                if effects:
                    await self._check_keys(effects)
            except EffectError as exc:
                outcomes[i] = self._rejected(batch[i], exc)
                continue
            items.append((i, effects))

    async def _apply_items(
        self,
        batch: Sequence[Message[Any]],
        outcomes: list[Outcome | None],
        bkeys: list[str],
        items: list[tuple[int, tuple[Effect, ...] | None]],
        plain: bool,
        next_read: NextRead | None,
    ) -> None:
        """Build the apply script's call for ``items`` (``plain``: no effects and no business
        keys, so the layout is the ids alone), run it, and update ``outcomes`` from its reply."""
        now = _now_ms()
        keys: list[bytes] = [self._stream_key, self._record]
        index: dict[bytes, int] = {}
        # ARGV[9…]: business keys and effect arguments; the layout (ARGV[8]) points into it.
        payload: list[str | bytes | int] = []
        if plain:  # items is the whole batch, in order
            layout = [str(len(items)), *[m.id for m in batch]]
        else:
            layout = [str(len(items))]
            self._layout(batch, bkeys, items, keys, index, payload, layout)
        low, high = _id_range([batch[items[0][0]].id, batch[items[-1][0]].id])
        args: list[str | bytes | int] = [
            self.group,
            self.consumer,
            now,
            self._cutoff(now),
            self.dedup_window_ms,
            low,
            high,
            " ".join(layout),
            *payload,
        ]
        reply = await self._apply(keys, args, next_read)
        if isinstance(reply, int):  # every message applied and acked
            self._log.debug("effects_applied", messages=len(items), effects=0)
            return
        applied = 0
        for (i, done), result in zip(items, reply, strict=True):
            msg = batch[i]
            if isinstance(result, bytes | str):
                text = result.decode("utf-8", "replace") if isinstance(result, bytes) else result
                outcomes[i] = self._rejected(msg, EffectError(text))
            elif result == _OWNED:
                applied += 1
            elif result == _BUSINESS_DUPLICATE:
                self._log.info(
                    "duplicate_acked",
                    message_id=msg.id,
                    reason="business_key",
                    business_key=bkeys[i],
                    handler_ran=done is not None,
                )
                outcomes[i] = DUPLICATE
            elif result == _RECORD_EXPIRED:
                outcomes[i] = _record_expired()
            else:
                outcomes[i] = self._lost(msg, int(result), before=False)
        self._log.debug("effects_applied", messages=applied, effects=len(payload))

    @staticmethod
    def _layout(
        batch: Sequence[Message[Any]],
        bkeys: list[str],
        items: list[tuple[int, tuple[Effect, ...] | None]],
        keys: list[bytes],
        index: dict[bytes, int],
        payload: list[str | bytes | int],
        layout: list[str],
    ) -> None:
        """The layout tokens of ``items``, with their keys (KEYS) and arguments (ARGV[9…])."""
        for i, ops in items:
            entry_id = batch[i].id
            bkey = 0
            if bkeys[i]:
                payload.append(bkeys[i])
                bkey = _FIRST_PAYLOAD + len(payload) - 1
            if ops is None:
                layout.append(f"{entry_id},{bkey},-1")
            elif not ops and not bkey:
                layout.append(entry_id)
            else:
                layout.append(f"{entry_id},{bkey},{len(ops)}")
                for op in ops:
                    k = index.get(op.key)
                    if k is None:
                        keys.append(op.key)
                        k = index[op.key] = len(keys)  # KEYS is 1-based in Lua
                    layout.append(
                        f"{op.command},{k},{_FIRST_PAYLOAD + len(payload)},{len(op.args)}"
                    )
                    payload.extend(op.args)

    def _lost(self, msg: Message[Any], status: int, *, before: bool) -> Outcome:
        """The outcome of a message this consumer no longer holds: acked (by whoever claimed it)
        or claimed by another consumer. Its effects were not applied here."""
        stage = "before_handler" if before else "after_handler"
        if status == _NOT_PENDING:
            self._log.info("duplicate_acked", message_id=msg.id, reason="not_pending", stage=stage)
            return DUPLICATE
        self._log.warning("message_claimed_away", message_id=msg.id, stage=stage)
        return CLAIMED_AWAY

    def _rejected(self, msg: Message[Any], exc: EffectError) -> Outcome:
        return decide_failed(self._log, "effects_rejected", msg, exc, self._max_deliveries)

    async def _check_keys(self, ops: Sequence[Effect]) -> None:
        """Refuse effects on the consumed stream (XADD excepted), on the record, and on Redis
        Cluster on keys outside the stream's slot."""
        if not ops:
            return
        slot = await self._cluster_slot()
        for n, op in enumerate(ops, 1):
            if op.key == self._stream_key and op.command != "xadd":
                raise EffectError(
                    f"effect {n} ({op.describe()}): effects may not change the consumed stream "
                    f"(only xadd to it)"
                )
            if op.key == self._record:
                raise EffectError(
                    f"effect {n} ({op.describe()}): that key is streamworker's business-key record"
                )
            if slot >= 0 and key_slot(op.key) != slot:
                tag = hash_tag(self.stream) or self.stream
                raise EffectError(
                    f"effect {n} ({op.describe()}): the key hashes to slot {key_slot(op.key)}, "
                    f"but stream {self.stream!r} is in slot {slot}; on Redis Cluster every key "
                    f"an effect writes must carry the stream's hash tag, e.g. '{{{tag}}}:…'"
                )

    async def _cluster_slot(self) -> int:
        if self._slot is None:
            async with connection_errors():
                try:
                    info = await self._client.info("cluster")
                except rex.ResponseError:
                    info = {}
            enabled = str(info.get("cluster_enabled", "0")) == "1"
            self._slot = key_slot(self._stream_key) if enabled else -1
            self._log.debug("cluster_mode_detected", cluster=enabled)
        return self._slot


def _record_expired() -> Outcome:
    # Its handler was skipped as a business duplicate, but the record expired before the ack:
    # deliver it again (soon) and let the handler run.
    return Outcome(
        Action.LEAVE_PENDING,
        "business-key record expired between the check and the ack; delivered again",
        retry_delay_ms=0,
        retry=True,
    )


def _id_range(ids: Sequence[str]) -> tuple[str, str]:
    """Bounds for the scripts' XPENDING over the batch: its first and last id, in stream order.

    A batch is in stream order (reads, XAUTOCLAIM); one that is not (the reclaimer's retries)
    may have ids outside these bounds, which the scripts then look up one XPENDING each: only
    slower, never wrong.
    """
    first, last = ids[0], ids[-1]
    return (first, last) if _id_key(first) <= _id_key(last) else (last, first)


def _id_key(entry_id: str) -> tuple[int, int]:
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)


def _now_ms() -> int:
    return int(time.time() * 1000)


class LuaPlugin(PlainPlugin):
    """``idempotency="lua"`` as a plug-in: applies returned Effects, implements ``dedup_field``."""

    name = "lua"
    applies_effects = True
    supports_dedup_field = True
    supports_batch = True

    def build(self, spec: HandlerConfig, context: BuildContext) -> Strategy:
        """A :class:`LuaStrategy` for ``spec``."""
        return LuaStrategy(
            context.client,
            stream=spec.stream,
            group=spec.group,
            consumer=context.consumer,
            concurrency=spec.concurrency,
            key=spec.message_key,
            max_deliveries=spec.max_deliveries,
            dedup_field=spec.dedup_field,
            dedup_window_ms=spec.dedup_window_ms,
        )


PLUGIN = LuaPlugin()
"""Found by :mod:`streamworker.idempotency.registry` as ``"lua"``."""
