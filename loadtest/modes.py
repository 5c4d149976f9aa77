"""The two ways to apply load: open loop at a fixed arrival rate, and closed loop.

Open loop (``run_fixed_rate``) is how real traffic arrives — users do not wait for each
other — so each operation's latency is measured from the moment it was *scheduled*, not
from when the client got round to sending it. A stalled server therefore shows up as a
queue of late operations with huge latencies instead of quietly lowering the send rate
(coordinated omission). In-flight operations are bounded so a dead server cannot make the
client exhaust memory; arrivals over the bound are counted as dropped.

Closed loop (``run_closed_loop``) answers "how fast can N callers go": each worker issues
the next operation as soon as the previous returns. Its latencies are honest per call but
its arrival rate adapts to the server, so use it for capacity, not for latency under load.

Errors never propagate: they are counted by gRPC status code name.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Awaitable, Callable

from loadtest.recorder import LatencyRecorder, PhaseStats

__all__ = ["Operation", "error_code", "run_closed_loop", "run_fixed_rate"]

Operation = Callable[[int], Awaitable[object]]
"""One unit of load; receives its 0-based index so workloads can pick inputs from it."""

_YIELD_EVERY = 64


def error_code(exc: BaseException) -> str:
    """gRPC status name for an RPC error (``UNAVAILABLE``), else the exception class name."""
    code = getattr(exc, "code", None)
    if callable(code):
        try:
            name = getattr(code(), "name", None)
        except Exception:  # a foreign .code() must not break accounting
            name = None
        if isinstance(name, str):
            return name
    if isinstance(exc, TimeoutError):
        return "CLIENT_TIMEOUT"
    return type(exc).__name__


def _planned_count(rate: float | None, duration_s: float | None, count: int | None) -> int:
    if count is None and duration_s is None:
        raise ValueError("give a duration, a count, or both")
    planned = count if count is not None else 1 << 62
    if duration_s is not None and rate is not None:
        planned = min(planned, int(duration_s * rate))
    return planned


async def _timed(op: Operation, index: int, start: float, recorder: LatencyRecorder) -> None:
    try:
        await op(index)
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # every failure is data, not a crash
        recorder.record_error(error_code(exc))
    else:
        recorder.record(time.perf_counter() - start)


async def run_fixed_rate(
    op: Operation,
    *,
    rate: float,
    duration_s: float | None = None,
    count: int | None = None,
    max_in_flight: int = 1000,
    recorder: LatencyRecorder | None = None,
) -> PhaseStats:
    """Issue ``op`` at ``rate`` per second for ``duration_s`` and/or ``count`` operations.

    Operation *i* is due at ``t0 + i / rate``; its latency runs from that instant. When
    ``max_in_flight`` operations are outstanding a due arrival is dropped (and counted)
    rather than queued, so the bound never delays later arrivals' clocks.
    """
    if rate <= 0:
        raise ValueError("rate must be positive")
    planned = _planned_count(rate, duration_s, count)
    rec = recorder if recorder is not None else LatencyRecorder()
    in_flight: set[asyncio.Task[None]] = set()
    t0 = time.perf_counter()
    for i in range(planned):
        due = t0 + i / rate
        delay = due - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        elif i % _YIELD_EVERY == 0:
            await asyncio.sleep(0)  # behind schedule: still let responses be processed
        if len(in_flight) >= max_in_flight:
            rec.record_drop()
            continue
        task = asyncio.create_task(_timed(op, i, due, rec))
        in_flight.add(task)
        task.add_done_callback(in_flight.discard)
    if in_flight:
        await asyncio.gather(*in_flight)
    return rec.stats(time.perf_counter() - t0)


async def run_closed_loop(
    op: Operation,
    *,
    concurrency: int,
    duration_s: float | None = None,
    count: int | None = None,
    recorder: LatencyRecorder | None = None,
) -> PhaseStats:
    """Run ``concurrency`` workers back-to-back until ``count`` ops or ``duration_s`` pass.

    With both limits the first one reached stops issuing; operations already started
    always finish and are recorded.
    """
    if concurrency < 1:
        raise ValueError("concurrency must be ≥ 1")
    planned = _planned_count(None, duration_s, count)
    rec = recorder if recorder is not None else LatencyRecorder()
    indices = itertools.count()
    t0 = time.perf_counter()
    deadline = t0 + duration_s if duration_s is not None else float("inf")

    async def worker() -> None:
        while True:
            i = next(indices)
            start = time.perf_counter()
            if i >= planned or start >= deadline:
                return
            await _timed(op, i, start, rec)

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return rec.stats(time.perf_counter() - t0)
