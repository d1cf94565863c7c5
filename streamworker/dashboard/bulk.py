"""Bulk dead-letter work: a filter (error text, handler, age) and background jobs that replay or
purge the dead letters it matches, with progress, a stop and a resume.

A job walks the dead-letter stream oldest first with an exclusive cursor. Each replay is the
atomic ``replay_dead_letter.lua`` (XADD to the original stream and XDEL from the dead letters in
one script), each purge an XDEL of a page's matches: a job stopped (or a dashboard killed) at any
point has lost and duplicated nothing, and running it again, or resuming from its cursor, finishes
the set, as ``streamworker dlq replay --all`` does. The age bounds are turned into an id range
when the job is created, so a resumed job works on the set that was confirmed.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import redis.asyncio as aioredis
import redis.exceptions as rex
import structlog

from streamworker.dashboard.actions import PURGE_DEAD_LETTERS
from streamworker.dashboard.data import (
    DeadLetterRow,
    Page,
    clamp_count,
    dead_letter_row,
    now_ms,
    text,
)
from streamworker.errors import StreamworkerError
from streamworker.io.redisio import CONNECTION_ERRORS, LuaScript
from streamworker.ops import dead_letters

_REPLAY = LuaScript("replay_dead_letter")
_SCAN_PAGE = 1000  # entries per XRANGE of the counting scans
JOB_PAGE = 200
MAX_JOBS = 50
# A filtered page reads at most this many dead letters looking for matches.
MAX_SCAN_PER_PAGE = 5000
# The confirmation count reads at most this many; beyond it the page says "at least".
MAX_COUNT_SCAN = 200_000
# The dead-letter page's match count and reasons read at most this many of the newest.
MAX_SUMMARY_SCAN = 10_000
# The new ids of a job's replays, kept to tell which came back as dead letters (~100 bytes each).
MAX_TRACKED_REPLAYS = 100_000

_REDIS_ERRORS: tuple[type[BaseException], ...] = (rex.RedisError, *CONNECTION_ERRORS)


@dataclass(frozen=True, slots=True)
class DeadLetterFilter:
    """Which dead letters: error text containing ``error`` (case-insensitive), handler equal to
    ``handler``, dead-lettered at least ``older_than_s`` and at most ``newer_than_s`` seconds ago
    (by the dead letter's id). Empty parts match everything."""

    error: str = ""
    handler: str = ""
    older_than_s: int | None = None
    newer_than_s: int | None = None

    @staticmethod
    def from_params(params: Any) -> DeadLetterFilter:
        """From query or form parameters ``error``, ``handler``, ``older_than_s``,
        ``newer_than_s``; a bad number raises ValueError with the reason."""

        def seconds(name: str) -> int | None:
            raw = (params.get(name) or "").strip()
            if not raw:
                return None
            try:
                value = int(raw)
            except ValueError:
                raise ValueError(f"{name} must be a whole number of seconds, not {raw!r}") from None
            if value < 0:
                raise ValueError(f"{name} must be 0 or more")
            return value

        return DeadLetterFilter(
            error=(params.get("error") or "").strip(),
            handler=(params.get("handler") or "").strip(),
            older_than_s=seconds("older_than_s"),
            newer_than_s=seconds("newer_than_s"),
        )

    @property
    def active(self) -> bool:
        return bool(self.error or self.handler) or (
            self.older_than_s is not None or self.newer_than_s is not None
        )

    def params(self) -> dict[str, str]:
        """The filter as parameters (for links and forms)."""
        out = {"error": self.error, "handler": self.handler}
        if self.older_than_s is not None:
            out["older_than_s"] = str(self.older_than_s)
        if self.newer_than_s is not None:
            out["newer_than_s"] = str(self.newer_than_s)
        return {k: v for k, v in out.items() if v}

    def id_range(self, at_ms: int | None = None) -> tuple[str, str]:
        """The (min, max) XRANGE bounds the age limits allow, as of ``at_ms``."""
        now = now_ms() if at_ms is None else at_ms
        low = "-" if self.newer_than_s is None else str(max(0, now - self.newer_than_s * 1000))
        high = "+" if self.older_than_s is None else f"{max(0, now - self.older_than_s * 1000)}"
        return low, high

    def matches(self, provenance: dict[str, str]) -> bool:
        """Whether a dead letter with this provenance passes the text parts of the filter. An
        entry without the provenance (no ``dlq_stream``: not a dead letter) never matches."""
        if "dlq_stream" not in provenance:
            return False
        if self.error and self.error.lower() not in provenance.get("dlq_error", "").lower():
            return False
        return not self.handler or provenance.get("dlq_handler", "") == self.handler

    def describe(self) -> str:
        parts = []
        if self.error:
            parts.append(f"error contains {self.error!r}")
        if self.handler:
            parts.append(f"handler is {self.handler!r}")
        if self.older_than_s is not None:
            parts.append(f"older than {self.older_than_s} s")
        if self.newer_than_s is not None:
            parts.append(f"newer than {self.newer_than_s} s")
        return ", ".join(parts) or "all dead letters"


def _provenance(raw: Any) -> tuple[dict[str, str], bool]:
    split = dead_letters.split_dead_letter("0-0", raw)
    return split.provenance, bool(split.fields)


async def filtered_page(
    client: aioredis.Redis,
    dlq: str,
    flt: DeadLetterFilter,
    *,
    before: str | None = None,
    count: int | None = None,
) -> tuple[Page[DeadLetterRow], int]:
    """Matching dead letters below ``before``, newest first; and how many were read. Reads at
    most MAX_SCAN_PER_PAGE entries: a page can hold fewer matches than asked while a next page
    (its cursor) goes on."""
    size = clamp_count(count)
    low, high = flt.id_range()
    cursor = "(" + before if before else high
    items: list[DeadLetterRow] = []
    scanned = 0
    next_cursor: str | None = None
    while scanned < MAX_SCAN_PER_PAGE:
        rows: Any = await client.xrevrange(dlq, max=cursor, min=low, count=JOB_PAGE)
        if not rows:
            break
        for entry_id, raw in rows:
            scanned += 1
            prov, _ = _provenance(raw)
            if flt.matches(prov):
                if len(items) == size:
                    return Page(items, items[-1].id, size), scanned
                items.append(dead_letter_row(entry_id, raw))
        last = text(rows[-1][0])
        cursor = "(" + last
        if len(rows) < JOB_PAGE:
            break
        next_cursor = last
    else:
        return Page(items, next_cursor, size), scanned
    return Page(items, None, size), scanned


@dataclass
class _Scan:
    """Reads the entries of ``key`` from ``low`` to ``high`` (XRANGE bounds) in pages of
    ``_SCAN_PAGE``, oldest first (newest first with ``newest_first``), until all are read or at
    least ``limit`` have been. After the pages: ``read``, how many; ``complete``, whether that
    was all of them."""

    client: aioredis.Redis
    key: str
    low: str
    high: str
    limit: int
    newest_first: bool = False
    read: int = field(default=0, init=False)
    complete: bool = field(default=False, init=False)

    async def pages(self) -> AsyncIterator[Any]:
        """Each page: a list of (entry id, fields) as redis-py returns them."""
        low, high = self.low, self.high
        while True:
            if self.newest_first:
                rows: Any = await self.client.xrevrange(self.key, high, low, count=_SCAN_PAGE)
            else:
                rows = await self.client.xrange(self.key, low, high, count=_SCAN_PAGE)
            self.read += len(rows)
            yield rows
            if len(rows) < _SCAN_PAGE:
                self.complete = True
                return
            if self.read >= self.limit:
                return
            # The next page starts after (before, newest first) the last entry read.
            if self.newest_first:
                high = "(" + text(rows[-1][0])
            else:
                low = "(" + text(rows[-1][0])


async def count_matching(
    client: aioredis.Redis, dlq: str, flt: DeadLetterFilter, limit: int = MAX_COUNT_SCAN
) -> tuple[int, bool]:
    """How many dead letters match; and whether the count stopped at ``limit`` entries read."""
    low, high = flt.id_range()
    scan = _Scan(client, dlq, low, high, limit)
    matched = 0
    async for rows in scan.pages():
        for _, raw in rows:
            if flt.matches(_provenance(raw)[0]):
                matched += 1
    return matched, not scan.complete


@dataclass(frozen=True, slots=True)
class DeadLetterSummary:
    """The newest dead letters of a stream at a glance: how many match a filter, and how many
    there are per reason (the error text), most frequent first. ``looked_at`` is how many were
    read; ``complete`` whether that was all of them (else the figures are of the newest)."""

    matched: int
    reasons: list[tuple[str, int]]
    looked_at: int
    complete: bool


async def summarize(
    client: aioredis.Redis,
    dlq: str,
    flt: DeadLetterFilter,
    *,
    limit: int = MAX_SUMMARY_SCAN,
    top: int = 10,
) -> DeadLetterSummary:
    """Read the newest ``limit`` entries of ``dlq`` (newest first, pages of 1000): count those
    ``flt`` matches and tally the reasons of every dead letter read."""
    low, high = flt.id_range()
    reasons: dict[str, int] = {}
    matched = 0
    scan = _Scan(client, dlq, "-", "+", limit, newest_first=True)
    async for rows in scan.pages():
        for entry_id, raw in rows:
            prov, _ = _provenance(raw)
            if "dlq_stream" not in prov:
                continue
            reason = prov.get("dlq_error", "")
            reasons[reason] = reasons.get(reason, 0) + 1
            if _in_range(text(entry_id), low, high) and flt.matches(prov):
                matched += 1
    ranked = sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0]))[:top]
    return DeadLetterSummary(matched, ranked, scan.read, scan.complete)


