"""Which keyed publishes go by ``XADD … IDMP`` and with which settings (pure parts of
streamworker/producing/idmp.py)."""

from __future__ import annotations

from typing import Any

import pytest

from streamworker.producing import idmp
from streamworker.producing.producer import StreamOptions, Xadd, plan_publish


@pytest.mark.parametrize(
    ("window_ms", "seconds"),
    [(1, 1), (999, 1), (1_000, 1), (1_001, 2), (1_500, 2), (86_400_000, 86_400)],
)
def test_a_window_becomes_whole_seconds_rounded_up(window_ms: int, seconds: int) -> None:
    """Rounded up, so that IDMP never forgets a key sooner than the window asked."""
    assert idmp.duration_s(window_ms) == seconds


def test_a_window_above_a_day_cannot_be_expressed() -> None:
    """IDMP-DURATION's range is 1-86,400 s (https://redis.io/docs/latest/commands/xcfgset/)."""
    assert idmp.duration_s(86_400_001) is None


def _plan(**kwargs: Any) -> Xadd:
    return plan_publish("orders", {"n": 1}, StreamOptions(maxlen=5), **kwargs)


def test_a_keyed_add_with_a_generated_id_goes_by_idmp_where_the_server_has_it() -> None:
    x = _plan(idempotency_key="order-7")
    assert idmp.route(x, True).idmp is True
    assert idmp.route(x, False).idmp is False


@pytest.mark.parametrize(
    "kwargs",
    [
        {},  # not keyed: a plain XADD
        {"idempotency_key": "k", "delay_ms": 1_000},  # scheduled, not added
        {"idempotency_key": "k", "id": "1700000000000-1"},  # an explicit id
        {"idempotency_key": "k", "idempotency_window_ms": 86_400_001},  # beyond IDMP's window
    ],
)
def test_other_adds_keep_their_path(kwargs: dict[str, Any]) -> None:
    assert idmp.route(_plan(**kwargs), True).idmp is False


def test_the_script_gets_the_key_as_iid_and_the_stream_and_marker_as_keys() -> None:
    x = idmp.route(_plan(idempotency_key="order:7", idempotency_window_ms=1_500), True)
    script, keys, args = idmp.script_call(x)
    assert (script.name, keys) == ("publish_idmp", ["orders", "{orders}:published:order:7"])
    assert args == [idmp.PRODUCER_ID, "order:7", 2, idmp.MAXSIZE, 3, "MAXLEN", "~", "5", "n", "1"]
    untrimmed = idmp.script_call(
        idmp.route(plan_publish("s", {"n": 1}, StreamOptions(), idempotency_key="k"), True)
    )
    assert untrimmed[2][4:] == [0, "n", "1"]
