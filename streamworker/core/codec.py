"""Turning a stream entry into a :class:`~streamworker.Message`, and a model into an entry (pure).

Decoding: fields are decoded as UTF-8. With a body model, the body is validated from the field map
(pydantic's lax mode turns ``"42"`` into ``42``) or, with ``body_field``, from the JSON document in
that field. A flat field whose annotation is a structure (a nested model, a dataclass, a list, a
dict, a tuple, a set, or an optional one of those) holds JSON text, which is parsed before
validation; a text that is not JSON is left as it is (and fails validation as it always did).
Anything that cannot decode or validate raises PermanentFailure: the same bytes would fail on every
delivery, so retrying is pointless and the message goes to the dead-letter stream at once.

Encoding is the inverse, for producers: :func:`encode_fields` (flat fields) and
:func:`encode_body` (one JSON field) turn a model, or a plain mapping, into the field map that
:func:`decode_message` turns back into an equal model. Scalars become text pydantic's lax mode
reads back (``42``, ``true``, ISO 8601 datetimes, decimals as written, enums by value), structures
become compact JSON, and ``None`` leaves the field out (so an optional field needs a default,
which ``x: int | None = None`` has).
"""

from __future__ import annotations

import collections.abc as abc
import dataclasses
import datetime
import decimal
import enum
import functools
import json
import types
import typing
import uuid
from collections.abc import Mapping
from typing import Any, TypeAlias

import typing_extensions
from pydantic import BaseModel, TypeAdapter, ValidationError

from streamworker.core.message import Message
from streamworker.errors import ConfigError, PermanentFailure

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
            structured = _structured_fields(model)
            if structured:
                fields = _parse_structured(fields, structured)
            return model.model_validate(fields)
        if body_field not in fields:
            raise PermanentFailure(f"body field {body_field!r} is missing")
        return model.model_validate_json(fields[body_field])
    except ValidationError as exc:
        raise PermanentFailure(_summarise(exc)) from None


# Containers whose values cannot come from a string in lax mode: in a flat field they travel as JSON.
_STRUCTURES: tuple[Any, ...] = (
    list,
    dict,
    tuple,
    set,
    frozenset,
    typing.Sequence,
    typing.Mapping,
    typing.MutableSequence,
    typing.MutableMapping,
    typing.AbstractSet,
)


def _is_structure(annotation: Any) -> bool:
    """True when a flat field of this annotation carries JSON (see the module docstring): a model,
    dataclass, TypedDict or container, or a union whose members other than None all are."""
    if typing.get_origin(annotation) is typing.Annotated:
        return _is_structure(typing.get_args(annotation)[0])
    origin = typing.get_origin(annotation)
    if origin is typing.Union or origin is types.UnionType:
        members = [a for a in typing.get_args(annotation) if a is not type(None)]
        return bool(members) and all(_is_structure(a) for a in members)
    target = origin if origin is not None else annotation
    if target in _STRUCTURES:
        return True
    if isinstance(target, type):
        if issubclass(target, BaseModel) or dataclasses.is_dataclass(target):
            return True
        if typing.is_typeddict(target):
            return True
        return issubclass(target, abc.Sequence | abc.Mapping | abc.Set) and not issubclass(
            target, str | bytes | bytearray
        )
    return False


@functools.cache
def _structured_fields(model: type[BaseModel]) -> frozenset[str]:
    """The field-map keys (names and aliases) of ``model``'s structured fields. Cached per model:
    decoding runs for every message."""
    keys: set[str] = set()
    for name, info in model.model_fields.items():
        if _is_structure(info.annotation):
            keys.add(name)
            for alias in (info.alias, info.validation_alias):
                if isinstance(alias, str):
                    keys.add(alias)
    return frozenset(keys)


@functools.cache
def _required_keys(model: type[BaseModel]) -> frozenset[str]:
    """The dumped keys (alias, else name) of ``model``'s fields without a default."""
    return frozenset(
        info.alias if isinstance(info.alias, str) else name
        for name, info in model.model_fields.items()
        if info.is_required()
    )


