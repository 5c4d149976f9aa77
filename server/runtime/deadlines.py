"""The deadline of the call a task is serving, for the layers below the handler.

The interceptor cancels a call's work when its deadline passes; a cancelled storage call
tells the engine's circuit breaker nothing, so an engine that hangs or answers slower than
every deadline would never open its breaker — every call would wait out its whole deadline
and fail DEADLINE_EXCEEDED. `guard_store` therefore ends an engine call a little *before*
the call's deadline (`engine_deadline`), as an engine fault: the breaker counts it, opens,
and later calls fail fast with UNAVAILABLE.

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


def serving(timeout_s: float) -> None:
    """Records that the current task serves a call ending `timeout_s` from now."""
    loop = asyncio.get_running_loop()
    margin = min(_MARGIN_MAX_S, max(_MARGIN_MIN_S, 0.1 * timeout_s))
    _CALL.set((asyncio.current_task(), loop.time() + timeout_s - margin))


def engine_deadline() -> float | None:
    """When an engine call of the current task must be given up (loop time), if ever."""
    found = _CALL.get()
    if found is None or found[0] is not asyncio.current_task():
        return None
    return found[1]
