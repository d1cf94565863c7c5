"""URL redaction: a password never reaches a log line, a page or an error message."""

from __future__ import annotations

import pytest

from streamworker.idempotency.sql import _redact as redact_db_url
from streamworker.redisio import redact_url


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


@pytest.mark.parametrize(
    ("url", "secret"),
    [
        ("postgresql://u:s3cr@t@db/x", "s3cr"),
        ("postgresql://u:p%40ss@db/x", "p%40ss"),
        ("redis://app:s3cr@t@db/0", "s3cr"),
    ],
)
def test_database_and_redis_redaction_drop_the_password(url: str, secret: str) -> None:
    assert secret not in redact_url(url)
    assert secret not in redact_db_url(url)


def test_an_unparseable_database_url_is_redacted_too() -> None:
    assert "hunter2" not in redact_db_url("postgresql://u:hunter2@[::1/db")