def _id_key(entry_id: str) -> tuple[int, int]:
    ms, _, seq = entry_id.partition("-")
    return int(ms or 0), int(seq or 0)


def _in_range(entry_id: str, low: str, high: str) -> bool:
    """Whether ``entry_id`` is within XRANGE bounds (``-``/``+`` or a millisecond time)."""
    key = _id_key(entry_id)
    if low != "-" and key < (int(low), 0):
        return False
    return high == "+" or key <= (int(high), 2**64 - 1)


async def dead_lettered_again(client: aioredis.Redis, job: BulkJob) -> tuple[int, bool]:
    """How many of ``job``'s replays came back as dead letters (a dead letter added since the
    job started whose ``dlq_id`` is one of the ids the job replayed to); and whether that is
    exact (False once more than MAX_SUMMARY_SCAN dead letters were added since)."""
    if not job.replayed_ids:
        return 0, True
    again = 0
    scan = _Scan(client, job.dlq, str(job.at_ms), "+", MAX_SUMMARY_SCAN)
    async for rows in scan.pages():
        for _, raw in rows:
            if _provenance(raw)[0].get("dlq_id") in job.replayed_ids:
                again += 1
    return again, scan.complete


RUNNING, STOPPING, STOPPED, FINISHED, FAILED = (
    "running",
    "stopping",
    "stopped",
    "finished",
    "failed",
)


