"""Parsing the string options Spark hands a data source (pure; no Spark import).

Spark passes options as a case-insensitive map whose keys arrive lower-cased and whose values are
always strings (``.option("numPartitions", 4)`` arrives as ``"4"``). Everything here reads keys
lower-cased and converts values itself, and rejects unknown keys, so a typo fails loudly instead of
silently using a default.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from streamworker.errors import ConfigError
from streamworker.io.redisio import is_cluster_url, validate_redis_url
from streamworker.producing.partitions import MAX_PARTITIONS, check_partitioned_name
from streamworker.spark.ranges import MAX_PART, StreamId, parse_id_option

FORMAT = "streamworker_redis"
"""The name :func:`streamworker.spark.register` registers the data source under."""

DEFAULT_PAGE_SIZE = 2_000
"""``COUNT`` of each XRANGE when ``pageSize`` is not set, chosen by measurement (see
benchmarks/README.md, "Spark batch reads"): below it the per-page costs show, above it the
throughput stays flat while each command holds Redis longer and a task needs more memory."""

# The options as documented (camelCase); Spark hands them over lower-cased.
_READ_NAMES = (
    "url",
    "streams",
    "startId",
    "endId",
    "startTime",
    "endTime",
    "numPartitions",
    "pageSize",
    "fieldsType",
    "maxRecordsPerBatch",
    "failOnDataLoss",
    "startingId",
    "cursorName",
    "model",
    "bodyField",
)
_WRITE_NAMES = (
    "url",
    "stream",
    "streams",
    "partitions",
    "keyColumn",
    "queryName",
    "batchId",
    "idMode",
    "waitReplicas",
    "waitTimeoutMs",
    "stagingTtlS",
)
_DISPLAY = {n.lower(): n for n in (*_READ_NAMES, *_WRITE_NAMES)}
# Spark itself may add these to a source's options.
_SPARK_KEYS = {"path", "checkpointlocation"}

FIELDS_TYPES = ("binary", "string")

# Characters that make an entry of option streams a glob (Redis SCAN MATCH syntax).
_GLOB = re.compile(r"[*?\[]")


def is_glob(name: str) -> bool:
    """True when ``name`` (an entry of option ``streams``) is a glob pattern."""
    return _GLOB.search(name) is not None


def shown(key: str) -> str:
    """An option key as the docs spell it (``numpartitions`` -> ``numPartitions``)."""
    return _DISPLAY.get(key, key)


def _lower(options: Mapping[str, Any]) -> dict[str, str]:
    # Never dict(options) and then .get("camelCase"): the keys are already lower-case.
    return {str(k).lower(): str(v) for k, v in options.items()}


def _check_keys(opts: Mapping[str, str], allowed: tuple[str, ...], what: str) -> None:
    known = {n.lower() for n in allowed}
    unknown = sorted(set(opts) - known - _SPARK_KEYS)
    if unknown:
        raise ConfigError(
            f"unknown {FORMAT} {what} option(s): {', '.join(unknown)} "
            f"(known: {', '.join(allowed)}; see docs/spark.md)"
        )


def _int(opts: Mapping[str, str], key: str, default: int | None, low: int, high: int) -> int | None:
    raw = opts.get(key)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = int(raw.strip())
    except ValueError:
        raise ConfigError(f"option {shown(key)}: expected an integer, got {raw!r}") from None
    if not low <= value <= high:
        raise ConfigError(f"option {shown(key)}: must be between {low} and {high}, got {value}")
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
    raise ConfigError(f"option {shown(key)}: expected true or false, got {raw!r}")


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
        raise ConfigError(
            "option streams is required: a comma-separated list of stream keys, partitioned "
            "streams' names or globs"
        )
    if len(set(streams)) != len(streams):
        raise ConfigError(f"option streams: a stream is listed twice in {raw!r}")
    for name in streams:
        if any(c in name for c in "\x00\r\n"):
            raise ConfigError(f"option streams: control characters are not allowed in {name!r}")
    return streams


def _time(opts: Mapping[str, str], key: str) -> int | None:
    """An ISO 8601 timestamp option as epoch ms (a time without zone is UTC)."""
    raw = opts.get(key)
    if raw is None or not raw.strip():
        return None
    text = raw.strip()
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise ConfigError(
            f"option {shown(key)}: expected an ISO 8601 time like '2026-11-22T00:00:00Z', "
            f"got {raw!r}"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    ms = _exact_ms(moment)
    if ms < 0:
        raise ConfigError(f"option {shown(key)}: {raw!r} is before 1970 (stream ids start there)")
    return ms


def _exact_ms(moment: datetime) -> int:
    # Whole ms below the instant, computed without float rounding.
    delta = moment - datetime(1970, 1, 1, tzinfo=UTC)
    return (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000


def _name(opts: Mapping[str, str], key: str) -> str | None:
    raw = opts.get(key)
    if raw is None or not raw.strip():
        return None
    name = raw.strip()
    if any(c in name for c in "\x00\r\n"):
        raise ConfigError(f"option {shown(key)}: control characters are not allowed in {raw!r}")
    return name


@dataclass(frozen=True, slots=True)
class ReadOptions:
    """The options of ``spark.read`` / ``spark.readStream`` (see docs/spark.md)."""

    url: str
    streams: tuple[str, ...]  # stream keys, partitioned streams' names or globs
    start_id: StreamId | None  # batch: first id to read (inclusive); None: from the start
    end_id: StreamId | None  # batch: last id to read (inclusive); None: the last entry at planning
    num_partitions: int | None  # per stream; None: from the session's default parallelism
    page_size: int
    max_records_per_batch: int | None
    fail_on_data_loss: bool
    starting_id: str  # streaming: "earliest", "latest" or an id (exclusive: entries above it)
    cursor_name: str | None
    model: str | None  # "module:Class" of a pydantic model to decode the fields into columns
    body_field: str | None
    fields_type: str = "binary"  # the values of the fields map: "binary" or "string"

    @property
    def as_dict(self) -> dict[str, str]:
        """The options back as strings (what travels to executors)."""
        out = {
            "url": self.url,
            "streams": ",".join(self.streams),
            "pagesize": str(self.page_size),
            "failondataloss": str(self.fail_on_data_loss).lower(),
            "startingid": self.starting_id,
            "fieldstype": self.fields_type,
        }
        for key, value in (
            ("startid", self.start_id),
            ("endid", self.end_id),
            ("numpartitions", self.num_partitions),
            ("maxrecordsperbatch", self.max_records_per_batch),
            ("cursorname", self.cursor_name),
            ("model", self.model),
            ("bodyfield", self.body_field),
        ):
            if value is not None:
                out[key] = str(value)
        return out


def parse_read_options(options: Mapping[str, Any]) -> ReadOptions:
    """Validate the read options; ConfigError saying what is wrong (one line, naming the
    option as the docs spell it)."""
    opts = _lower(options)
    _check_keys(opts, _READ_NAMES, "read")
    start = opts.get("startid", "-").strip()
    end = opts.get("endid", "+").strip()
    start_id = None if start in ("-", "0", "") else parse_id_option("startId", start)
    end_id = None if end in ("+", "") else parse_id_option("endId", end)
    # startTime (inclusive) and endTime (exclusive) narrow the id range to those milliseconds.
    start_ms, end_ms = _time(opts, "starttime"), _time(opts, "endtime")
    if start_ms is not None:
        start_id = max(start_id or StreamId(0, 0), StreamId(start_ms, 0))
    if end_ms is not None:
        if end_ms == 0:
            raise ConfigError("option endTime: must be after 1970-01-01T00:00:00Z")
        end_id = min(end_id or StreamId(MAX_PART, MAX_PART), StreamId(end_ms - 1, MAX_PART))
    if start_id is not None and end_id is not None and start_id > end_id:
        raise ConfigError(
            f"option startId/startTime ({start_id}) is above endId/endTime ({end_id}): "
            f"the range is empty"
        )
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
    fields_type = opts.get("fieldstype", "binary").strip().lower()
    if fields_type not in FIELDS_TYPES:
        raise ConfigError(
            f"option fieldsType: expected one of {', '.join(FIELDS_TYPES)}, got {fields_type!r}"
        )
    return ReadOptions(
        url=_url(opts),
        streams=_streams(opts),
        start_id=start_id,
        end_id=end_id,
        num_partitions=_int(opts, "numpartitions", None, 1, 10_000),
        page_size=_int(opts, "pagesize", DEFAULT_PAGE_SIZE, 1, 100_000) or DEFAULT_PAGE_SIZE,
        max_records_per_batch=_int(opts, "maxrecordsperbatch", None, 1, 10**9),
        fail_on_data_loss=_bool(opts, "failondataloss", True),
        starting_id=starting,
        cursor_name=_name(opts, "cursorname"),
        model=model,
        body_field=_name(opts, "bodyfield"),
        fields_type=fields_type,
    )


ID_MODES = ("auto", "explicit")


@dataclass(frozen=True, slots=True)
class WriteOptions:
    """The options of ``df.write`` / ``df.writeStream`` (see docs/spark.md)."""

    url: str
    stream: str | None  # the target stream (or partitioned stream); None: each row's column
    query_name: str | None  # the exactly-once marker's name (required for streaming writes)
    batch_id: int | None  # batch writes: a re-run with the same id adds nothing
    id_mode: str  # "auto": XADD *; "explicit": XADD with the row's id column
    staging_ttl_s: int
    partitions: int | None = None  # stream is a partitioned stream of this many partitions
    key_column: str = "key"  # with partitions: the column whose value routes a row
    # Commit a batch only once this many replicas have it (0: do not wait), waiting at most
    # wait_timeout_ms: Spark must never checkpoint a batch a failover could take back.
    wait_replicas: int = 0
    wait_timeout_ms: int = 1_000


def parse_write_options(options: Mapping[str, Any], *, streaming: bool) -> WriteOptions:
    """Validate the write options; ConfigError saying what is wrong (one line)."""
    opts = _lower(options)
    _check_keys(opts, _WRITE_NAMES, "write")
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
    partitions = _int(opts, "partitions", None, 1, MAX_PARTITIONS)
    if partitions is not None:
        if stream is None:
            raise ConfigError("option partitions needs option stream (the partitioned stream)")
        check_partitioned_name(stream, partitions)
        if id_mode == "explicit":
            raise ConfigError(
                "option idMode=explicit cannot be combined with partitions (ids are per partition)"
            )
    wait_replicas = _int(opts, "waitreplicas", 0, 0, 1_000) or 0
    if wait_replicas and is_cluster_url(_url(opts)):
        raise ConfigError("option waitReplicas is not available on Redis Cluster yet")
    return WriteOptions(
        url=_url(opts),
        stream=stream,
        query_name=query,
        batch_id=batch_id,
        id_mode=id_mode,
        staging_ttl_s=_int(opts, "stagingttls", 86_400, 60, 30 * 86_400) or 86_400,
        partitions=partitions,
        key_column=_name(opts, "keycolumn") or "key",
        wait_replicas=wait_replicas,
        wait_timeout_ms=_int(opts, "waittimeoutms", 1_000, 1, 3_600_000) or 1_000,
    )
