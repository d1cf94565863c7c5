"""Every Redis key name streamworker derives from a user's stream name.

Keys that one Lua script touches must live in one Redis Cluster slot, so derived keys reuse the
stream's hash tag: a stream ``orders`` becomes ``{orders}`` inside derived names, and a stream that
already carries a tag (``{shop}:orders``) keeps it.
"""

from __future__ import annotations


def hash_tag(key: str) -> str | None:
    """The hash tag Redis Cluster would hash for ``key`` (the text inside the first ``{…}``), if any."""
    start = key.find("{")
    if start == -1:
        return None
    end = key.find("}", start + 1)
    if end == -1 or end == start + 1:
        return None
    return key[start + 1 : end]


def dead_letter_stream(stream: str) -> str:
    """The default dead-letter stream of ``stream``: ``{S}:dlq``, or ``S:dlq`` when S has a tag."""
    if hash_tag(stream) is not None:
        return f"{stream}:dlq"
    return f"{{{stream}}}:dlq"