@dataclass
class BulkJob:
    """A replay or purge of the dead letters of ``dlq`` that ``flt`` matches, as of ``at_ms``.

    ``cursor`` is the id of the last dead letter looked at: a resumed job goes on after it."""

    id: int
    kind: str  # "replay" | "purge"
    dlq: str
    flt: DeadLetterFilter
    expected: int
    at_ms: int
    low: str
    high: str
    started_by: str | None
    cursor: str | None = None
    scanned: int = 0
    matched: int = 0
    done: int = 0
    skipped: int = 0
    reasons: list[str] = field(default_factory=list)
    state: str = RUNNING
    error: str | None = None
    started_at: float = field(default_factory=time.time)
    ended_at: float | None = None
    task: asyncio.Task[None] | None = field(default=None, repr=False)
    replayed_ids: set[str] = field(default_factory=set, repr=False)

    @property
    def percent(self) -> int:
        """Progress against the confirmed count (100 once finished)."""
        if self.state == FINISHED:
            return 100
        if self.expected <= 0:
            return 0
        return min(99, (self.done + self.skipped) * 100 // self.expected)

    @property
    def active(self) -> bool:
        return self.state in (RUNNING, STOPPING)


class BulkJobs:
    """The dashboard's jobs, newest last, at most MAX_JOBS kept (finished ones dropped first).
    One active job per dead-letter stream; ``page_pause_s`` between pages of work. Use from
    one event loop."""

    def __init__(self, client: Callable[[], aioredis.Redis], page_pause_s: float = 0.0) -> None:
        self._client = client
        # A pause between pages spreads a large job's load on Redis out over time.
        self.page_pause_s = page_pause_s
        self._jobs: OrderedDict[int, BulkJob] = OrderedDict()
        self._ids = itertools.count(1)
        self.log = structlog.get_logger("streamworker.dashboard")

    def all(self) -> list[BulkJob]:
        return list(reversed(self._jobs.values()))

    def get(self, job_id: int) -> BulkJob | None:
        return self._jobs.get(job_id)

    def start(
        self, kind: str, dlq: str, flt: DeadLetterFilter, expected: int, by: str | None
    ) -> BulkJob:
        """Create and start a job; StreamworkerError when one is already running on ``dlq``."""
        if kind not in ("replay", "purge"):
            raise StreamworkerError(f"no bulk action {kind!r}")
        for other in self._jobs.values():
            if other.dlq == dlq and other.active:
                raise StreamworkerError(
                    f"job {other.id} is already working on {dlq}: stop it or wait for it"
                )
        at = now_ms()
        low, high = flt.id_range(at)
        job = BulkJob(next(self._ids), kind, dlq, flt, expected, at, low, high, by)
        self._jobs[job.id] = job
        while len(self._jobs) > MAX_JOBS:
            oldest = next((j for j in self._jobs.values() if not j.active), None)
            if oldest is None:
                break
            del self._jobs[oldest.id]
        self._run(job)
        return job

    def stop(self, job: BulkJob) -> None:
        """Ask a running job to stop after the dead letter it is on."""
        if job.state == RUNNING:
            job.state = STOPPING

    def resume(self, job: BulkJob) -> None:
        """Go on with a stopped or failed job from its cursor."""
        if job.active:
            raise StreamworkerError(f"job {job.id} is still running")
        if job.state == FINISHED:
            raise StreamworkerError(f"job {job.id} has finished")
        for other in self._jobs.values():
            if other.dlq == job.dlq and other.active:
                raise StreamworkerError(f"job {other.id} is already working on {job.dlq}")
        job.state, job.error, job.ended_at = RUNNING, None, None
        self._run(job)

    async def close(self) -> None:
        """Stop every job (they can be resumed by running them again)."""
        for job in self._jobs.values():
            if job.task is not None and not job.task.done():
                job.task.cancel()
                try:
                    await job.task
                except asyncio.CancelledError:
                    pass

    def _run(self, job: BulkJob) -> None:
        job.task = asyncio.get_running_loop().create_task(self._work(job))

    async def _work(self, job: BulkJob) -> None:
        self.log.info(
            "dashboard_bulk_started",
            job=job.id,
            kind=job.kind,
            dlq=job.dlq,
            filter=job.flt.describe(),
            expected=job.expected,
            cursor=job.cursor,
            client=job.started_by,
        )
        try:
            await self._walk(job)
        except asyncio.CancelledError:
            job.state, job.ended_at = STOPPED, time.time()
            raise
        except _REDIS_ERRORS as exc:
            job.state, job.error, job.ended_at = FAILED, f"{type(exc).__name__}: {exc}", time.time()
            self.log.warning("dashboard_bulk_failed", job=job.id, error=job.error, done=job.done)
            return
        job.ended_at = time.time()
        job.state = STOPPED if job.state == STOPPING else FINISHED
        self.log.info(
            "dashboard_bulk_" + job.state,
            job=job.id,
            kind=job.kind,
            dlq=job.dlq,
            scanned=job.scanned,
            matched=job.matched,
            done=job.done,
            skipped=job.skipped,
        )

    async def _walk(self, job: BulkJob) -> None:
        client = self._client()
        while job.state == RUNNING:
            low = "(" + job.cursor if job.cursor else job.low
            rows: Any = await client.xrange(job.dlq, min=low, max=job.high, count=JOB_PAGE)
            if not rows:
                return
            purge: list[str] = []
            looked = job.cursor
            for entry_id, raw in rows:
                if job.state != RUNNING:
                    break
                eid = text(entry_id)
                job.scanned += 1
                prov, has_fields = _provenance(raw)
                if "dlq_stream" not in prov:
                    # A live entry in a stream named as dead letters: never replayed or purged.
                    self._skip(job, eid, "not a streamworker dead letter")
                elif job.flt.matches(prov):
                    job.matched += 1
                    if job.kind == "purge":
                        purge.append(eid)
                    else:
                        await self._replay(client, job, eid, prov, has_fields)
                looked = eid
            if purge:
                # The script checks the provenance again, in the same step as the XDEL.
                removed, refused, gone = await PURGE_DEAD_LETTERS(client, [job.dlq], purge)
                job.done += int(removed)
                job.skipped += int(refused) + int(gone)
            # The cursor moves past a page only once its work is done.
            job.cursor = looked
            if len(rows) < JOB_PAGE:
                return
            await asyncio.sleep(self.page_pause_s)  # let pages be served between pages of work

    async def _replay(
        self,
        client: aioredis.Redis,
        job: BulkJob,
        eid: str,
        prov: dict[str, str],
        has_fields: bool,
    ) -> None:
        target = prov["dlq_stream"]
        if not has_fields:
            self._skip(job, eid, "kept no original fields")
            return
        try:
            new_id = await _REPLAY(client, [job.dlq, target], [eid])
        except rex.ResponseError as exc:
            self._skip(job, eid, str(exc))
            return
        if new_id == 0:
            self._skip(job, eid, "already gone")
            return
        job.done += 1
        if len(job.replayed_ids) < MAX_TRACKED_REPLAYS:
            job.replayed_ids.add(text(new_id))

    @staticmethod
    def _skip(job: BulkJob, eid: str, reason: str) -> None:
        job.skipped += 1
        if len(job.reasons) < 20:
            job.reasons.append(f"{eid}: {reason}")
