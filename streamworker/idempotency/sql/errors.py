"""Which SQLAlchemy and driver errors mean "the database is (or was) not usable", and their
conversion to :class:`~streamworker.errors.DatabaseUnavailable` (:func:`_unavailable`), which the
consume loop answers by retrying the batch.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from sqlalchemy import exc as sa_exc

from streamworker.errors import DatabaseUnavailable
from streamworker.outcomes import describe


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
def _unavailable(doing: str) -> Iterator[None]:
    try:
        yield
    except DatabaseUnavailable:
        raise
    except Exception as exc:
        if _is_unavailable(exc):
            raise DatabaseUnavailable(
                f"database unavailable while {doing}: {describe(exc)}"
            ) from exc
        raise
