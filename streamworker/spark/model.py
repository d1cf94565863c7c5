"""The ``model`` read option: decode each entry into a handler's pydantic model as extra columns
(pure; no Spark import).

The model's fields map to Spark types (str -> STRING, int -> BIGINT, float -> DOUBLE, bool ->
BOOLEAN, anything else -> STRING holding its JSON). An entry whose body fails validation keeps
its raw columns, gets nulls in the model columns and the reason in ``body_error``; nothing is
dropped.
"""

from __future__ import annotations

import importlib
import json
import types
import typing
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from streamworker.core.codec import decode_body, decode_fields
from streamworker.errors import ConfigError, PermanentFailure

BASE_COLUMNS = (
    "stream STRING, id STRING, ms BIGINT, seq BIGINT, timestamp TIMESTAMP, "
    "fields MAP<STRING, BINARY>"
)
"""The columns every read returns (``fieldsType=string`` makes the map's values STRING)."""


def base_columns(fields_type: str = "binary") -> str:
    """:data:`BASE_COLUMNS` with the fields map's value type ``fields_type``."""
    return BASE_COLUMNS.replace("BINARY>", f"{fields_type.upper()}>")


RESERVED = frozenset({"stream", "id", "ms", "seq", "timestamp", "fields", "body_error"})

_SIMPLE = {str: "STRING", int: "BIGINT", float: "DOUBLE", bool: "BOOLEAN"}
_ARROW = {"STRING": "string", "BIGINT": "int64", "DOUBLE": "float64", "BOOLEAN": "bool_"}


def load_model(target: str) -> type[BaseModel]:
    """Import ``module:Class``; ConfigError unless it is a pydantic model."""
    module_name, _, attr = target.partition(":")
    try:
        module = importlib.import_module(module_name)
        obj = getattr(module, attr)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"option model: cannot load {target!r}: {exc}") from None
    if not (isinstance(obj, type) and issubclass(obj, BaseModel)):
        raise ConfigError(f"option model: {target!r} is not a pydantic BaseModel subclass")
    return obj


def _spark_type(annotation: Any) -> tuple[str, bool]:
    """(Spark DDL type, is it JSON-encoded) for one field annotation."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(args) == 1:
            return _spark_type(args[0])
    if annotation in _SIMPLE:
        return _SIMPLE[annotation], False
    return "STRING", True


@dataclass(frozen=True, slots=True)
class ModelColumns:
    """How one model's fields become columns."""

    model: type[BaseModel]
    body_field: str | None
    names: tuple[str, ...]
    ddl: tuple[str, ...]
    as_json: tuple[bool, ...]

    @property
    def schema(self) -> str:
        """The extra columns, as Spark DDL."""
        cols = [f"`{n}` {t}" for n, t in zip(self.names, self.ddl, strict=True)]
        return ", ".join([*cols, "body_error STRING"])

    def arrow_fields(self) -> list[Any]:
        """The extra columns as pyarrow fields (``body_error`` last)."""
        import pyarrow as pa

        out = [
            pa.field(n, getattr(pa, _ARROW[t])()) for n, t in zip(self.names, self.ddl, strict=True)
        ]
        return [*out, pa.field("body_error", pa.string())]

    def values(self, fields: dict[str, bytes]) -> tuple[Any, ...]:
        """The extra column values of one entry (nulls and the reason when it does not decode)."""
        try:
            text = decode_fields({k.encode(): v for k, v in fields.items()})
            body = decode_body(text, self.model, self.body_field)
        except PermanentFailure as exc:
            return (*([None] * len(self.names)), str(exc))
        out: list[Any] = []
        for name, encode in zip(self.names, self.as_json, strict=True):
            value = getattr(body, name)
            if encode and value is not None:
                value = json.dumps(
                    value.model_dump(mode="json") if isinstance(value, BaseModel) else value,
                    default=str,
                )
            out.append(value)
        return (*out, None)


def model_columns(target: str, body_field: str | None) -> ModelColumns:
    """The columns for the ``model`` option ``target``; ConfigError on a name clash."""
    model = load_model(target)
    names, ddl, as_json = [], [], []
    for name, info in model.model_fields.items():
        if name in RESERVED:
            raise ConfigError(
                f"option model: field {name!r} of {target} clashes with a built-in column"
            )
        spark_type, encode = _spark_type(info.annotation)
        names.append(name)
        ddl.append(spark_type)
        as_json.append(encode)
    return ModelColumns(model, body_field, tuple(names), tuple(ddl), tuple(as_json))
