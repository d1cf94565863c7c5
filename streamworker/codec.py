"""Turning a stream entry into a :class:`~streamworker.Message` (pure, no I/O).

Fields are decoded as UTF-8. With a body model, the body is validated from the field map (pydantic's
lax mode turns ``"42"`` into ``42``) or, with ``body_field``, from the JSON document in that field.
Anything that cannot decode or validate raises PermanentFailure: the same bytes would fail on every
delivery, so retrying is pointless and the message goes to the dead-letter stream at once.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ValidationError

from streamworker.errors import PermanentFailure
from streamworker.message import Message


def _text(raw: bytes, what: str) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise PermanentFailure(f"{what} is not valid UTF-8: {raw[:40]!r}") from None


def _summarise(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors()[:5]:
        loc = ".".join(str(p) for p in err["loc"]) or "body"
        parts.append(f"{loc}: {err['msg']}")
    more = exc.error_count() - len(parts)
    if more > 0:
        parts.append(f"and {more} more")
    return "body failed validation: " + "; ".join(parts)


def decode_fields(raw: dict[bytes, bytes]) -> dict[str, str]:
    """The entry's fields as text; PermanentFailure naming the first field that is not UTF-8."""
    try:
        return {key.decode("utf-8"): value.decode("utf-8") for key, value in raw.items()}
    except UnicodeDecodeError:
        pass  # find the culprit, field by field, to name it
    out: dict[str, str] = {}
    for key, value in raw.items():
        name = _text(key, "a field name")
        out[name] = _text(value, f"field {name!r}")
    return out


def decode_body(
    fields: dict[str, str], model: type[BaseModel], body_field: str | None
) -> BaseModel:
    """Validate the body model from ``fields`` (or from the JSON in ``fields[body_field]``)."""
    try:
        if body_field is None:
            return model.model_validate(fields)
        if body_field not in fields:
            raise PermanentFailure(f"body field {body_field!r} is missing")
        return model.model_validate_json(fields[body_field])
    except ValidationError as exc:
        raise PermanentFailure(_summarise(exc)) from None


def decode_message(
    entry_id: bytes,
    raw: dict[bytes, bytes],
    *,
    stream: str,
    group: str,
    consumer: str,
    delivery_count: int,
    model: type[BaseModel] | None,
    body_field: str | None,
) -> Message[Any]:
    """Build the Message for one live entry, or raise PermanentFailure."""
    try:  # decode_fields' fast path, inlined: this runs for every message
        fields = {key.decode("utf-8"): value.decode("utf-8") for key, value in raw.items()}
    except UnicodeDecodeError:
        fields = decode_fields(raw)  # raises, naming the field
    body = decode_body(fields, model, body_field) if model is not None else None
    return _message(entry_id.decode("ascii"), stream, group, consumer, fields, body, delivery_count)


def _slot_setter(name: str) -> Callable[[Message[Any], Any], None]:
    setter: Callable[[Message[Any], Any], None] = getattr(Message, name).__set__
    return setter


# Message is a frozen dataclass: its __init__ sets each field through object.__setattr__, which
# costs more than decoding the fields. This sets the slots directly, once per message; the unit
# tests check that the result equals Message(...).
_NEW = object.__new__
_SET_ID = _slot_setter("id")
_SET_STREAM = _slot_setter("stream")
_SET_GROUP = _slot_setter("group")
_SET_CONSUMER = _slot_setter("consumer")
_SET_FIELDS = _slot_setter("fields")
_SET_BODY = _slot_setter("body")
_SET_COUNT = _slot_setter("delivery_count")
# Every field must be set here: tests/unit/test_codec.py compares _MESSAGE_FIELDS with Message.
_MESSAGE_FIELDS = ("id", "stream", "group", "consumer", "fields", "body", "delivery_count")


def _message(
    entry_id: str,
    stream: str,
    group: str,
    consumer: str,
    fields: dict[str, str],
    body: Any,
    delivery_count: int,
) -> Message[Any]:
    msg: Message[Any] = _NEW(Message)
    _SET_ID(msg, entry_id)
    _SET_STREAM(msg, stream)
    _SET_GROUP(msg, group)
    _SET_CONSUMER(msg, consumer)
    _SET_FIELDS(msg, fields)
    _SET_BODY(msg, body)
    _SET_COUNT(msg, delivery_count)
    return msg
