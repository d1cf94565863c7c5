"""The dashboard's safety rules as pure functions: binds, tokens, origins, redacted URLs, sessions."""

from __future__ import annotations

import pytest

from streamworker.dashboard.security import (
    Sessions,
    check_bind,
    is_loopback,
    same_origin,
    token_matches,
)
from streamworker.errors import ConfigError
from streamworker.io.redisio import redact_url


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2", "::1", "[::1]", "localhost"])
def test_loopback_addresses_are_recognised(host: str) -> None:
    assert is_loopback(host)


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.0.0.5", "example.com"])
def test_other_addresses_are_not_loopback(host: str) -> None:
    assert not is_loopback(host)


def test_a_public_bind_needs_a_token() -> None:
    with pytest.raises(ConfigError, match="without a token"):
        check_bind("0.0.0.0", None, False)
    check_bind("0.0.0.0", "long-enough-token", False)
    check_bind("127.0.0.1", None, False)


def test_actions_need_a_token() -> None:
    with pytest.raises(ConfigError, match="needs a token"):
        check_bind("127.0.0.1", None, True)
    check_bind("127.0.0.1", "long-enough-token", True)


def test_tokens_compare_exactly() -> None:
    assert token_matches("secret-token", "secret-token")
    assert not token_matches("secret-toke", "secret-token")
    assert not token_matches(None, "secret-token")


@pytest.mark.parametrize(
    ("origin", "referer", "ok"),
    [
        ("http://127.0.0.1:8080", None, True),
        ("http://evil.example", "http://127.0.0.1:8080/dlq", False),  # Origin wins
        (None, "http://127.0.0.1:8080/confirm?x=1", True),
        (None, "http://127.0.0.1:8081/confirm", False),
        (None, None, False),
        ("null", None, False),
    ],
)
def test_only_same_origin_posts_pass(origin: str | None, referer: str | None, ok: bool) -> None:
    assert same_origin(origin, referer, "http", "127.0.0.1:8080") is ok


def test_passwords_are_redacted_from_urls() -> None:
    assert redact_url("redis://:pw@h:6379/0") == "redis://:***@h:6379/0"
    assert redact_url("rediss://user:pw@h/0") == "rediss://user:***@h/0"
    assert redact_url("redis://h:6379/0") == "redis://h:6379/0"


def test_sessions_expire_and_close() -> None:
    sessions = Sessions(ttl_s=-1.0)
    s = sessions.open()
    assert sessions.get(s.id) is None  # past a negative lifetime at once
    live = Sessions()
    s = live.open()
    assert live.get(s.id) == s
    assert s.csrf != s.id
    live.close(s.id)
    assert live.get(s.id) is None
    assert live.get("made-up") is None