def _parse_structured(fields: dict[str, str], structured: frozenset[str]) -> dict[str, Any]:
    out: dict[str, Any] = dict(fields)
    for key in structured & fields.keys():
        try:
            out[key] = json.loads(fields[key])
        except ValueError:
            pass  # not JSON: validation reports the field as before
    return out


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


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class MessageDecoder:
    """:func:`decode_message` for the entries of one consumer of one subscription, with what
    is the same for all of them bound once: ``decode(entry_id, raw, delivery_count)`` gives the
    same Message (or raises the same PermanentFailure). Immutable: safe to share across
    threads."""

    stream: str
    group: str
    consumer: str
    model: BodyModel | None
    body_field: str | None

    def decode(self, entry_id: bytes, raw: list[bytes], delivery_count: int) -> Message[Any]:
        """The Message for one live entry (``raw``: its field names and values alternating, as
        Redis sends them); PermanentFailure if it cannot be decoded."""
        try:  # decode_fields' fast path, inlined: this runs for every message
            # bytes.decode without arguments: UTF-8, strict, no argument parsing per call; the
            # decoded parts paired by one zip (Redis sends them in pairs; zip's strict check
            # would cost more than the pairing).
            parts = map(_DECODE, raw)
            fields = dict(zip(parts, parts))  # noqa: B905
        except UnicodeDecodeError:
            pairs = iter(raw)
            fields = decode_fields(dict(zip(pairs, pairs)))  # noqa: B905  # raises, naming it
        model = self.model
        body = decode_body(fields, model, self.body_field) if model is not None else None
        # _message, inlined: one call less per message.
        msg = _NEW(_Unfrozen)
        msg.id = _DECODE(entry_id)  # ASCII digits and a dash: UTF-8 decodes them alike
        msg.stream = self.stream
        msg.group = self.group
        msg.consumer = self.consumer
        msg.fields = fields
        msg.body = body
        msg.delivery_count = delivery_count
        msg.__class__ = Message  # type: ignore[assignment]
        return msg  # type: ignore[return-value]


# --------------------------------------------------------------------------------------------
# Encoding (producers)


class EncodeError(PermanentFailure):
    """A value that cannot be encoded so that the consumer's model decodes it back."""


FieldMap = dict[str, str]
"""An entry's fields as text, the shape :func:`decode_message` reads (as UTF-8 bytes)."""


