"""Sentinel URLs: what they name, what is refused (one clear reason), and that no password shows."""

from __future__ import annotations

import pytest

from streamworker.errors import ConfigError
from streamworker.io.redisio import (
    PrimaryWatch,
    parse_sentinel_url,
    redact_url,
    validate_redis_url,
    with_sentinel_password,
)
from streamworker.settings import load_settings


def test_a_sentinel_url_names_the_sentinels_the_service_and_the_database() -> None:
    target = parse_sentinel_url("redis+sentinel://h1:26380,h2:26381,h3/mymaster/2")
    assert target.sentinels == [("h1", 26380), ("h2", 26381), ("h3", 26379)]
    assert target.service == "mymaster"
    assert target.db == 2
    assert (target.username, target.password, target.sentinel_password) == (None, None, None)
    assert not target.tls


def test_the_database_defaults_to_zero() -> None:
    assert parse_sentinel_url("redis+sentinel://h1:26379/mymaster").db == 0
    assert parse_sentinel_url("redis+sentinel://h1:26379/mymaster/").db == 0


def test_credentials_are_the_data_nodes_and_the_query_option_is_the_sentinels() -> None:
    target = parse_sentinel_url(
        "rediss+sentinel://app:p%40ss@h1:1,[::1]:2/orders/1?sentinel_password=s%3Dcret"
    )
    assert (target.username, target.password) == ("app", "p@ss")
    assert target.sentinel_password == "s=cret"
    assert target.sentinels == [("h1", 1), ("::1", 2)]
    assert target.tls


def test_a_bare_password_before_the_at_sign_is_the_data_nodes_password() -> None:
    target = parse_sentinel_url("redis+sentinel://:pw@h1/svc")
    assert (target.username, target.password) == (None, "pw")


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("redis+sentinel:///mymaster", "no Sentinel"),
        ("redis+sentinel://h1:26379,,h2/mymaster", "empty Sentinel"),
        ("redis+sentinel://h1:26379", "no service name"),
        ("redis+sentinel://h1:26379/", "no service name"),
        ("redis+sentinel://h1:99999/mymaster", "bad port"),
        ("redis+sentinel://h1:port/mymaster", "bad port"),
        ("redis+sentinel://:26379/mymaster", "has no host"),
        ("redis+sentinel://h1/mymaster/zero", "is not a number"),
        ("redis+sentinel://h1/mymaster?timeout=3", "unknown option 'timeout'"),
    ],
)
def test_a_malformed_sentinel_url_is_refused_with_its_reason(url: str, reason: str) -> None:
    with pytest.raises(ConfigError, match=reason) as caught:
        validate_redis_url(url)
    assert "\n" not in str(caught.value)


def test_a_refused_sentinel_url_does_not_show_its_passwords() -> None:
    url = "redis+sentinel://app:TOPSECRET@h1:0/svc?sentinel_password=ALSOSECRET"
    with pytest.raises(ConfigError) as caught:
        validate_redis_url(url)
    assert "TOPSECRET" not in str(caught.value)
    assert "ALSOSECRET" not in str(caught.value)


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        (
            "redis+sentinel://u:pw@h1:1,h2:2/svc/0?sentinel_password=x",
            "redis+sentinel://u:***@h1:1,h2:2/svc/0?sentinel_password=***",
        ),
        (
            "redis+sentinel://h1:1/svc?sentinel_password=a@b&x=1",
            "redis+sentinel://h1:1/svc?sentinel_password=***&x=1",
        ),
    ],
)
def test_both_passwords_of_a_sentinel_url_are_redacted(url: str, shown: str) -> None:
    assert redact_url(url) == shown


def test_the_sentinel_password_setting_is_folded_into_a_sentinel_url_only() -> None:
    url = "redis+sentinel://h1:1/svc"
    assert with_sentinel_password(url, "p&w") == url + "?sentinel_password=p%26w"
    assert parse_sentinel_url(with_sentinel_password(url, "p&w")).sentinel_password == "p&w"
    assert with_sentinel_password("redis://h1:1/0", "pw") == "redis://h1:1/0"
    assert with_sentinel_password(url, None) == url


def test_a_password_in_the_url_wins_over_the_setting() -> None:
    url = "redis+sentinel://h1:1/svc?sentinel_password=given"
    assert with_sentinel_password(url, "setting") == url


def test_settings_give_the_url_to_open_with_the_sentinels_password(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("STREAMWORKER_SENTINEL_PASSWORD", "from-env")
    settings = load_settings(redis_url="redis+sentinel://h1:1/svc")
    assert settings.redis_url_or("redis://x/0").endswith("?sentinel_password=from-env")
    assert "from-env" not in repr(settings)


def test_settings_refuse_a_malformed_sentinel_url_in_one_line() -> None:
    with pytest.raises(ConfigError, match="no service name"):
        load_settings(redis_url="redis+sentinel://h1:26379")


def test_a_primary_watch_counts_a_new_address_not_the_first_one() -> None:
    watch = PrimaryWatch(None)
    seen: list[tuple[str | None, str | None]] = []
    watch.listen(lambda old, new: seen.append((old, new)))
    watch.seen("a:1")
    watch.seen("a:1")
    watch.seen("b:2")
    assert watch.changes == 1
    assert seen == [("a:1", "b:2")]


def test_a_demotion_is_counted_once_however_many_connections_meet_it() -> None:
    watch = PrimaryWatch("db:6379")
    before = watch.generation
    watch.demoted(before)
    watch.demoted(before)  # another connection of the same generation: the same demotion
    assert watch.changes == 1
    assert watch.generation == before + 1
