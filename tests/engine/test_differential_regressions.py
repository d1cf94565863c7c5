"""Deterministic regressions for the differential suite's findings (shrunk by hypothesis).

Each case is a short command script run on redis-server 7.0.15 and on the engine; every reply
must be byte-identical (after the same clock masking as the property tests). A line starting
with ``3>`` runs on the RESP3 connection, the others on the RESP2 one. Arguments are split on
single spaces; ``\\s`` stands for a space inside an argument.
"""

from __future__ import annotations

import pytest

from tests.engine.differential.backends import EngineBackend, RedisBackend
from tests.engine.differential.normalize import normalize
from tests.engine.differential.resp import pretty

pytestmark = pytest.mark.redis

MAX = "18446744073709551615"

CASES = [
    # XGROUP SETID parses its ENTRIESREAD options (value errors included) before rejecting the
    # number of arguments: only a well-formed option list can end in the subcommand syntax
    # error. (Found by test_argument_errors_match_redis.)
    pytest.param(
        [
            "XADD s 1-1 f v",
            "XGROUP CREATE s g1 0",
            "XGROUP SETID s g1 1-1 ENTRIESREAD ENTRIESREAD 1",
            "XGROUP SETID s g1 1-1 ENTRIESREAD x ENTRIESREAD 2",
            "XGROUP SETID s g1 1-1 ENTRIESREAD -5 FOO",
            "XGROUP SETID s g1 1-1 ENTRIESREAD 1 ENTRIESREAD 2",
            "XGROUP setid s g1 1-1 ENTRIESREAD 1 FOO",
            "XINFO GROUPS s",
        ],
        id="xgroup-setid-parses-entriesread-before-arity",
    ),
    # `ms-*` when the last id is ms-UINT64_MAX (ms below the maximum): 7.0's streamAppendItem
    # fails without setting errno, so XADD answers with its non-EDOM text, "Elements are too
    # large to be stored", not "equal or smaller than the target stream top item". The stream
    # is unchanged. (Found by test_consumer_group_commands_match_redis.)
    pytest.param(
        [
            f"XADD t 5-{MAX} f v",
            "XADD t 5-* f v",
            "3> XADD t 5-* f v",
            "XLEN t",
            "XADD t 6-* f v",
            f"XADD u 0-{MAX} f v",
            "XADD u 0-* f v",
            "XINFO STREAM u",
        ],
        id="xadd-partial-id-after-max-seq",
    ),
    # The "unknown subcommand or wrong number of arguments for '%s'" error of XINFO STREAM /
    # XGROUP CREATE / SETID echoes the subcommand as the client typed it. (Found by
    # test_argument_errors_match_redis; fixed since.)
    pytest.param(
        [
            "XADD s 1-1 f v",
            "XINFO stream s FULL COUNT 2 2",
            "XINFO Stream s FULL COUNT 2 2",
            "XINFO STREAM s FULL COUNT 2 2",
            "XINFO stream s x",
            "XGROUP create LIMIT s g2 abc",
            "XGROUP CREATE LIMIT s g2 abc",
            "XGROUP setid s g1 1-1 ENTRIESREAD",
        ],
        id="subcommand-syntax-error-echoes-typed-case",
    ),
]


def _argv(line: str) -> tuple[int, list[bytes]]:
    conn = 0
    if line.startswith("3>"):
        conn, line = 1, line[2:].strip()
    return conn, [a.replace("\\s", " ").encode() for a in line.split(" ")]


@pytest.mark.parametrize("script", CASES)
def test_engine_replies_like_redis(
    both: tuple[RedisBackend, EngineBackend], script: list[str]
) -> None:
    """Every reply of the script equals redis-server 7.0's, byte for byte."""
    real, engine = both
    real.reset()
    engine.reset()
    failures = []
    for line in script:
        conn, argv = _argv(line)
        expected = normalize(argv, real.call(conn, argv))
        actual = normalize(argv, engine.call(conn, argv))
        if actual != expected:
            failures.append(f"{line}\n    redis : {pretty(expected)}\n    engine: {pretty(actual)}")
    assert not failures, "engine differs from redis-server 7.0:\n" + "\n".join(failures)
