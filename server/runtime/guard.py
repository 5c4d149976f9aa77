"""Puts a storage adapter behind a circuit breaker without the adapter knowing.

Every coroutine method of the wrapped store runs through the engine's breaker: an open
breaker fails the call fast, engine faults (`StorageError`, timeouts — including running
into the deadline of the call being served, `server.runtime.deadlines`) count as failures,
anything else (a caller's bad input, NotFound) says the engine answered and counts as success.
A `StorageRejected` (the engine refused a statement as written) is such an answer too: it
passes through unchanged, for the caller to give up on, and never opens the breaker.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, cast

from server.runtime.breaker import CircuitBreaker
from server.runtime.deadlines import engine_deadline
from server.runtime.errors import Unavailable
from storage.errors import StorageError, StorageRejected

__all__ = ["guard_store"]

T = TypeVar("T")


def _guarded(
    method: Callable[..., Awaitable[Any]], breaker: CircuitBreaker
) -> Callable[..., Awaitable[Any]]:
    @functools.wraps(method)
    async def call(*args: Any, **kwargs: Any) -> Any:
        breaker.before_call()
        try:
            async with asyncio.timeout_at(engine_deadline()):
                result = await method(*args, **kwargs)
        except StorageRejected:
            breaker.on_success()
            raise
        except (StorageError, TimeoutError) as exc:
            breaker.on_failure()
            raise Unavailable(f"{breaker.name}: {exc or type(exc).__name__}") from exc
        except asyncio.CancelledError:
            breaker.on_abandon()
            raise
        except BaseException:
            breaker.on_success()
            raise
        breaker.on_success()
        return result

    return call


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
