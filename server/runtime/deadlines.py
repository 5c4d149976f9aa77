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
held to the call's deadline.
"""

from __future__ import annotations

import asyncio
import contextvars

__all__ = ["engine_deadline", "serving"]

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
