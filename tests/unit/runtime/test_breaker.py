"""Circuit breaker: open after repeated faults, probe after a pause, close on success."""

from __future__ import annotations

import pytest

from server.runtime.breaker import BreakerState, CircuitBreaker
from server.runtime.errors import Unavailable


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class TestCircuitBreaker:
    def test_opens_after_threshold_and_fails_fast(self) -> None:
        """N consecutive failures open the circuit; calls are then refused."""
        clock = Clock()
        breaker = CircuitBreaker("db", failure_threshold=3, reset_timeout_s=5, clock=clock)
        for _ in range(3):
            breaker.before_call()
            breaker.on_failure()
        assert breaker.state is BreakerState.OPEN
        with pytest.raises(Unavailable):
            breaker.before_call()

    def test_success_resets_the_failure_count(self) -> None:
        """Failures must be consecutive to open the circuit."""
        breaker = CircuitBreaker("db", failure_threshold=2, clock=Clock())
        breaker.on_failure()
        breaker.on_success()
        breaker.on_failure()
        assert breaker.state is BreakerState.CLOSED

    def test_half_open_probe_closes_on_success(self) -> None:
        """After the pause one probe is let through; its success closes the circuit."""
        clock = Clock()
        breaker = CircuitBreaker("db", failure_threshold=1, reset_timeout_s=5, clock=clock)
        breaker.on_failure()
        clock.now = 5.0
        states = [breaker.state]
        breaker.before_call()
        with pytest.raises(Unavailable):
            breaker.before_call()  # only one probe at a time
        breaker.on_success()
        states.append(breaker.state)
        assert states == [BreakerState.HALF_OPEN, BreakerState.CLOSED]

    def test_half_open_probe_failure_reopens(self) -> None:
        """A failed probe re-opens the circuit for another pause."""
        clock = Clock()
        breaker = CircuitBreaker("db", failure_threshold=1, reset_timeout_s=5, clock=clock)
        breaker.on_failure()
        clock.now = 6.0
        breaker.before_call()
        breaker.on_failure()
        assert breaker.state is BreakerState.OPEN
        clock.now = 10.0
        assert breaker.state is BreakerState.OPEN

    def test_abandoned_probe_frees_its_place(self) -> None:
        """A cancelled probe does not wedge the breaker half-open forever."""
        clock = Clock()
        breaker = CircuitBreaker("db", failure_threshold=1, reset_timeout_s=1, clock=clock)
        breaker.on_failure()
        clock.now = 2.0
        breaker.before_call()
        breaker.on_abandon()
        breaker.before_call()  # a new probe may go
