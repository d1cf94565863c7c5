"""Parsing the string options Spark hands a data source (pure; no Spark import).

Spark passes options as a case-insensitive map whose keys arrive lower-cased and whose values are
always strings (``.option("numPartitions", 4)`` arrives as ``"4"``). Everything here reads keys
lower-cased and converts values itself, and rejects unknown keys, so a typo fails loudly instead of
silently using a default.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from streamworker.errors import ConfigError
from streamworker.settings import validate_redis_url
from streamworker.spark.ranges import StreamId, parse_id_option

FORMAT = "streamworker_redis"
"""The name :func:`streamworker.spark.register` registers the data source under."""

_READ_KEYS = {
    "url",
    "streams",
    "startid",
    "endid",
    "numpartitions",
    "pagesize",
    "maxrecordsperbatch",
    "failondataloss",
    "startingid",
    "cursorname",
    "model",
    "bodyfield",
}
_WRITE_KEYS = {"url", "stream", "streams", "queryname", "batchid", "idmode", "stagingttls"}
# Spark itself may add these to a source's options.
_SPARK_KEYS = {"path", "checkpointlocation"}


def _lower(options: Mapping[str, Any]) -> dict[str, str]:
    # Never dict(options) and then .get("camelCase"): the keys are already lower-case.
    return {str(k).lower(): str(v) for k, v in options.items()}


def _check_keys(opts: Mapping[str, str], allowed: set[str], what: str) -> None:
    unknown = sorted(set(opts) - allowed - _SPARK_KEYS)
    if unknown:
        raise ConfigError(
            f"unknown {FORMAT} {what} option(s): {', '.join(unknown)} "
            f"(known: {', '.join(sorted(allowed))}; see docs/spark.md)"
        )


def _int(opts: Mapping[str, str], key: str, default: int | None, low: int, high: int) -> int | None:
    raw = opts.get(key)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = int(raw.strip())
    except ValueError:
        raise ConfigError(f"option {key}: expected an integer, got {raw!r}") from None
    if not low <= value <= high:
        raise ConfigError(f"option {key}: must be between {low} and {high}, got {value}")
    return value


def _bool(opts: Mapping[str, str], key: str, default: bool) -> bool:
    raw = opts.get(key)
    if raw is None:
        return default
    text = raw.strip().lower()
    if text in ("true", "1", "yes"):
        return True
    if text in ("false", "0", "no"):
        return False
    raise ConfigError(f"option {key}: expected true or false, got {raw!r}")


def _url(opts: Mapping[str, str]) -> str:
    url = opts.get("url", "").strip()
    if not url:
        raise ConfigError(f"option url is required (e.g. redis://127.0.0.1:6379/0) for {FORMAT}")
    if url.startswith("engine:"):
        # Executors are other processes: an in-process engine would be a different, empty one.
        raise ConfigError(
            "option url: engine:// URLs are in-process; Spark executors need a server "
            "(run `streamworker engine serve` and use its redis:// URL)"
        )
    validate_redis_url(url)
    return url


def _streams(opts: Mapping[str, str]) -> tuple[str, ...]:
    raw = opts.get("streams", "")
    streams = tuple(s.strip() for s in raw.split(",") if s.strip())
    if not streams:
        raise ConfigError("option streams is required: a comma-separated list of stream keys")
    if len(set(streams)) != len(streams):
        raise ConfigError(f"option streams: a stream is listed twice in {raw!r}")
    return streams


def _name(opts: Mapping[str, str], key: str) -> str | None:
    raw = opts.get(key)
    if raw is None or not raw.strip():
        return None
    name = raw.strip()
    if any(c in name for c in "\x00\r\n"):
        raise ConfigError(f"option {key}: control characters are not allowed in {raw!r}")
    return name


@dataclass(frozen=True, slots=True)
class ReadOptions:
    """The options of ``spark.read`` / ``spark.readStream`` (see docs/spark.md)."""

    url: str
    streams: tuple[str, ...]
    start_id: StreamId | None  # batch: first id to read (inclusive); None: from the start
    end_id: StreamId | None  # batch: last id to read (inclusive); None: the last entry at planning
    num_partitions: int  # per stream
    page_size: int
    max_records_per_batch: int | None
    fail_on_data_loss: bool
    starting_id: str  # streaming: "earliest", "latest" or an id (exclusive: entries above it)
    cursor_name: str | None
    model: str | None  # "module:Class" of a pydantic model to decode the fields into columns
    body_field: str | None

    @property
    def as_dict(self) -> dict[str, str]:
        """The options back as strings (what travels to executors)."""
        out = {
            "url": self.url,
            "streams": ",".join(self.streams),
            "numpartitions": str(self.num_partitions),
            "pagesize": str(self.page_size),
            "failondataloss": str(self.fail_on_data_loss).lower(),
            "startingid": self.starting_id,
        }
        for key, value in (
            ("startid", self.start_id),
            ("endid", self.end_id),
            ("maxrecordsperbatch", self.max_records_per_batch),
            ("cursorname", self.cursor_name),
            ("model", self.model),
            ("bodyfield", self.body_field),
        ):
            if value is not None:
                out[key] = str(value)
        return out


def parse_read_options(options: Mapping[str, Any]) -> ReadOptions:
    """Validate the read options; ConfigError saying what is wrong."""
    opts = _lower(options)
    _check_keys(opts, _READ_KEYS, "read")
    start = opts.get("startid", "-").strip()
    end = opts.get("endid", "+").strip()
    start_id = None if start in ("-", "0", "") else parse_id_option("startId", start)
    end_id = None if end in ("+", "") else parse_id_option("endId", end)
    if start_id is not None and end_id is not None and start_id > end_id:
        raise ConfigError(f"option startId {start_id} is above endId {end_id}")
    starting = opts.get("startingid", "earliest").strip()
    if starting in ("0", "0-0", "-"):
        starting = "earliest"
    elif starting == "$":
        starting = "latest"
    elif starting not in ("earliest", "latest"):
        starting = str(parse_id_option("startingId", starting))
    model = _name(opts, "model")
    if model is not None and ":" not in model:
        raise ConfigError(f"option model: expected module:Class, got {model!r}")
    return ReadOptions(
        url=_url(opts),
        streams=_streams(opts),
        start_id=start_id,
        end_id=end_id,
        num_partitions=_int(opts, "numpartitions", 1, 1, 10_000) or 1,
        page_size=_int(opts, "pagesize", 1_000, 1, 100_000) or 1_000,
        max_records_per_batch=_int(opts, "maxrecordsperbatch", None, 1, 10**9),
        fail_on_data_loss=_bool(opts, "failondataloss", True),
        starting_id=starting,
        cursor_name=_name(opts, "cursorname"),
        model=model,
        body_field=_name(opts, "bodyfield"),
    )


ID_MODES = ("auto", "explicit")


@dataclass(frozen=True, slots=True)
class WriteOptions:
    """The options of ``df.write`` / ``df.writeStream`` (see docs/spark.md)."""

    url: str
    stream: str | None  # the target stream; None: each row's ``stream`` column
    query_name: str | None  # the exactly-once marker's name (required for streaming writes)
    batch_id: int | None  # batch writes: a re-run with the same id adds nothing
    id_mode: str  # "auto": XADD *; "explicit": XADD with the row's id column
    staging_ttl_s: int


def parse_write_options(options: Mapping[str, Any], *, streaming: bool) -> WriteOptions:
    """Validate the write options; ConfigError saying what is wrong."""
    opts = _lower(options)
    _check_keys(opts, _WRITE_KEYS, "write")
    stream = _name(opts, "stream") or _name(opts, "streams")
    if stream is not None and "," in stream:
        raise ConfigError(f"option stream: one target stream, got {stream!r}")
    query = _name(opts, "queryname")
    if streaming and query is None:
        raise ConfigError(
            "option queryName is required for writeStream: the exactly-once marker is kept "
            "per (target stream, queryName), and must stay the same across restarts"
        )
    batch_id = _int(opts, "batchid", None, 0, 2**62)
    if batch_id is not None and query is None:
        raise ConfigError("option batchId needs option queryName (the marker is per query)")
    id_mode = opts.get("idmode", "auto").strip().lower()
    if id_mode not in ID_MODES:
        raise ConfigError(f"option idMode: expected one of {', '.join(ID_MODES)}, got {id_mode!r}")
    return WriteOptions(
        url=_url(opts),
        stream=stream,
        query_name=query,
        batch_id=batch_id,
        id_mode=id_mode,
        staging_ttl_s=_int(opts, "stagingttls", 86_400, 60, 30 * 86_400) or 86_400,
    )