def _scalar_text(value: Any, where: str) -> str:
    """The text of one scalar, as pydantic's lax mode reads it back."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, enum.Enum):
        return _scalar_text(value.value, where)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, datetime.datetime | datetime.date | datetime.time):
        return value.isoformat()
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            raise EncodeError(
                f"{where}: bytes that are not UTF-8 cannot travel as a field"
            ) from None
    raise EncodeError(f"{where}: cannot encode a {type(value).__name__} as a field")


def _json_text(value: Any) -> str:
    if isinstance(value, BaseModel):
        return value.model_dump_json(by_alias=True)
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=_json_default)


def _json_default(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json", by_alias=True)
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, decimal.Decimal | uuid.UUID):
        return str(value)
    if isinstance(value, datetime.datetime | datetime.date | datetime.time):
        return value.isoformat()
    if isinstance(value, set | frozenset):
        return list(value)
    raise TypeError(f"cannot encode a {type(value).__name__} as JSON")


def encode_fields(value: BaseModel | Mapping[str, Any]) -> FieldMap:
    """The flat field map of ``value``: what ``decode_message`` validates back into an equal model.

    A model is serialised by pydantic (``mode="json"``, by alias); each field becomes text:
    scalars as lax mode reads them (``"42"``, ``"true"``, ISO 8601, decimals as written, enums
    by value), structured fields (nested models, lists, dicts, …) as compact JSON, and ``None``
    is left out (give optional fields a default). A mapping is encoded value by value the same
    way. Raises EncodeError for a structure in a field whose annotation is not one (the decoder
    would keep it as text: use ``body_field``), for a required field that is ``None``, and for an
    empty result (an entry needs a field).
    """
    out: FieldMap = {}
    if isinstance(value, BaseModel):
        model = type(value)
        structured = _structured_fields(model)
        dumped = value.model_dump(mode="json", by_alias=True)
        required = _required_keys(model)
        for key, item in dumped.items():
            kind = type(item)
            # mode="json" leaves str, int, float, bool, None, dict and list: the common ones first.
            if kind is str:
                out[key] = item
            elif kind is int:
                out[key] = str(item)
            elif item is None:
                if key in required:
                    raise EncodeError(
                        f"{model.__name__}.{key} is None and has no default: a flat field cannot "
                        f"say None (give it a default, or publish with body_field)"
                    )
            elif kind is dict or kind is list:
                if key not in structured:
                    raise EncodeError(
                        f"{model.__name__}.{key}: a {kind.__name__} value in a field not "
                        f"annotated as a structure would decode as text; annotate it, or publish "
                        f"with body_field"
                    )
                out[key] = _json_text(item)
            else:
                out[key] = _scalar_text(item, f"{model.__name__}.{key}")
    elif isinstance(value, Mapping):
        for key, item in value.items():
            if not isinstance(key, str):
                raise EncodeError(f"field names must be str, not {type(key).__name__}: {key!r}")
            if item is None:
                continue
            if isinstance(item, BaseModel | dict | list | tuple | set | frozenset):
                out[key] = _json_text(item)
            else:
                out[key] = _scalar_text(item, f"field {key!r}")
    else:
        raise EncodeError(f"expected a pydantic model or a mapping, not {type(value).__name__}")
    if not out:
        raise EncodeError("an entry needs at least one field that is not None")
    return out


def encode_body(value: BaseModel | Mapping[str, Any], body_field: str) -> FieldMap:
    """``{body_field: JSON}``: what ``decode_message(..., body_field=body_field)`` validates back
    into an equal model (``model_dump_json`` by alias; a mapping is dumped as JSON)."""
    if not isinstance(body_field, str) or not body_field:
        raise EncodeError(f"body_field must be a non-empty field name, not {body_field!r}")
    if isinstance(value, BaseModel):
        text = value.model_dump_json(by_alias=True)
        # pydantic writes inf and nan as null, which the decoder then refuses: say so now.
        if "null" in text and _non_finite(value.model_dump()):
            raise EncodeError(
                f"{type(value).__name__}: an infinite or NaN float cannot travel as JSON (it "
                f"would arrive as null); publish flat fields instead"
            )
        return {body_field: text}
    if isinstance(value, Mapping):
        try:
            return {body_field: _json_text(dict(value))}
        except TypeError as exc:
            raise EncodeError(f"body: {exc}") from None
    raise EncodeError(f"expected a pydantic model or a mapping, not {type(value).__name__}")


def _non_finite(obj: Any) -> bool:
    if isinstance(obj, float):
        return obj != obj or obj in (float("inf"), float("-inf"))
    if isinstance(obj, dict):
        return any(_non_finite(v) for v in obj.values())
    if isinstance(obj, list | tuple | set | frozenset):
        return any(_non_finite(v) for v in obj)
    return False


def encode(value: BaseModel | Mapping[str, Any], body_field: str | None = None) -> FieldMap:
    """:func:`encode_body` when ``body_field`` is given, else :func:`encode_fields`."""
    return encode_fields(value) if body_field is None else encode_body(value, body_field)


def encode_for(
    body: Any, *, model: BodyModel | None = None, body_field: str | None = None
) -> FieldMap:
    """:func:`encode` checked against the handler that will read it: the fields ``decode_body``
    turns back into ``body`` with ``model`` (default: the body's own class) and ``body_field``.

    ``body`` may also be a dataclass instance (a handler with ``Message[SomeDataclass]``). Raises
    EncodeError when the result would not decode to an equal body, so a test never publishes
    something its handler would read differently.
    """
    value: Any = body
    if dataclasses.is_dataclass(body) and not isinstance(body, type):
        value = TypeAdapter(type(body)).dump_python(body, mode="json")
        if model is None:
            model = TypeAdapter(type(body))
    elif model is None:
        if isinstance(body, BaseModel):
            model = type(body)
        elif isinstance(body, Mapping):
            return encode(body, body_field)
        else:
            raise EncodeError(
                f"cannot encode a {type(body).__name__} body: use a pydantic model, a dataclass "
                f"or a mapping"
            )
    fields = encode(value, body_field)
    try:
        back = decode_body(fields, model, body_field)
    except PermanentFailure as exc:
        raise EncodeError(
            f"the encoded body would not decode ({exc}); send it as JSON in one field "
            f"(body_field=...)"
        ) from None
    if back != body:
        raise EncodeError(
            f"{body!r} does not survive the trip through stream fields (it decodes as {back!r}); "
            f"send it as JSON in one field (body_field=...)"
        )
    return fields


_BodyT = typing.TypeVar("_BodyT")


class _Unfrozen(typing.Generic[_BodyT]):
    """The layout of :class:`Message` (its slots), writable: a message is built as
    one of these and then made a Message by assigning ``__class__``, which Python allows between
    classes whose instances are laid out alike (it raises TypeError otherwise).

    Message is a frozen dataclass: its ``__init__`` sets each field through
    ``object.__setattr__``, which costs more than decoding the fields, and setting its slots one
    by one through their descriptors still costs a call each. A plain attribute store into this
    twin's slots is the interpreter's fastest store; the result is the same Message (equal, same
    repr, frozen): tests/unit/test_codec.py checks it, and :data:`_MESSAGE_FIELDS`."""

    __slots__ = ("body", "consumer", "delivery_count", "fields", "group", "id", "stream")
    id: str
    stream: str
    group: str
    consumer: str
    fields: dict[str, str]
    body: _BodyT
    delivery_count: int


_NEW = object.__new__
_DECODE = bytes.decode
# Every field must be set here: tests/unit/test_codec.py compares _MESSAGE_FIELDS with Message.
_MESSAGE_FIELDS = ("id", "stream", "group", "consumer", "fields", "body", "delivery_count")
if sorted(Message.__slots__) != sorted(_Unfrozen.__slots__):  # pragma: no cover
    raise ImportError("streamworker.core.codec: _Unfrozen's slots differ from Message's")


def _message(
    entry_id: str,
    stream: str,
    group: str,
    consumer: str,
    fields: dict[str, str],
    body: Any,
    delivery_count: int,
) -> Message[Any]:
    msg = _NEW(_Unfrozen)
    msg.id = entry_id
    msg.stream = stream
    msg.group = group
    msg.consumer = consumer
    msg.fields = fields
    msg.body = body
    msg.delivery_count = delivery_count
    msg.__class__ = Message  # type: ignore[assignment]
    return msg  # type: ignore[return-value]
