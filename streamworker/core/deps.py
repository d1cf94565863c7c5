"""Resources for handlers, FastAPI-style: ``def handler(msg: Message[T], db=Depends(get_db))``.

A dependency is a callable (sync or async function, or a sync or async generator for resources that
need cleanup). Its own parameters are resolved the same way, so dependencies can depend on other
dependencies and on the :class:`~streamworker.Message`.

Scopes:

* ``"message"`` (default): called for each message; a generator's code after ``yield`` runs once the
  handler has finished (the handler's exception, if any, is raised at the ``yield``).
* ``"worker"``: called once when the worker starts and cleaned up when it stops; the same value is
  shared by every message of every handler (so it must be safe for concurrent use).

Within one resolution a dependency is called once even when several parameters ask for it.
Sync dependencies run on the event loop thread: keep them cheap (or make them ``async``).
"""

from __future__ import annotations

import collections.abc
import contextlib
import inspect
import re
import typing
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from streamworker.core.message import Message
from streamworker.errors import ConfigError

Scope = Literal["message", "worker"]


class Depends:
    """Marks a handler (or dependency) parameter as provided by calling ``dependency``."""

    __slots__ = ("dependency", "scope")

    def __init__(self, dependency: Callable[..., Any], *, scope: Scope = "message") -> None:
        if not callable(dependency):
            raise ConfigError(f"Depends() needs a callable, got {dependency!r}")
        if scope not in ("message", "worker"):
            raise ConfigError(f"Depends scope must be 'message' or 'worker', not {scope!r}")
        self.dependency = dependency
        self.scope: Scope = scope

    def __repr__(self) -> str:
        name = getattr(self.dependency, "__qualname__", repr(self.dependency))
        return f"Depends({name}, scope={self.scope!r})"


@dataclass(frozen=True, slots=True)
class MessageParam:
    """The parameter receives the Message (a batch handler's: the list of the batch's messages)."""


@dataclass(frozen=True, slots=True)
class ProvidedParam:
    """The parameter receives a value the idempotency strategy provides, looked up by type."""

    type_: type


@dataclass(frozen=True, slots=True)
class DependencyParam:
    """The parameter receives the value of a dependency."""

    depends: Depends
    plan: CallPlan


Param = MessageParam | ProvidedParam | DependencyParam


@dataclass(frozen=True, slots=True)
class CallPlan:
    """How to call one function: where each parameter's value comes from (computed once)."""

    func: Callable[..., Any]
    params: tuple[tuple[str, Param], ...]
    message_type: (
        Any  # the annotation of the Message parameter, e.g. Message[Order]; None if absent
    )
    batch: bool = False
    """The Message parameter is a list (``list[Message[Order]]``: a batch handler's); then
    ``message_type`` is the element's annotation."""

    def dependencies(self) -> Iterator[Depends]:
        """Every Depends reachable from this plan, depth first."""
        for _, param in self.params:
            if isinstance(param, DependencyParam):
                yield from param.plan.dependencies()
                yield param.depends


_MESSAGE_TEXT = re.compile(r"^(?:[A-Za-z_][\w]*\.)*Message(?:\[.*\])?$")


def _is_message_annotation(annotation: Any) -> bool:
    if isinstance(annotation, str):
        # A postponed annotation that could not be evaluated (a handler defined inside a
        # function that imports Message locally): recognise it by name.
        return bool(_MESSAGE_TEXT.match(annotation.strip()))
    return annotation is Message or typing.get_origin(annotation) is Message


_MESSAGE_LIST_TEXT = re.compile(
    r"^(?:[A-Za-z_][\w]*\.)*(?:list|List|Sequence)\[\s*((?:[A-Za-z_][\w]*\.)*Message(?:\[.*\])?)\s*\]$"
)
_LIST_ORIGINS: tuple[Any, ...] = (list, collections.abc.Sequence)


def _message_list_element(annotation: Any) -> Any:
    """For ``list[Message[X]]`` (or ``Sequence[...]``, or the same as unresolved text), the
    element annotation ``Message[X]``; None for anything else."""
    if isinstance(annotation, str):
        match = _MESSAGE_LIST_TEXT.match(annotation.strip())
        return match.group(1) if match else None
    if typing.get_origin(annotation) in _LIST_ORIGINS:
        args = typing.get_args(annotation)
        if len(args) == 1 and _is_message_annotation(args[0]):
            return args[0]
    return None


def build_plan(func: Callable[..., Any], provided: frozenset[type] = frozenset()) -> CallPlan:
    """Inspect ``func`` once and say where each of its parameters comes from.

    Raises ConfigError naming the parameter when one has no source.
    """
    try:
        hints = typing.get_type_hints(func)
    except Exception:  # names the module cannot see: resolve what can be, keep the rest as text
        hints = {}
        for pname, raw in getattr(func, "__annotations__", {}).items():
            try:
                hints[pname] = (
                    eval(raw, getattr(func, "__globals__", {})) if isinstance(raw, str) else raw
                )
            except Exception:
                hints[pname] = raw
    name = getattr(func, "__qualname__", repr(func))
    params: list[tuple[str, Param]] = []
    message_type: Any = None
    batch = False
    for pname, p in inspect.signature(func).parameters.items():
        if p.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
            raise ConfigError(f"{name}: *args/**kwargs parameters cannot be provided")
        annotation = hints.get(pname, p.annotation)
        if isinstance(p.default, Depends):
            sub = build_plan(p.default.dependency, provided)
            params.append((pname, DependencyParam(p.default, sub)))
        elif _is_message_annotation(annotation):
            params.append((pname, MessageParam()))
            message_type = annotation
        elif (element := _message_list_element(annotation)) is not None:
            params.append((pname, MessageParam()))
            message_type = element
            batch = True
        elif isinstance(annotation, type) and any(issubclass(annotation, t) for t in provided):
            params.append((pname, ProvidedParam(annotation)))
        elif p.default is not inspect.Parameter.empty:
            continue  # a plain default value: leave it to Python
        else:
            raise ConfigError(
                f"{name}: parameter {pname!r} has no source; annotate it as Message[...] "
                f"or give it a default of Depends(...)"
            )
    return CallPlan(func=func, params=tuple(params), message_type=message_type, batch=batch)


