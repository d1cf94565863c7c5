"""A stream's idempotent-production state (Redis 8.6's IDMP map): pure data, no I/O.

Per producer (``pid``), the idempotent IDs (``iid``) of its recent XADDs with the entry ID each
one produced and when (Unix ms), oldest first. An iid is forgotten once ``duration_s`` has
passed since it was added, or when the producer holds ``maxsize`` newer ones
(https://redis.io/docs/latest/develop/data-types/streams/idempotency/: "IDMP-MAXSIZE is
stronger than IDMP-DURATION"). The map does not follow the entries: an iid whose entry was
deleted still answers with that entry's ID until it expires.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Sequence
from typing import Final

__all__ = ["DEFAULT_DURATION_S", "DEFAULT_MAXSIZE", "IdmpState", "content_iid"]

DEFAULT_DURATION_S: Final = 100
DEFAULT_MAXSIZE: Final = 100


def content_iid(fields: Sequence[bytes]) -> bytes:
    """IDMPAUTO's iid: a digest of the field-value pairs (length-prefixed, so that no two
    different entries share an encoding); the same content gives the same iid."""
    h = hashlib.blake2b(digest_size=16)
    for part in fields:
        h.update(len(part).to_bytes(8, "little"))
        h.update(part)
    return h.digest()


class IdmpState:
    """The IDMP map of one stream and its settings and counters.

    ``producers``: pid -> (iid -> (entry ID, added at ms)), oldest first. ``iids_added`` and
    ``iids_duplicates`` are lifetime counts (XINFO STREAM). Not thread-safe (the engine lock
    guards it).
    """

    __slots__ = ("duration_s", "iids_added", "iids_duplicates", "maxsize", "producers")

    def __init__(
        self, duration_s: int = DEFAULT_DURATION_S, maxsize: int = DEFAULT_MAXSIZE
    ) -> None:
        self.duration_s = duration_s
        self.maxsize = maxsize
        self.producers: dict[bytes, OrderedDict[bytes, tuple[int, int]]] = {}
        self.iids_added = 0
        self.iids_duplicates = 0

    def expire(self, now_ms: int) -> None:
        """Forget the iids added ``duration_s`` or more before ``now_ms``."""
        horizon = now_ms - self.duration_s * 1000
        for pid in list(self.producers):
            iids = self.producers[pid]
            while iids:
                first = next(iter(iids.values()))
                if first[1] > horizon:
                    break
                iids.popitem(last=False)
            if not iids:
                del self.producers[pid]

    def lookup(self, pid: bytes, iid: bytes) -> int | None:
        """The entry ID ``(pid, iid)`` produced, if it is still remembered."""
        iids = self.producers.get(pid)
        if iids is None:
            return None
        hit = iids.get(iid)
        return None if hit is None else hit[0]

    def record(self, pid: bytes, iid: bytes, sid: int, now_ms: int) -> None:
        """Remember that ``(pid, iid)`` produced entry ``sid`` at ``now_ms``; the producer's
        oldest iids go beyond ``maxsize``."""
        iids = self.producers.setdefault(pid, OrderedDict())
        iids[iid] = (sid, now_ms)
        while len(iids) > self.maxsize:
            iids.popitem(last=False)
        self.iids_added += 1

    def configure(self, duration_s: int | None, maxsize: int | None) -> None:
        """XCFGSET: new settings; a change of either forgets every iid (the idempotency page:
        "Executing XCFGSET with different IDMP-DURATION or IDMP-MAXSIZE values than the
        current values for a particular key clears its IDMP map")."""
        new_duration = self.duration_s if duration_s is None else duration_s
        new_maxsize = self.maxsize if maxsize is None else maxsize
        if (new_duration, new_maxsize) != (self.duration_s, self.maxsize):
            self.producers.clear()
        self.duration_s = new_duration
        self.maxsize = new_maxsize

    @property
    def iids_tracked(self) -> int:
        """How many iids are remembered, over all producers."""
        return sum(len(iids) for iids in self.producers.values())

    def copy(self) -> IdmpState:
        """A deep copy (COPY)."""
        dup = IdmpState(self.duration_s, self.maxsize)
        dup.producers = {pid: OrderedDict(iids) for pid, iids in self.producers.items()}
        dup.iids_added = self.iids_added
        dup.iids_duplicates = self.iids_duplicates
        return dup
