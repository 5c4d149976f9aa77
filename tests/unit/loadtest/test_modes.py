"""Open-loop and closed-loop load generation."""

from __future__ import annotations

import asyncio
import enum

import pytest

from loadtest.modes import error_code, run_closed_loop, run_fixed_rate


class _Code(enum.Enum):
    UNAVAILABLE = 14


class _FakeRpcError(Exception):
    """Shaped like grpc.aio.AioRpcError: ``code()`` returns a StatusCode-like enum."""

    def code(self) -> _Code:
        return _Code.UNAVAILABLE


class TestFixedRate:
    async def test_paces_operations_at_the_requested_rate(self) -> None:
        """200 ops/s for 0.5 s issues 100 operations, none before its scheduled instant.

        Only the lower bounds are deterministic (a busy machine may run late, never early),
        so that is what is checked: the schedule is kept, whatever the machine's load.
        """
        started: dict[int, float] = {}
        loop = asyncio.get_running_loop()

        async def op(i: int) -> None:
            started[i] = loop.time()

        t0 = loop.time()
        stats = await run_fixed_rate(op, rate=200, duration_s=0.5)
        assert stats.ok == 100
        assert sorted(started) == list(range(100))
        early = [i for i, t in started.items() if t - t0 < i / 200 - 0.002]
        assert early == []
        assert stats.wall_s >= 99 / 200

    async def test_latency_counts_from_the_scheduled_start(self) -> None:
        """A slow server shows as growing latency, not as a quietly lower send rate.

        With one operation allowed in flight and each taking 50 ms at 100 ops/s, most
        arrivals are dropped (and counted); none is silently delayed.
        """

        async def slow(_i: int) -> None:
            await asyncio.sleep(0.05)

        stats = await run_fixed_rate(slow, rate=100, count=30, max_in_flight=1)
        assert stats.ok + stats.dropped == 30
        assert stats.dropped >= 20
        assert stats.p50_ms >= 45

    async def test_errors_are_counted_by_status_name(self) -> None:
        """Failures never raise out of the run; they are tallied by gRPC code name."""

        async def flaky(i: int) -> None:
            if i % 2:
                raise _FakeRpcError
            if i % 3 == 0:
                raise ValueError("bad")

        stats = await run_fixed_rate(flaky, rate=1000, count=12)
        assert stats.errors == {"UNAVAILABLE": 6, "ValueError": 2}
        assert stats.ok == 4

    async def test_needs_a_limit(self) -> None:
        """Without a duration or count the run would never end, so it is refused."""
        with pytest.raises(ValueError, match="duration"):
            await run_fixed_rate(_noop, rate=10)


class TestClosedLoop:
    async def test_runs_exactly_count_ops_with_bounded_concurrency(self) -> None:
        """N workers never have more than N operations outstanding and stop at count."""
        active = 0
        peak = 0
        seen: list[int] = []

        async def op(i: int) -> None:
            nonlocal active, peak
            active += 1
            peak = max(peak, active)
            await asyncio.sleep(0.001)
            seen.append(i)
            active -= 1

        stats = await run_closed_loop(op, concurrency=4, count=40)
        assert stats.ok == 40
        assert sorted(seen) == list(range(40))
        assert peak == 4

    async def test_duration_bounds_the_run(self) -> None:
        """A duration-limited closed loop stops issuing once the duration has passed."""

        async def op(_i: int) -> None:
            await asyncio.sleep(0.01)

        stats = await run_closed_loop(op, concurrency=2, duration_s=0.2)
        assert stats.wall_s >= 0.2
        # Each op sleeps >= 10 ms, so a worker can start at most 21 before 0.2 s have passed
        # (however slow the machine is: a bound from below on each op, not on the run).
        assert 2 <= stats.ok <= 2 * 21


def test_error_code_names() -> None:
    """gRPC-shaped errors give their status name, timeouts CLIENT_TIMEOUT, others a class."""
    assert error_code(_FakeRpcError()) == "UNAVAILABLE"
    assert error_code(TimeoutError()) == "CLIENT_TIMEOUT"
    assert error_code(KeyError("x")) == "KeyError"


async def _noop(_i: int) -> None:
    return None
