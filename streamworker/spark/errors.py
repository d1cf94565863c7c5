"""One clear line for the user when the connector refuses something (pure; no Spark import).

The source's options are checked in Python processes that Spark starts for planning, and
reads and writes run on executors: a :class:`~streamworker.errors.ConfigError` raised there
reaches the user's process inside a Spark exception (``AnalysisException: [PYTHON_DATA_SOURCE_
ERROR] … Traceback …``), its message on the last line of a Python traceback. Two ways out:

* :func:`streamworker.spark.read` / :func:`streamworker.spark.read_stream` check the options in
  the user's process first, so a bad option fails there, before Spark plans anything;
* :func:`clear_errors` (a context manager) turns a Spark exception that carries a streamworker
  error back into that error, with its one-line message and no Spark traceback.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator

from streamworker.errors import ConfigError, StreamworkerError

# The last line of a Python traceback that a streamworker exception ended.
_CARRIED = re.compile(r"^streamworker\.(?:[\w.]+\.)?(\w+): (.+?)\s*$", re.MULTILINE)


def _kinds() -> dict[str, type[StreamworkerError]]:
    from streamworker.spark.redisops import DataLoss

    return {"ConfigError": ConfigError, "DataLoss": DataLoss}


def carried_error(exc: BaseException) -> StreamworkerError | None:
    """The streamworker error ``exc`` (a Spark exception) carries, rebuilt with its one-line
    message (its class when it is ConfigError or DataLoss, else StreamworkerError); None when it
    carries none."""
    found = _CARRIED.findall(str(exc))
    if not found:
        return None
    name, message = found[-1]
    return _kinds().get(name, StreamworkerError)(message)


@contextlib.contextmanager
def clear_errors() -> Iterator[None]:
    """Re-raise a Spark exception raised in the block that carries a streamworker error as that
    error (one line, no Spark traceback); anything else passes unchanged::

        with streamworker.spark.clear_errors():
            spark.read.format("streamworker_redis").option(...).load().count()
    """
    try:
        yield
    except StreamworkerError:
        raise
    except Exception as exc:
        carried = carried_error(exc)
        if carried is None:
            raise
        raise carried from None
