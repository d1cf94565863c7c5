"""The ack / leave-pending / dead-letter rules."""

from __future__ import annotations

from streamworker.core.outcomes import (
    MAX_TRACEBACK_CHARS,
    Action,
    bounded_traceback,
    decide,
    describe,
    over_delivered,
    retry_delay_ms,
)
from streamworker.errors import DeadLetter, PermanentFailure, Retry


def test_success_is_acked() -> None:
    assert decide(None, 1, 5).action is Action.ACK


def test_failure_below_max_deliveries_stays_pending() -> None:
    outcome = decide(ValueError("bad"), 2, 5)
    assert outcome.action is Action.LEAVE_PENDING
    assert outcome.error == "ValueError: bad"


def test_failure_on_last_allowed_delivery_is_dead_lettered() -> None:
    assert decide(ValueError("bad"), 5, 5).action is Action.DEAD_LETTER


def test_dead_letter_raised_by_handler_dead_letters_on_first_delivery() -> None:
    outcome = decide(DeadLetter("unknown customer"), 1, 5)
    assert outcome.action is Action.DEAD_LETTER
    assert "unknown customer" in outcome.error


def test_permanent_failure_dead_letters_on_first_delivery() -> None:
    assert decide(PermanentFailure("body failed validation"), 1, 5).action is Action.DEAD_LETTER


def test_retry_keeps_its_delay() -> None:
    outcome = decide(Retry(delay_ms=250), 1, 5)
    assert outcome.action is Action.LEAVE_PENDING
    assert outcome.retry_delay_ms == 250


def test_retry_is_still_bounded_by_max_deliveries() -> None:
    assert decide(Retry(delay_ms=10), 3, 3).action is Action.DEAD_LETTER


def test_over_delivered_only_past_the_maximum() -> None:
    assert not over_delivered(5, 5)
    assert over_delivered(6, 5)


def test_describe_without_message_gives_the_type() -> None:
    assert describe(KeyError()) == "KeyError"


def test_retry_delay_doubles_with_each_delivery_up_to_the_cap() -> None:
    failed = decide(ValueError("x"), 1, 10)
    assert [retry_delay_ms(failed, n, 100, 1000) for n in (1, 2, 3, 4, 5)] == [
        100,
        200,
        400,
        800,
        1000,
    ]


def test_retry_delay_from_retry_wins() -> None:
    outcome = decide(Retry(delay_ms=5), 4, 10)
    assert retry_delay_ms(outcome, 4, 100, 1000) == 5


def _raised(exc: BaseException) -> BaseException:
    try:
        raise exc
    except BaseException as caught:
        return caught


def test_a_dead_letter_keeps_the_traceback_of_its_failure() -> None:
    outcome = decide(_raised(ValueError("bad amount")), 5, 5)
    assert outcome.action is Action.DEAD_LETTER
    assert outcome.traceback.startswith("Traceback (most recent call last):")
    assert "test_outcomes.py" in outcome.traceback
    assert outcome.traceback.endswith("ValueError: bad amount")


def test_a_retried_failure_formats_no_traceback() -> None:
    assert decide(_raised(ValueError("x")), 1, 5).traceback == ""


def test_a_long_traceback_keeps_its_end_within_the_bound() -> None:
    # Chained failures, each with a long message: far more than the bound.
    exc: BaseException | None = None
    for i in range(20):
        try:
            raise RuntimeError(f"layer {i} " + "x" * 400) from exc
        except RuntimeError as caught:
            exc = caught
    assert exc is not None
    text = bounded_traceback(exc)
    assert len(text) == MAX_TRACEBACK_CHARS
    assert text.startswith("…")
    assert text.endswith("RuntimeError: layer 19 " + "x" * 400)


def test_schema_error_finds_sqlites_missing_table_and_column_through_wrappers() -> None:
    import sqlite3

    from sqlalchemy import exc as sa_exc

    from streamworker.core.outcomes import schema_error

    for text in ("no such table: audit", "no such column: x", "table t has no column named y"):
        driver = sqlite3.OperationalError(text)
        wrapped = sa_exc.OperationalError("INSERT …", {}, driver)
        assert schema_error(wrapped) is driver
    assert (
        schema_error(sa_exc.OperationalError("…", {}, sqlite3.OperationalError("locked"))) is None
    )


def test_schema_error_takes_postgresql_sqlstate_class_42_only() -> None:
    import psycopg.errors as pg
    from sqlalchemy import exc as sa_exc

    from streamworker.core.outcomes import schema_error

    for cls in (pg.UndefinedTable, pg.UndefinedColumn, pg.InsufficientPrivilege):
        driver = cls("missing")
        assert schema_error(sa_exc.ProgrammingError("…", {}, driver)) is driver
    for other in (pg.SerializationFailure("retry"), pg.UniqueViolation("dup"), ValueError("x")):
        assert schema_error(other) is None


def test_schema_error_follows_the_cause_of_a_handlers_own_exception() -> None:
    import sqlite3

    from streamworker.core.outcomes import schema_error

    driver = sqlite3.OperationalError("no such table: audit")
    outer = RuntimeError("could not audit")
    outer.__cause__ = driver  # what ``raise RuntimeError(...) from driver`` sets
    assert schema_error(outer) is driver