async def _call(
    func: Callable[..., Any], kwargs: dict[str, Any], stack: contextlib.AsyncExitStack
) -> Any:
    if inspect.isasyncgenfunction(func):
        return await stack.enter_async_context(contextlib.asynccontextmanager(func)(**kwargs))
    if inspect.isgeneratorfunction(func):
        return stack.enter_context(contextlib.contextmanager(func)(**kwargs))
    result = func(**kwargs)
    if inspect.isawaitable(result):
        return await result
    return result


class Resolver:
    """Resolves call plans. One instance per worker; holds the worker-scoped values.

    Not thread-safe: use it from the worker's event loop only, except :meth:`arguments_inline`,
    which only reads the worker-scoped values created by :meth:`start`.
    """

    def __init__(self) -> None:
        self._worker_values: dict[Callable[..., Any], Any] = {}
        self._worker_stack = contextlib.AsyncExitStack()

    async def start(self, plans: list[CallPlan]) -> None:
        """Create every worker-scoped dependency the plans reach (they may not ask for the message)."""
        for plan in plans:
            for dep in plan.dependencies():
                if dep.scope == "worker" and dep.dependency not in self._worker_values:
                    sub = build_plan(dep.dependency)
                    kwargs = await self._kwargs(sub, None, {}, {}, self._worker_stack, worker=True)
                    value = await _call(dep.dependency, kwargs, self._worker_stack)
                    self._worker_values[dep.dependency] = value

    async def close(self) -> None:
        """Clean up worker-scoped dependencies, last created first."""
        await self._worker_stack.aclose()
        self._worker_values.clear()

    @contextlib.asynccontextmanager
    async def arguments(
        self,
        plan: CallPlan,
        message: Message[Any] | list[Message[Any]],
        provided: dict[type, Any] | None = None,
    ) -> AsyncIterator[dict[str, Any]]:
        """Yield the keyword arguments for ``plan.func``; message-scoped cleanup runs on exit.
        For a batch handler (``plan.batch``) ``message`` is the list, and "message-scoped"
        means once per call, for the whole list."""
        async with contextlib.AsyncExitStack() as stack:
            yield await self._kwargs(plan, message, provided or {}, {}, stack, worker=False)

    @staticmethod
    def resolves_inline(plan: CallPlan) -> bool:
        """True when ``plan``'s arguments need nothing created per message (no message-scoped
        ``Depends``), so that :meth:`arguments_inline` can give them without awaiting."""
        return all(
            not isinstance(param, DependencyParam) or param.depends.scope == "worker"
            for _, param in plan.params
        )

    def arguments_inline(
        self,
        plan: CallPlan,
        message: Message[Any] | list[Message[Any]],
        provided: Mapping[type, Any],
    ) -> dict[str, Any]:
        """The keyword arguments for a plan that :meth:`resolves_inline`; callable from any
        thread once :meth:`start` has returned."""
        kwargs: dict[str, Any] = {}
        for pname, param in plan.params:
            if isinstance(param, MessageParam):
                kwargs[pname] = message
            elif isinstance(param, ProvidedParam):
                kwargs[pname] = _provided(param, provided, plan.func)
            else:
                kwargs[pname] = self._worker_values[param.depends.dependency]
        return kwargs

    async def _kwargs(
        self,
        plan: CallPlan,
        message: Message[Any] | list[Message[Any]] | None,
        provided: dict[type, Any],
        cache: dict[Callable[..., Any], Any],
        stack: contextlib.AsyncExitStack,
        *,
        worker: bool,
    ) -> dict[str, Any]:
        kwargs: dict[str, Any] = {}
        fname = getattr(plan.func, "__qualname__", repr(plan.func))
        for pname, param in plan.params:
            if isinstance(param, MessageParam):
                if message is None:
                    raise ConfigError(
                        f"{fname}: a worker-scoped dependency cannot take the Message"
                    )
                kwargs[pname] = message
            elif isinstance(param, ProvidedParam):
                kwargs[pname] = _provided(param, provided, plan.func)
            else:
                dep = param.depends
                if dep.scope == "worker" and not worker:
                    kwargs[pname] = self._worker_values[dep.dependency]
                elif dep.dependency in cache:
                    kwargs[pname] = cache[dep.dependency]
                else:
                    sub_kwargs = await self._kwargs(
                        param.plan, message, provided, cache, stack, worker=worker
                    )
                    value = await _call(dep.dependency, sub_kwargs, stack)
                    cache[dep.dependency] = value
                    kwargs[pname] = value
        return kwargs


def _provided(param: ProvidedParam, provided: Mapping[type, Any], func: Any) -> Any:
    value = next((v for t, v in provided.items() if issubclass(param.type_, t)), None)
    if value is None:
        fname = getattr(func, "__qualname__", repr(func))
        raise ConfigError(f"{fname}: nothing provides {param.type_.__name__} here")
    return value
