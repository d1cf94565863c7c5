"""Fixed command scripts run side by side on redis-server and the engine.

A script is a list of lines, one command each, split like a shell line (``shlex``) with
``\\xNN`` escapes for binary bytes. :func:`mismatches` runs it on one connection of each
backend (0 = RESP2, 1 = RESP3) and returns the lines whose replies differ after the
differential suite's clock masking.
"""

from __future__ import annotations

import codecs
import shlex
from collections.abc import Sequence

from streamworker.engine import Engine
from streamworker.engine.protocol import encode
from tests.engine.differential.backends import EngineBackend, RedisBackend
from tests.engine.differential.normalize import normalize
from tests.engine.differential.resp import RawConnection, pretty


def argv_of(line: str) -> list[bytes]:
    """The words of ``line`` as bytes, ``\\xNN`` escapes decoded."""
    return [codecs.escape_decode(w.encode())[0] for w in shlex.split(line, posix=False)]


def _unquote(word: bytes) -> bytes:
    if len(word) >= 2 and word[:1] == word[-1:] and word[:1] in (b'"', b"'"):
        return word[1:-1]
    return word


def mismatches(
    real: RedisBackend, engine: EngineBackend, script: Sequence[str], conn: int
) -> list[str]:
    """Run ``script`` on both (after a reset) on connection ``conn``; the differing lines."""
    real.reset()
    engine.reset()
    out = []
    for line in script:
        argv = [_unquote(w) for w in argv_of(line)]
        expected = normalize(argv, real.call(conn, argv))
        actual = normalize(argv, engine.call(conn, argv))
        if actual != expected:
            out.append(f"{line}\n    redis : {pretty(expected)}\n    engine: {pretty(actual)}")
    return out


def last_replies(
    port: int, script: Sequence[list[bytes]], cleanup: Sequence[bytes]
) -> tuple[bytes, bytes]:
    """Run ``script`` on the redis-server at ``port`` (then delete the ``cleanup`` keys) and on a
    fresh engine; the raw RESP2 replies to its last command, redis-server's first."""
    real = RawConnection(port)
    try:
        expected = [real.call(argv) for argv in script][-1]
        real.call([b"DEL", *cleanup])
    finally:
        real.close()
    engine = Engine()
    client = engine.connect()
    got = [encode(engine.execute(client, argv), 2) for argv in script][-1]
    return expected, got
