"""Engine calls end before the call's deadline as faults, unless the caller left too little time.

A hanging engine must open its breaker (its calls end as faults before the caller's deadline),
but a caller's very short deadline says nothing about the engine: the call's own deadline ends
it and the breaker hears nothing.
"""

from __future__ import annotations

import asyncio

import pytest

from server.runtime.breaker import BreakerState, CircuitBreaker
from server.runtime.deadlines import concurrently, engine_deadline, serving
from server.runtime.errors import Unavailable
from server.runtime.guard import guard_store


class Hangs:
    """Something with a coroutine method that never answers, like a hung engine."""

    async def read(self) -> None:
        await asyncio.Event().wait()


async def test_a_call_with_time_to_spare_gives_the_engine_a_deadline_before_its_own() -> None:
    """An engine call ends a little before the deadline of the call it serves."""
    loop = asyncio.get_running_loop()
    before = loop.time()
    serving(2.0)
    after = loop.time()
    deadline = engine_deadline()
    assert deadline is not None
    assert before + 1.0 < deadline < after + 2.0


async def test_a_very_short_call_gives_the_engine_no_deadline_of_its_own() -> None:
    """Too little time to leave a margin: the engine gets no deadline of its own."""
    serving(0.005)
    assert engine_deadline() is None


async def test_a_task_spawned_by_the_handler_is_not_held_to_the_call_deadline() -> None:
    """A background task started by a handler does not inherit the call's engine deadline."""
    serving(2.0)
    assert engine_deadline() is not None
    assert await asyncio.create_task(_deadline_in_own_task()) is None


async def _deadline_in_own_task() -> float | None:
    return engine_deadline()


async def test_a_hung_engine_fails_unavailable_before_the_deadline_and_counts() -> None:
    """An engine that hangs fails UNAVAILABLE before the call's deadline and opens its breaker."""
    breaker = CircuitBreaker("engine", failure_threshold=1)
    store = guard_store(Hangs(), breaker)
    serving(0.3)
    async with asyncio.timeout(30):  # only a guard against hanging the suite
        with pytest.raises(Unavailable):
            await store.read()
    assert breaker.state is BreakerState.OPEN


async def test_a_caller_deadline_too_short_to_judge_the_engine_is_not_a_fault() -> None:
    """A call whose own deadline is too short to judge the engine leaves the breaker closed."""
    breaker = CircuitBreaker("engine", failure_threshold=1)
    store = guard_store(Hangs(), breaker)
    serving(0.005)
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.005):
            await store.read()
    assert breaker.state is BreakerState.CLOSED


async def test_engine_calls_run_side_by_side_hold_the_call_deadline() -> None:
    """Hung engine calls a handler runs side by side fail UNAVAILABLE before the call's
    deadline, as one would alone: they are part of the call, not background work."""
    breaker = CircuitBreaker("engine", failure_threshold=2)
    store = guard_store(Hangs(), breaker)
    serving(0.3)
    async with asyncio.timeout(30):  # only a guard against hanging the suite
        with pytest.raises(Unavailable):
            await concurrently(store.read(), store.read())
    assert breaker.state is BreakerState.OPEN


async def test_side_by_side_results_come_in_order_and_a_failure_waits_for_the_rest() -> None:
    """`concurrently` answers in argument order; a failure is raised once every sibling has
    ended (a sibling is a breaker's probe, never abandoned half-way)."""
    assert await concurrently(_after(0.02, "a"), _after(0.0, "b")) == ["a", "b"]
    finished = asyncio.Event()

    async def fail() -> None:
        raise ValueError("bad")

    async def slow() -> None:
        await asyncio.sleep(0.05)
        finished.set()

    with pytest.raises(ValueError, match="bad"):
        await concurrently(slow(), fail())
    assert finished.is_set()


async def test_a_half_open_probe_beside_a_refused_call_still_closes_the_breaker() -> None:
    """Two engine calls side by side while the breaker is half open: one is its probe, the
    other is refused; the probe completes and closes the breaker for the next call."""
    now = [0.0]
    breaker = CircuitBreaker(
        "engine", failure_threshold=1, reset_timeout_s=1.0, half_open_max_calls=1,
        clock=lambda: now[0],
    )  # fmt: skip
    store = guard_store(Answers(), breaker)
    breaker.on_failure()
    now[0] = 2.0
    serving(5.0)
    with pytest.raises(Unavailable):
        await concurrently(store.read(), store.read())
    assert breaker.state is BreakerState.CLOSED


class Answers:
    """A healthy engine that takes a moment to answer."""

    async def read(self) -> str:
        await asyncio.sleep(0.01)
        return "ok"


async def test_side_by_side_work_outside_a_call_has_no_deadline() -> None:
    """Outside a served call (background work) the parts get no engine deadline either."""
    assert await asyncio.create_task(_parts()) == [None, None]


async def _parts() -> list[float | None]:
    return await concurrently(_deadline(), _deadline())


async def _deadline() -> float | None:
    return engine_deadline()


async def _after(delay: float, value: str) -> str:
    await asyncio.sleep(delay)
    return value
