"""Reading a subscription's group state from Redis, for the gauges and for readiness."""

from __future__ import annotations

from collections.abc import Sequence

import redis

from streamworker.app import HandlerSpec
from streamworker.io.redisio import as_text
from streamworker.observability.metrics import GroupState


def read_group_states(client: redis.Redis, specs: Sequence[HandlerSpec]) -> list[GroupState]:
    """One GroupState per handler whose group exists (a missing stream or group is left out).

    One pipelined round trip for XINFO GROUPS, XPENDING and XLEN of every subscription.
    """
    pipe = client.pipeline(transaction=False)
    for spec in specs:
        pipe.xinfo_groups(spec.stream)
        pipe.xpending(spec.stream, spec.group)
        pipe.xlen(spec.dead_letter_stream)
    replies = pipe.execute(raise_on_error=False)
    states = []
    for i, spec in enumerate(specs):
        groups, pending, dlq_len = replies[3 * i : 3 * i + 3]
        if isinstance(groups, Exception) or isinstance(pending, Exception):
            continue
        info = next((g for g in groups if as_text(g["name"]) == spec.group), None)
        if info is None:
            continue
        lag = info.get("lag")
        min_id = pending.get("min")
        states.append(
            GroupState(
                stream=spec.stream,
                group=spec.group,
                dead_letter_stream=spec.dead_letter_stream,
                lag=None if lag is None else int(lag),
                pending=int(pending["pending"]),
                oldest_pending_ms=None if not min_id else int(as_text(min_id).split("-", 1)[0]),
                consumers=int(info["consumers"]),
                dead_letters=0 if isinstance(dlq_len, Exception) else int(dlq_len),
            )
        )
    return states


def missing_groups(client: redis.Redis, specs: Sequence[HandlerSpec]) -> list[str]:
    """``stream/group`` of every subscription whose group does not exist (yet)."""
    known = {(s.stream, s.group) for s in read_group_states(client, specs)}
    return [f"{s.stream}/{s.group}" for s in specs if (s.stream, s.group) not in known]
