"""The handler wrapper of the test kit: it records each call (message, result or error)."""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from streamworker.app import HandlerSpec
from streamworker.core.deps import MessageParam
from streamworker.core.message import Message
from streamworker.core.outcomes import describe
from streamworker.testing.outcomes import Attempt


class Recorder:
    """The calls of every handler, by (stream, group, message id). Appended from the event loop
    and from handler threads (list.append is atomic)."""

    def __init__(self) -> None:
        self.calls: dict[tuple[str, str, str], list[Attempt]] = {}

    def wrap(self, spec: HandlerSpec) -> Callable[..., Any]:
        func = spec.func
        message_param = next(
            (name for name, p in spec.plan.params if isinstance(p, MessageParam)), None
        )
        calls = self.calls

        def record(kwargs: Mapping[str, Any], error: BaseException | None, result: Any) -> None:
            given = kwargs.get(message_param) if message_param else None
            if isinstance(given, Message):
                one(given, error, result)
            elif isinstance(given, list):
                # A batch handler: one attempt per message, with its own result (the result
                # map's value) or the error of the whole call.
                per_id = result if isinstance(result, Mapping) else {}
                for msg in given:
                    value = per_id.get(msg.id) if isinstance(msg, Message) else None
                    if isinstance(value, BaseException):
                        one(msg, value, None)
                    elif isinstance(msg, Message):
                        one(msg, error, value)

        def one(msg: Message[Any], error: BaseException | None, result: Any) -> None:
            calls.setdefault((msg.stream, msg.group, msg.id), []).append(
                Attempt(
                    handler=spec.name,
                    group=msg.group,
                    delivery_count=msg.delivery_count,
                    error=None if error is None else describe(error),
                    result=result,
                )
            )

        @contextlib.contextmanager
        def failures(kwargs: Mapping[str, Any]) -> Iterator[None]:
            # The sync and the async wrapper differ only by the await: a call that raises is
            # recorded here, one that returns by the wrapper.
            try:
                yield
            except Exception as exc:
                record(kwargs, exc, None)
                raise

        def returned(kwargs: Mapping[str, Any], result: Any) -> Any:
            record(kwargs, None, result)
            return result

        if inspect.iscoroutinefunction(func):

            async def recorded_async(**kwargs: Any) -> Any:
                with failures(kwargs):
                    result = await func(**kwargs)
                return returned(kwargs, result)

            return recorded_async

        def recorded(**kwargs: Any) -> Any:
            with failures(kwargs):
                result = func(**kwargs)
            return returned(kwargs, result)

        return recorded
