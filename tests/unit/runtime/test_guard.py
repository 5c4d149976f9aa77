"""What the breaker guard makes of a store's errors: every storage error leaves it as a domain
error naming the engine and the cause; an engine fault counts against the engine, a statement
the engine refused is an answer."""

from __future__ import annotations

import ast
import asyncio
from pathlib import Path

import grpc
import pytest

from server.runtime.breaker import BreakerState, CircuitBreaker
from server.runtime.deadlines import serving
from server.runtime.errors import CorruptData, EngineRejected, Unavailable
from server.runtime.guard import guard_store
from server.runtime.status import code_for
from storage.errors import StorageCorrupt, StorageError, StorageRejected, StorageUnavailable


class Raises:
    """Something with a coroutine method that fails with the error it was given."""

    def __init__(self, error: Exception) -> None:
        self.error = error

    async def read(self) -> None:
        raise self.error


class Hangs:
    """Something with a coroutine method that never answers, like a hung engine."""

    async def read(self) -> None:
        await asyncio.Event().wait()


async def test_a_refused_statement_is_a_failed_precondition_and_never_opens_the_breaker() -> None:
    """StorageRejected reaches the caller as EngineRejected (to give up on), however often,
    carrying the engine's own message."""
    breaker = CircuitBreaker("engine", failure_threshold=1)
    store = guard_store(Raises(StorageRejected("sqlite: no such column: x")), breaker)
    for _ in range(3):
        with pytest.raises(EngineRejected, match="no such column") as err:
            await store.read()
        assert err.value.reason == "sqlite: no such column: x"
        assert code_for(err.value) is grpc.StatusCode.FAILED_PRECONDITION
    assert breaker.state is BreakerState.CLOSED


async def test_an_unreachable_engine_is_unavailable_and_opens_the_breaker() -> None:
    """StorageUnavailable becomes Unavailable, names the engine once, and counts as a failure."""
    breaker = CircuitBreaker("engine", failure_threshold=1)
    store = guard_store(Raises(StorageUnavailable("engine connect: connection refused")), breaker)
    with pytest.raises(Unavailable) as err:
        await store.read()
    assert err.value.message == "engine connect: connection refused"
    assert breaker.state is BreakerState.OPEN


async def test_corrupt_data_keeps_its_meaning() -> None:
    """StorageCorrupt becomes CorruptData: UNAVAILABLE to the caller, a failure to the breaker."""
    breaker = CircuitBreaker("engine", failure_threshold=1)
    store = guard_store(Raises(StorageCorrupt("bad UT bytes")), breaker)
    with pytest.raises(CorruptData, match="engine: bad UT bytes") as err:
        await store.read()
    assert code_for(err.value) is grpc.StatusCode.UNAVAILABLE
    assert breaker.state is BreakerState.OPEN


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (StorageError(), "engine: StorageError"),
        (TimeoutError(), "engine: TimeoutError"),
        (TimeoutError("read timed out"), "engine: TimeoutError: read timed out"),
    ],
    ids=["empty-storage-error", "empty-timeout", "timeout-with-text"],
)
async def test_a_message_always_names_its_cause(error: Exception, expected: str) -> None:
    """An exception without text is named by its class, never reported as ``engine: ``."""
    store = guard_store(Raises(error), CircuitBreaker("engine"))
    with pytest.raises(Unavailable) as err:
        await store.read()
    assert err.value.message == expected


async def test_an_engine_that_outlasts_its_deadline_is_named_with_the_time_it_had() -> None:
    """The guard's own deadline ending a call says how long the engine was given."""
    store = guard_store(Hangs(), CircuitBreaker("cassandra"))
    serving(0.3)
    async with asyncio.timeout(30):  # only a guard against hanging the suite
        with pytest.raises(Unavailable, match=r"^cassandra: timed out after \d+\.\d s$"):
            await store.read()


def test_only_the_guard_lets_storage_errors_into_the_server() -> None:
    """Storage errors cross into server/ at one door, the guard: even the Iterator's start-up
    check runs each level's reads through it, and reads the refusal as `EngineRejected`."""
    root = Path(__file__).resolve().parents[3]
    readers = set()
    for path in sorted((root / "server").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        if any(
            isinstance(node, ast.ImportFrom) and node.module == "storage.errors"
            for node in ast.walk(tree)
        ):
            readers.add(path.relative_to(root).as_posix())
    assert readers == {"server/runtime/guard.py"}
