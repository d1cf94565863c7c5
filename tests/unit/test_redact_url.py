"""URL redaction: a password never reaches a log line, a page or an error message."""

from __future__ import annotations

import pytest

from streamworker.errors import ConfigError
from streamworker.idempotency.sql import SqlDatabase
from streamworker.io.redisio import redact_url


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("redis://app:s3cr@t@db:6379/0", "redis://app:***@db:6379/0"),
        ("redis://:p:a:ss@db/0", "redis://:***@db/0"),
        ("rediss://user:p%40ss%3Aw@db/1", "rediss://user:***@db/1"),
        ("redis://app:pa/ss@db:6379/0", "redis://app:***@db:6379/0"),
        ("redis://barepassword@db/0", "redis://***@db/0"),
        ("redis+cluster://u:pw@h1:7000,h2:7001", "redis+cluster://u:***@h1:7000,h2:7001"),
        ("unix://:pw@/run/redis.sock?db=2", "unix://:***@/run/redis.sock?db=2"),
        ("redis://db:6379/0", "redis://db:6379/0"),
        ("engine://memory", "engine://memory"),
    ],
)
def test_the_password_is_hidden_whatever_it_contains(url: str, shown: str) -> None:
    assert redact_url(url) == shown


# Passwords holding every character that ends a part of a URL, unencoded, and an encoded one; the
# words are what must never be shown.
_WORDS = ("ALPHA", "BRAVO", "CHARLIE", "DELTA", "ECHO")
_AWKWARD = [
    "ALPHA@BRAVO",
    "ALPHA:BRAVO",
    "ALPHA/BRAVO",
    "ALPHA%BRAVO",
    "ALPHA%40BRAVO",
    "ALPHA@BRAVO:CHARLIE/DELTA%ECHO",
    "ALPHA:BRAVO@CHARLIE/DELTA",
]


@pytest.mark.parametrize("password", _AWKWARD)
def test_a_database_password_is_hidden_whatever_it_contains(password: str) -> None:
    url = f"postgresql://app:{password}@db:5432/billing"
    assert redact_url(url) == "postgresql://app:***@db:5432/billing"


@pytest.mark.parametrize("password", _AWKWARD)
def test_a_database_is_shown_or_refused_without_its_password(password: str) -> None:
    url = f"postgresql://app:{password}@db:5432/billing"
    try:
        shown = repr(SqlDatabase(url))
    except ConfigError as exc:
        shown = str(exc)
    assert "postgresql://app:***@db:5432/billing" in shown
    assert not [word for word in _WORDS if word in shown]


def test_an_unencoded_at_sign_in_a_database_password_is_refused() -> None:
    with pytest.raises(ConfigError, match="unencoded @ in the password"):
        SqlDatabase("postgresql://app:ALPHA@BRAVO@db/billing")


def test_an_encoded_password_is_kept_for_the_driver() -> None:
    db = SqlDatabase("postgresql://app:ALPHA%40BRAVO%3A%2F@db/billing")
    assert db.url.password == "ALPHA@BRAVO:/"
    assert db.redacted_url == "postgresql://app:***@db/billing"


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://u:hunter2@[::1/db",  # not even a URL SQLAlchemy can parse
        "mysql://u:hunter2@db/x",  # a dialect idempotency='sql' does not support
        "postgresql+asyncpg://u:hunter2@db/x",  # a driver it does not support
        "sqlite+pysqlcipher://u:hunter2@/x.db",
    ],
)
def test_a_refused_database_url_is_redacted_in_the_message(url: str) -> None:
    with pytest.raises(ConfigError) as info:
        SqlDatabase(url)
    assert "hunter2" not in str(info.value)
    assert "***" in str(info.value)
