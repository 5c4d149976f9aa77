"""Circuit breakers toward storage engines.

When an engine errors or times out repeatedly, further calls fail fast with UNAVAILABLE
instead of piling up on a sick database (the Yammer outage). After `reset_timeout_s` the
breaker lets a few probe calls through (half-open); a probe that succeeds closes it again,
one that fails re-opens it.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Callable

from server.runtime.errors import Unavailable

__all__ = ["BreakerState", "CircuitBreaker"]


class BreakerState(enum.Enum):
    """Closed: calls flow. Open: calls fail fast. Half-open: a few probes flow."""

    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"


class CircuitBreaker:
    """Counts consecutive failures; opens at `failure_threshold`; probes after a pause."""

    __slots__ = (
        "_clock",
        "_failures",
        "_half_open_max",
        "_opened_at",
        "_probes",
        "_reset_timeout_s",
        "_state",
        "_threshold",
        "name",
    )

    def __init__(
        self,
        name: str,
        *,
        failure_threshold: int = 5,
        reset_timeout_s: float = 5.0,
        half_open_max_calls: int = 1,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.name = name
        self._threshold = max(1, failure_threshold)
        self._reset_timeout_s = reset_timeout_s
        self._half_open_max = max(1, half_open_max_calls)
        self._clock = clock
        self._state = BreakerState.CLOSED
        self._failures = 0
        self._opened_at = 0.0
        self._probes = 0

    @property
    def state(self) -> BreakerState:
        """The current state, moving from open to half-open once the pause has passed."""
        if (
            self._state is BreakerState.OPEN
            and self._clock() - self._opened_at >= self._reset_timeout_s
        ):
            self._state = BreakerState.HALF_OPEN
            self._probes = 0
        return self._state

    def before_call(self) -> None:
        """Raises Unavailable when the call must not reach the engine."""
        state = self.state
        if state is BreakerState.OPEN:
            raise Unavailable(f"{self.name} is unavailable (circuit open)")
        if state is BreakerState.HALF_OPEN:
            if self._probes >= self._half_open_max:
                raise Unavailable(f"{self.name} is unavailable (circuit half-open)")
            self._probes += 1

    def on_success(self) -> None:
        """A call succeeded: the engine works, close the circuit."""
        self._failures = 0
        self._state = BreakerState.CLOSED

    def on_abandon(self) -> None:
        """A call was cancelled before it could tell success from failure: free its probe."""
        if self._state is BreakerState.HALF_OPEN and self._probes > 0:
            self._probes -= 1

    def on_failure(self) -> None:
        """A call failed with an engine fault (not a caller error)."""
        self._failures += 1
        if self._state is BreakerState.HALF_OPEN or self._failures >= self._threshold:
            self._state = BreakerState.OPEN
            self._opened_at = self._clock()
            self._failures = 0
