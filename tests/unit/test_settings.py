"""Settings: sources, precedence and validation messages."""

from __future__ import annotations

import pytest

from streamworker.errors import ConfigError
from streamworker.io.redisio import validate_redis_url
from streamworker.settings import load_settings


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.chdir(tmp_path)  # no stray .env
    for name in (
        "STREAMWORKER_REDIS_URL",
        "STREAMWORKER_CONSUMER",
        "POD_NAME",
        "STREAMWORKER_DB_URL",
        "STREAMWORKER_DASHBOARD_TOKEN",
    ):
        monkeypatch.delenv(name, raising=False)


def test_environment_provides_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STREAMWORKER_REDIS_URL", "redis://10.0.0.1:6380/2")
    monkeypatch.setenv("STREAMWORKER_SHUTDOWN_TIMEOUT_S", "4.5")
    s = load_settings()
    assert s.redis_url == "redis://10.0.0.1:6380/2"
    assert s.shutdown_timeout_s == 4.5


def test_flags_win_over_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STREAMWORKER_REDIS_URL", "redis://a:1/0")
    assert load_settings(redis_url="redis://b:2/0").redis_url == "redis://b:2/0"


def test_dotenv_file_is_read(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / ".env").write_text("STREAMWORKER_CONSUMER=from-dotenv\n")
    assert load_settings().consumer == "from-dotenv"


def test_pod_name_is_the_consumer_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POD_NAME", "worker-3")
    assert load_settings().consumer == "worker-3"


def test_explicit_consumer_beats_pod_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POD_NAME", "worker-3")
    assert load_settings(consumer="c1").consumer == "c1"


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("http://x", "scheme 'http'"),
        ("localhost:6379", "scheme 'localhost'"),
        ("redis://", "no host"),
        ("redis://h:99999/0", "Port out of range"),
        ("redis://h:6379/abc", "database 'abc' is not a number"),
        ("unix://", "no socket path"),
    ],
)
def test_bad_redis_urls_are_explained(url: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        validate_redis_url(url)


@pytest.mark.parametrize(
    "url",
    [
        "redis://app:s3cr@t@h:99999/0",
        "redis://app:s3cr@t@h:6379/abc",
        "redis://app:s3cr@t@h:0/0",
        "ftp://app:s3cr@t@h:6379",
        "redis+cluster://app:s3cr@t@h1:1,h2:x/",
        "redis+cluster://app:s3cr@t@h1:1/3",
    ],
)
def test_a_bad_redis_url_is_explained_without_its_password(url: str) -> None:
    with pytest.raises(ConfigError) as caught:
        validate_redis_url(url)
    assert "s3cr" not in str(caught.value)
    assert "app:***@" in str(caught.value)


def test_good_redis_urls_pass() -> None:
    for url in ("redis://h:6379/0", "rediss://u:p@h:6380", "unix:///tmp/r.sock", "engine://memory"):
        assert validate_redis_url(url) == url


def test_invalid_values_give_one_line_per_setting() -> None:
    with pytest.raises(ConfigError) as info:
        load_settings(shutdown_timeout_s=-1, metrics_port=70000)
    text = str(info.value)
    assert "shutdown_timeout_s" in text
    assert "metrics_port" in text


def test_consumer_name_must_not_contain_spaces() -> None:
    with pytest.raises(ConfigError, match="white space"):
        load_settings(consumer="a b")


def test_backoff_bounds_are_checked_together() -> None:
    with pytest.raises(ConfigError, match="reconnect_backoff_initial_s"):
        load_settings(reconnect_backoff_initial_s=10, reconnect_backoff_max_s=1)


def test_deadlines_default_to_30_s_for_the_database_and_5_s_for_redis(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("STREAMWORKER_DB_DEADLINE_S", raising=False)
    monkeypatch.delenv("STREAMWORKER_REDIS_TIMEOUT_S", raising=False)
    s = load_settings()
    assert (s.db_deadline_s, s.redis_timeout_s) == (30.0, 5.0)


def test_deadlines_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STREAMWORKER_DB_DEADLINE_S", "12.5")
    monkeypatch.setenv("STREAMWORKER_REDIS_TIMEOUT_S", "2")
    s = load_settings()
    assert (s.db_deadline_s, s.redis_timeout_s) == (12.5, 2.0)


def test_a_deadline_that_is_not_positive_is_refused_with_its_name(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("STREAMWORKER_DB_DEADLINE_S", "0")
    with pytest.raises(ConfigError, match="db_deadline_s"):
        load_settings()


def test_the_dashboard_token_comes_from_the_environment_and_stays_out_of_reprs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("STREAMWORKER_DASHBOARD_TOKEN", "s3cret-token")
    settings = load_settings()
    assert settings.dashboard_token is not None
    assert settings.dashboard_token.get_secret_value() == "s3cret-token"
    assert "s3cret-token" not in repr(settings)


def test_the_dashboard_token_flag_wins_over_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("STREAMWORKER_DASHBOARD_TOKEN", "from-the-environment")
    token = load_settings(dashboard_token="from-the-flag").dashboard_token
    assert token is not None
    assert token.get_secret_value() == "from-the-flag"


def test_no_dashboard_token_by_default() -> None:
    assert load_settings().dashboard_token is None
