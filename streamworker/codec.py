"""Turning a stream entry into a :class:`~streamworker.Message` (pure, no I/O).

Fields are decoded as UTF-8. With a body model, the body is validated from the field map (pydantic's
lax mode turns ``"42"`` into ``42``) or, with ``body_field``, from the JSON document in that field.
Anything that cannot decode or validate raises PermanentFailure: the same bytes would fail on every
delivery, so retrying is pointless and the message goes to the dead-letter stream at once.
"""

from __future__ import annotations

import dataclasses
import json
import math
import typing
from collections.abc import Callable, Mapping
from typing import Any, TypeAlias

import typing_extensions
from pydantic import BaseModel, TypeAdapter, ValidationError

from streamworker.errors import ConfigError, PermanentFailure
from streamworker.message import Message

BodyModel: TypeAlias = "type[BaseModel] | TypeAdapter[Any]"
"""How a handler's body is validated: a pydantic model class, or a TypeAdapter for a dataclass or
a TypedDict (see :func:`body_model_for`)."""


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


def body_model_for(body_type: Any, where: str) -> BodyModel | None:
    """The validator of a handler's body type (``Message[X]``'s ``X``, or ``model=``).

    A pydantic model validates itself; a dataclass or a TypedDict gets a pydantic TypeAdapter;
    ``Any`` (or no type) means no body. Anything else is refused with one line naming ``where``:
    a body that silently stays ``None`` would be worse.
    """
    if body_type is None or body_type is Any or isinstance(body_type, typing.TypeVar):
        return None
    if isinstance(body_type, type) and issubclass(body_type, BaseModel):
        return body_type
    if (
        isinstance(body_type, type) and dataclasses.is_dataclass(body_type)
    ) or typing_extensions.is_typeddict(body_type):
        try:
            return TypeAdapter(body_type)
        except Exception as exc:  # a dataclass pydantic cannot build a schema for
            first = (str(exc).strip().splitlines() or [""])[0]
            raise ConfigError(f"{where}: cannot validate {body_type!r}: {first}") from None
    raise ConfigError(
        f"{where}: the body type must be a pydantic model, a dataclass or a TypedDict, "
        f"not {body_type!r} (use Message[Any] for no body)"
    )


def decode_body(fields: dict[str, str], model: BodyModel, body_field: str | None) -> Any:
    """Validate the body from ``fields`` (or from the JSON in ``fields[body_field]``)."""
    try:
        if isinstance(model, TypeAdapter):
            if body_field is None:
                return model.validate_python(fields)
            if body_field not in fields:
                raise PermanentFailure(f"body field {body_field!r} is missing")
            return model.validate_json(fields[body_field])
        if body_field is None:
            return model.model_validate(fields)
        if body_field not in fields:
            raise PermanentFailure(f"body field {body_field!r} is missing")
        return model.model_validate_json(fields[body_field])
    except ValidationError as exc:
        raise PermanentFailure(_summarise(exc)) from None


def _field_text(name: str, value: Any) -> str:
    # The text pydantic's lax mode parses back into the same value.
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"field {name!r}: {value} cannot be sent as a stream field")
        return repr(value)
    raise ValueError(
        f"field {name!r} holds a {type(value).__name__}, which a stream field cannot carry; "
        f"send the body as JSON in one field (body_field=...)"
    )


def encode_body(
    body: Any, *, model: BodyModel | None = None, body_field: str | None = None
) -> dict[str, str]:
    """The stream fields that :func:`decode_body` turns back into ``body``: the inverse of what
    a handler with ``Message[Model]`` (and ``body_field``) receives.

    ``body`` is a pydantic model instance, a dataclass instance or a mapping (a TypedDict).
    ``model`` is the validator to check against (default: the body's own class). Without
    ``body_field`` each top-level field becomes one stream field (numbers and booleans as text,
    ``None`` left out); nested values need ``body_field``, where the whole body is one JSON
    document. Raises ValueError when the result would not decode to an equal body, so a test
    never publishes something its handler would read differently.
    """
    if model is None:
        if isinstance(body, BaseModel):
            model = type(body)
        elif dataclasses.is_dataclass(body) and not isinstance(body, type):
            model = TypeAdapter(type(body))
        elif isinstance(body, Mapping):
            model = TypeAdapter(dict[str, Any])
        else:
            raise ValueError(
                f"cannot encode a {type(body).__name__} body: use a pydantic model, a dataclass "
                f"or a mapping"
            )
    adapter = model if isinstance(model, TypeAdapter) else None
    data: Any
    if adapter is not None:
        data = adapter.dump_python(body, mode="json")
    elif isinstance(body, BaseModel):
        data = body.model_dump(mode="json")
    else:
        data = TypeAdapter(typing.cast(Any, model)).dump_python(body, mode="json")
    if body_field is not None:
        fields = {body_field: json.dumps(data, separators=(",", ":"))}
    else:
        if not isinstance(data, dict):
            raise ValueError(f"a {type(body).__name__} body has no fields to send")
        fields = {str(k): _field_text(str(k), v) for k, v in data.items() if v is not None}
    try:
        back = decode_body(fields, model, body_field)
    except PermanentFailure as exc:
        raise ValueError(f"the encoded body would not decode: {exc}") from None
    if back != body:
        raise ValueError(
            f"{body!r} does not survive the trip through stream fields (it decodes as {back!r}); "
            f"send it as JSON in one field (body_field=...)"
        )
    return fields


def decode_message(
    entry_id: bytes,
    raw: dict[bytes, bytes],
    *,
    stream: str,
    group: str,
    consumer: str,
    delivery_count: int,
    model: BodyModel | None,
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
