"""Which SQLAlchemy and driver errors mean "the database is (or was) not usable", and their
conversion to :class:`~streamworker.errors.DatabaseUnavailable` (:func:`database_errors`), which the
consume loop answers by retrying the batch; a schema that does not fit (a missing table or column)
becomes :class:`~streamworker.errors.SchemaError`, which pauses the handler.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from sqlalchemy import exc as sa_exc

from streamworker.core.outcomes import describe, schema_error
from streamworker.errors import DatabaseUnavailable, SchemaError


# SQLAlchemy wraps driver errors; these mean "the database is (or was) not usable", as opposed to a
# handler's or a statement's own mistake. Lock timeouts, deadlocks and serialization failures are
# OperationalErrors on both drivers too: a retry of the whole batch is the right answer for them.
def _is_unavailable(exc: BaseException) -> bool:
    if isinstance(exc, sa_exc.DBAPIError):
        return bool(exc.connection_invalidated) or isinstance(
            exc, sa_exc.OperationalError | sa_exc.InterfaceError
        )
    return isinstance(exc, sa_exc.TimeoutError | ConnectionError | TimeoutError)


@contextlib.contextmanager
def database_errors(doing: str) -> Iterator[None]:
    """Turn the failures that mean "the database is away" into
    :class:`~streamworker.errors.DatabaseUnavailable` (the consume loop retries the batch), and a
    missing table or column into :class:`~streamworker.errors.SchemaError` (checked first: SQLite
    reports it as an OperationalError, which would otherwise read as an outage); anything else
    propagates as it is."""
    try:
        yield
    except DatabaseUnavailable:
        raise
    except Exception as exc:
        schema = schema_error(exc)
        if schema is not None:
            raise SchemaError(f"schema error while {doing}: {describe(schema)}") from exc
        if _is_unavailable(exc):
            raise DatabaseUnavailable(
                f"database unavailable while {doing}: {describe(exc)}"
            ) from exc
        raise
