"""Per-key concurrency and in-flight bounds: the pure parts (no I/O).

A handler registered with ``key_field=`` (a field name, or a callable taking the
:class:`~streamworker.core.message.Message`) has its batches split into *lanes*: one lane per key,
holding that key's messages in stream order. Lanes run concurrently up to the handler's
``concurrency``, the messages of one lane one after another, so messages with one key never run at
the same time and run in stream order within the worker, while a slow (hot) key occupies one lane
and never the others.

What is here: resolving the key of a message, splitting a batch into lanes and running them
(asyncio only, no I/O: the strategies call :func:`run_keyed` where they ran a batch's handlers
``concurrency`` at a time), and checking the options at registration, each with one clear line
when wrong.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable, Iterable, Sequence
from typing import Any, TypeAlias, TypeVar

from pydantic import TypeAdapter

from streamworker.core.codec import BodyModel
from streamworker.core.message import Message
from streamworker.errors import ConfigError

KeyFunc: TypeAlias = Callable[[Message[Any]], Hashable]
"""Computes a message's key: messages with equal keys never run at the same time."""

KeyField: TypeAlias = "str | KeyFunc"
"""What ``@app.handler(key_field=…)`` accepts: a field name, or a :data:`KeyFunc`."""

T = TypeVar("T")

_MISSING = object()


def key_func(key_field: str | KeyFunc, *, body_field: str | None = None) -> KeyFunc:
    """The :data:`KeyFunc` of ``key_field``.

    A callable is used as it is. A field name reads the message's body attribute (pydantic model,
    dataclass) or item (TypedDict, mapping) of that name; without a body (or when the body lacks
    it), the entry field of that name when the body is the whole field map (``body_field`` None).
    A message without the key gets the key ``None``: such messages share one lane, so they keep
    their stream order among themselves (the safe reading of "no key").
    """
    if callable(key_field):
        return key_field
    name = key_field

    def of(message: Message[Any]) -> Hashable:
        body = message.body
        if body is not None:
            value = (
                body.get(name, _MISSING)
                if isinstance(body, dict)
                else getattr(body, name, _MISSING)
            )
            if value is not _MISSING:
                return _hashable(value)
        if body_field is None:
            return message.fields.get(name)
        return None

    return of


def _hashable(value: Any) -> Hashable:
    """Keys must be hashable to pick a lane; an unhashable value (a list) keys by its text."""
    try:
        hash(value)
    except TypeError:
        return repr(value)
    return value  # type: ignore[no-any-return]


def split_lanes(items: Iterable[T], key: Callable[[T], Hashable]) -> list[list[T]]:
    """Group ``items`` by ``key`` into lanes: each lane holds one key's items in their input
    (stream) order, and lanes are ordered by their key's first item, so the oldest work starts
    first. Every item is in exactly one lane."""
    lanes: dict[Hashable, list[T]] = {}
    for item in items:
        lanes.setdefault(key(item), []).append(item)
    return list(lanes.values())


def model_field_names(model: BodyModel) -> set[str] | None:
    """The field names a body model validates from (aliases included), or None when the model
    does not say (a schema without named properties)."""
    if not isinstance(model, TypeAdapter):  # a pydantic model class
        names = set(model.model_fields)
        for info in model.model_fields.values():
            if info.alias:
                names.add(info.alias)
            if isinstance(info.validation_alias, str):
                names.add(info.validation_alias)
        return names
    # A dataclass or TypedDict: its JSON schema names the properties it validates.
    schema = model.json_schema(mode="validation")
    properties = schema.get("properties")
    return set(properties) if isinstance(properties, dict) else None


def check_key_field(key_field: object, where: str) -> None:
    """ConfigError (one line, naming ``where``) unless ``key_field`` is a non-empty field name or
    a callable."""
    if callable(key_field):
        return
    if not isinstance(key_field, str) or not key_field:
        raise ConfigError(
            f"{where}: key_field must be a field name or a function of the message, "
            f"got {key_field!r}"
        )


def check_key_field_in_model(key_field: str | KeyFunc, model: BodyModel | None, where: str) -> None:
    """ConfigError when ``key_field`` names a field that the handler's body model lacks (a typo
    would put every message into one lane: silently sequential). A callable, or a handler
    without a model, is not checked."""
    if callable(key_field) or model is None:
        return
    names = model_field_names(model)
    if names is not None and key_field not in names:
        known = ", ".join(sorted(names)) or "none"
        raise ConfigError(
            f"{where}: key_field {key_field!r} is not a field of the handler's model "
            f"(its fields: {known})"
        )


def check_in_flight(label: str, value: object) -> int | None:
    """``max_in_flight``/``max_in_flight_bytes``: None (no bound) or an integer >= 1; anything
    else is a ConfigError of one line. Returns the value."""
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ConfigError(f"{label} must be None (no bound) or an integer >= 1, got {value!r}")
    return value


def entry_bytes(fields: Sequence[bytes] | None) -> int:
    """The bytes an entry's fields hold (names and values, the flat list a read returns): what
    ``max_in_flight_bytes`` counts. A deleted entry (None) holds none."""
    return 0 if not fields else sum(len(part) for part in fields)


async def run_lanes(
    lanes: Sequence[Sequence[T]],
    concurrency: int,
    run_lane: Callable[[Sequence[T]], Awaitable[None]],
) -> None:
    """Run ``run_lane`` on each lane, at most ``concurrency`` at once, starting lanes in the given
    order. Returns when every lane finished. The first exception is raised after the other running
    lanes finished (a lane is never abandoned half-way: its messages may hold effects in flight);
    lanes not yet started when a lane fails are not started."""
    if concurrency < 1:
        raise ValueError(f"concurrency must be >= 1, got {concurrency}")
    pending = list(lanes)
    pending.reverse()  # pop() from the end takes the oldest lane first
    failure: BaseException | None = None
    running: set[asyncio.Task[None]] = set()
    try:
        while pending or running:
            while pending and len(running) < concurrency and failure is None:
                running.add(asyncio.ensure_future(run_lane(pending.pop())))
            if not running:
                break
            done, running = await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                exc = task.exception()
                if exc is not None and failure is None:
                    failure = exc
            if failure is not None:
                pending.clear()
    finally:
        # Cancelled from outside (a stop past its deadline): the lanes go with us, and are
        # awaited so that none outlives the batch it belongs to.
        for task in running:
            task.cancel()
        if running:
            await asyncio.gather(*running, return_exceptions=True)
    if failure is not None:
        raise failure


async def run_keyed(
    items: Sequence[T],
    concurrency: int,
    key: Callable[[T], Hashable],
    run: Callable[[int, T], Awaitable[None]],
) -> None:
    """Run ``run(index, item)`` for every item, items of one key one after another in their
    order, up to ``concurrency`` keys at once (:func:`split_lanes`, :func:`run_lanes`). A key
    waiting for its previous item holds no slot, so a hot key never keeps the others waiting."""
    indexed = list(enumerate(items))
    lanes = split_lanes(indexed, lambda pair: key(pair[1]))

    async def lane(members: Sequence[tuple[int, T]]) -> None:
        for index, item in members:
            await run(index, item)

    await run_lanes(lanes, concurrency, lane)
