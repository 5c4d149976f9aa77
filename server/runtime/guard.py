"""Puts a storage adapter behind a circuit breaker without the adapter knowing, and is the
one place where storage errors become domain errors.

Every coroutine method of the wrapped store runs through the engine's breaker: an open
breaker fails the call fast, engine faults (`StorageError`, timeouts — including running
into the deadline of the call being served, `server.runtime.deadlines`) count as failures,
anything else (a caller's bad input, NotFound) says the engine answered and counts as success.

What leaves the guard is a `LoomError`, never a `StorageError`, so domain code catches one
hierarchy and `server.runtime.status` maps one hierarchy:

    StorageRejected        -> EngineRejected (FAILED_PRECONDITION); an answer: never opens
                              the breaker, for the caller to give up on
    StorageCorrupt         -> CorruptData (UNAVAILABLE); a failure
    other StorageError,
    TimeoutError           -> Unavailable; a failure

With tracing on, each call is a span under the current one (`server.runtime.tracing.stored`).

Every message names the engine and the cause ("cassandra: timed out after 2.0 s"), never an
exception's empty text.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, cast

from server.runtime import tracing
from server.runtime.breaker import CircuitBreaker
from server.runtime.deadlines import engine_deadline
from server.runtime.errors import CorruptData, EngineRejected, Unavailable
from storage.errors import StorageCorrupt, StorageError, StorageRejected, describe

__all__ = ["guard_store"]

T = TypeVar("T")


def _guarded(
    method: Callable[..., Awaitable[Any]], breaker: CircuitBreaker
) -> Callable[..., Awaitable[Any]]:
    operation = method.__name__

    @functools.wraps(method)
    async def call(*args: Any, **kwargs: Any) -> Any:
        breaker.before_call()
        deadline = engine_deadline()
        scope = asyncio.timeout_at(deadline)
        started = asyncio.get_running_loop().time()
        try:
            async with scope:
                if tracing.enabled():  # a CLIENT span under the call's (engine, operation, rows)
                    work = method(*args, **kwargs)
                    result = await tracing.stored(breaker.name, operation, work, args)
                else:
                    result = await method(*args, **kwargs)
        except StorageRejected as exc:
            breaker.on_success()
            raise EngineRejected(_named(breaker.name, str(exc)), str(exc)) from exc
        except (StorageError, TimeoutError) as exc:
            breaker.on_failure()
            if scope.expired() and deadline is not None:
                cause = f"timed out after {deadline - started:.1f} s"
            else:
                cause = str(exc) if isinstance(exc, StorageError) else describe(exc)
            kind = CorruptData if isinstance(exc, StorageCorrupt) else Unavailable
            raise kind(_named(breaker.name, cause or describe(exc))) from exc
        except asyncio.CancelledError:
            breaker.on_abandon()
            raise
        except BaseException:
            breaker.on_success()
            raise
        breaker.on_success()
        return result

    return call


def _named(engine: str, cause: str) -> str:
    """``engine: cause``, naming the engine once (an adapter's message may already)."""
    return cause if cause.startswith((f"{engine}:", f"{engine} ")) else f"{engine}: {cause}"


class _Guarded:
    """A transparent proxy whose coroutine methods consult the breaker."""

    __slots__ = ("_breaker", "_cache", "_inner")

    def __init__(self, inner: object, breaker: CircuitBreaker) -> None:
        self._inner = inner
        self._breaker = breaker
        self._cache: dict[str, Any] = {}

    def __getattr__(self, name: str) -> Any:
        cached = self._cache.get(name)
        if cached is not None:
            return cached
        attr = getattr(self._inner, name)
        if inspect.iscoroutinefunction(attr) and name not in {"close", "aclose"}:
            attr = _guarded(attr, self._breaker)
            self._cache[name] = attr
        return attr


def guard_store(store: T, breaker: CircuitBreaker) -> T:
    """Returns `store` with every coroutine method behind `breaker` (same interface)."""
    return cast("T", _Guarded(store, breaker))
