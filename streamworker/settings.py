"""Runtime settings: CLI flags > ``STREAMWORKER_*`` environment > ``.env`` > App defaults > built-ins.

Constructed once, in the composition root (the CLI); library code receives the values as
constructor arguments and never reads the environment itself.
"""

from __future__ import annotations

from typing import Literal

from pydantic import (
    AliasChoices,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, SettingsConfigDict

from streamworker.errors import ConfigError
from streamworker.io.redisio import validate_redis_url, with_sentinel_password

DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"


class Settings(BaseSettings):
    """Process-wide settings of a streamworker worker. Validated on construction."""

    model_config = SettingsConfigDict(
        env_prefix="STREAMWORKER_", env_file=".env", extra="ignore", frozen=True
    )

    redis_url: str | None = Field(
        default=None, description="Redis URL; App default, else " + DEFAULT_REDIS_URL
    )
    db_url: str | None = Field(default=None, description="SQLAlchemy URL for idempotency='sql'")
    consumer: str | None = Field(
        default=None,
        validation_alias=AliasChoices("consumer", "STREAMWORKER_CONSUMER", "POD_NAME"),
        description="consumer name; default POD_NAME, else the host name",
    )
    metrics_port: int | None = Field(default=None, ge=0, le=65535)
    metrics_host: str = "127.0.0.1"  # 0.0.0.0 only when asked: the endpoint has no auth
    liveness_timeout_s: float = Field(default=300.0, gt=0)
    log_format: Literal["auto", "json", "console"] = "auto"
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    shutdown_timeout_s: float = Field(default=30.0, gt=0)
    processes: int = Field(
        default=1,
        ge=1,
        le=256,
        description="worker processes under one supervisor (streamworker run --processes); 1 runs "
        "the worker in this process, without a supervisor",
    )
    tracing: bool = False
    """OpenTelemetry spans per message, to the global tracer provider (the ``tracing`` extra)."""
    reconnect_backoff_max_s: float = Field(default=5.0, gt=0)
    reconnect_backoff_initial_s: float = Field(default=0.1, gt=0)
    consumer_name_ttl_ms: int = Field(
        default=15_000,
        ge=1_000,
        description="time to live of the record that reserves the consumer name for this process; "
        "a restart after kill -9 on another host waits up to this long for the name",
    )
    prune_interval_s: float = Field(
        default=60.0,
        gt=0,
        description="how often a worker prunes the processed rows of idempotency='sql' handlers",
    )
    db_deadline_s: float = Field(
        default=30.0,
        gt=0,
        description="a batch's database work must finish within this; past it the connection is "
        "thrown away and the batch retried on a fresh one",
    )
    redis_timeout_s: float = Field(
        default=5.0,
        gt=0,
        description="socket timeout of Redis commands; blocking reads get block_ms plus this",
    )
    delayed_poll_ms: int = Field(
        default=250,
        ge=0,
        description="how often a worker moves the due delayed entries (delay_ms/deliver_at) of "
        "the streams it consumes into them; 0: this worker moves none",
    )
    wait_replicas: int = Field(
        default=0,
        ge=0,
        description="publishes (`publish`, `relay`, `dlq replay`) return only once this many "
        "replicas acknowledged their writes (WAIT); 0 waits for none",
    )
    wait_timeout_ms: int = Field(
        default=1_000,
        ge=1,
        description="the longest a write waits for wait_replicas replicas before it fails with "
        "ReplicaWaitTimeout",
    )
    max_in_flight: int | None = Field(
        default=None,
        ge=1,
        description="at most this many messages held by the worker at once (read, not yet acked "
        "or dead-lettered), over all its handlers; reads shrink to the room left and wait when "
        "there is none. Unset: no bound beyond each handler's batch_size",
    )
    max_in_flight_bytes: int | None = Field(
        default=None,
        ge=1,
        description="at most this many bytes of entry fields held by the worker at once, over "
        "all its handlers (one entry larger than the bound still runs, alone). Unset: no bound",
    )
    sentinel_password: SecretStr | None = Field(
        default=None,
        description="the Sentinels' own password (their requirepass) for redis+sentinel:// URLs; "
        "the data nodes' password goes in the URL's user part",
    )
    dashboard_token: SecretStr | None = Field(
        default=None,
        description="the dashboard's login secret (`streamworker dashboard --token`); an empty "
        "value means none",
    )

    @field_validator("redis_url")
    @classmethod
    def _check_redis_url(cls, value: str | None) -> str | None:
        return None if value is None else validate_redis_url(value)

    def redis_url_or(self, default: str) -> str:
        """The Redis URL to open: ``redis_url``, else ``default`` (the App's, the built-in), with
        :attr:`sentinel_password` folded into a sentinel URL (see
        :func:`~streamworker.io.redisio.with_sentinel_password`)."""
        url = self.redis_url or default
        password = self.sentinel_password.get_secret_value() if self.sentinel_password else None
        return with_sentinel_password(url, password)

    @field_validator("consumer")
    @classmethod
    def _check_consumer(cls, value: str | None) -> str | None:
        if value is not None and (not value.strip() or any(c.isspace() for c in value)):
            raise ValueError("consumer name must be non-empty and contain no white space")
        return value

    @model_validator(mode="after")
    def _check_backoff(self) -> Settings:
        if self.reconnect_backoff_initial_s > self.reconnect_backoff_max_s:
            raise ValueError("reconnect_backoff_initial_s must not exceed reconnect_backoff_max_s")
        return self

    @model_validator(mode="after")
    def _check_wait(self) -> Settings:
        # A WAIT blocks its connection for up to wait_timeout_ms: past the socket timeout the
        # client would drop it and report an outage instead of the replicas' count. (Without
        # a wait the timeout is unused: a short redis_timeout_s alone stays valid.)
        if self.wait_replicas and self.wait_timeout_ms >= self.redis_timeout_s * 1000:
            raise ValueError(
                f"wait_timeout_ms ({self.wait_timeout_ms}) must be below redis_timeout_s "
                f"({self.redis_timeout_s:g} s), or the socket times out before WAIT answers"
            )
        return self


def load_settings(**overrides: object) -> Settings:
    """Build Settings from the environment with ``overrides`` (CLI flags; None means unset) on top.

    Raises ConfigError with one line per invalid setting.
    """
    given = {k: v for k, v in overrides.items() if v is not None}
    try:
        return Settings(**given)  # type: ignore[arg-type]
    except ValidationError as exc:
        lines = []
        for err in exc.errors():
            loc = ".".join(str(p) for p in err["loc"]) or "settings"
            msg = str(err["msg"]).removeprefix("Value error, ")
            lines.append(f"{loc}: {msg}")
        raise ConfigError("invalid settings: " + "; ".join(lines)) from None
