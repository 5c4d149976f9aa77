"""What the breaker guard makes of a store's errors: an engine fault counts against the
engine, a statement the engine refused is an answer and passes through unchanged."""

from __future__ import annotations

import pytest

from server.runtime.breaker import BreakerState, CircuitBreaker
from server.runtime.errors import Unavailable
from server.runtime.guard import guard_store
from storage.errors import StorageRejected, StorageUnavailable


class Raises:
    """Something with a coroutine method that fails with the error it was given."""

    def __init__(self, error: Exception) -> None:
        self.error = error

    async def read(self) -> None:
        raise self.error


async def test_a_refused_statement_passes_through_and_never_opens_the_breaker() -> None:
    """StorageRejected reaches the caller as itself (to give up on), however often."""
    breaker = CircuitBreaker("engine", failure_threshold=1)
    store = guard_store(Raises(StorageRejected("sqlite: no such column: x")), breaker)
    for _ in range(3):
        with pytest.raises(StorageRejected, match="no such column"):
            await store.read()
    assert breaker.state is BreakerState.CLOSED


async def test_an_unreachable_engine_is_unavailable_and_opens_the_breaker() -> None:
    """StorageUnavailable becomes Unavailable and counts as a failure."""
    breaker = CircuitBreaker("engine", failure_threshold=1)
    store = guard_store(Raises(StorageUnavailable("connection refused")), breaker)
    with pytest.raises(Unavailable):
        await store.read()
    assert breaker.state is BreakerState.OPEN
