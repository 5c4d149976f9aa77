"""The deadline of the call a task is serving, for the layers below the handler.

The interceptor cancels a call's work when its deadline passes; a cancelled storage call
tells the engine's circuit breaker nothing, so an engine that hangs or answers slower than
every deadline would never open its breaker — every call would wait out its whole deadline
and fail DEADLINE_EXCEEDED. `guard_store` therefore ends an engine call a little *before*
the call's deadline (`engine_deadline`), as an engine fault: the breaker counts it, opens,
and later calls fail fast with UNAVAILABLE.

An engine call that starts with less than `_MIN_BUDGET_S` left before that point gets no
engine deadline of its own: running out of so little time says the caller was impatient,
not that the engine is faulty. The call's own deadline then ends it (DEADLINE_EXCEEDED)
and the breaker hears nothing — a client sending 5 ms deadlines must not open the breaker
for everyone else.

The deadline belongs to the task that serves the call. A task it spawns inherits the
context variable but is not that task, so background work started from a handler is never
held to the call's deadline. Engine calls a handler runs side by side are part of the call,
not background work: `concurrently` runs them in tasks that hold the call's deadline (a
plain `asyncio.gather` would run them with none, and a hung engine would then outlast the
call as DEADLINE_EXCEEDED instead of failing UNAVAILABLE).
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Coroutine
from typing import Any

__all__ = ["concurrently", "engine_deadline", "serving"]

_CALL: contextvars.ContextVar[tuple[asyncio.Task[object] | None, float] | None] = (
    contextvars.ContextVar("loom_call_deadline", default=None)
)
_MARGIN_MIN_S = 0.05
_MARGIN_MAX_S = 0.5
_MIN_BUDGET_S = 0.05


def serving(timeout_s: float) -> None:
    """Records that the current task serves a call ending `timeout_s` from now."""
    loop = asyncio.get_running_loop()
    margin = min(_MARGIN_MAX_S, max(_MARGIN_MIN_S, 0.1 * timeout_s))
    _CALL.set((asyncio.current_task(), loop.time() + timeout_s - margin))


def engine_deadline() -> float | None:
    """When an engine call of the current task must be given up (loop time), if ever.

    None when the task serves no call, or when less than `_MIN_BUDGET_S` is left for the
    engine: the call's own deadline governs then.
    """
    found = _CALL.get()
    if found is None or found[0] is not asyncio.current_task():
        return None
    if found[1] - asyncio.get_running_loop().time() < _MIN_BUDGET_S:
        return None
    return found[1]


async def concurrently(*coros: Coroutine[Any, Any, Any]) -> list[Any]:
    """Awaits `coros` side by side as part of the call the current task serves, if any.

    Each runs in a task of its own that holds the call's engine deadline. The results come
    in order. Every one runs to its end (its engine deadline bounds it) before the first
    failure, in argument order, is raised: cancelling a sibling instead would abandon a
    half-open breaker's probe that was about to succeed, and a recovered engine's breaker
    then never closed (a weave probes with two calls at once).
    """
    found = _CALL.get()
    call = found if found is not None and found[0] is asyncio.current_task() else None
    loop = asyncio.get_running_loop()
    tasks = []
    for coro in coros:
        context = contextvars.copy_context()
        task = loop.create_task(coro, context=context)
        if call is not None:
            context.run(_CALL.set, (task, call[1]))
        tasks.append(task)
    results = await asyncio.gather(*tasks, return_exceptions=True)
    for result in results:
        if isinstance(result, BaseException):
            raise result
    return list(results)
