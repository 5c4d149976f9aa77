"""Per-service health follows the engines' circuit breakers; the server's own never does."""

from __future__ import annotations

import asyncio

from grpc_health.v1 import health_pb2

from server.runtime.breaker import CircuitBreaker
from server.runtime.health import Health, HealthMonitor

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


async def status(health: Health, service: str) -> int:
    listed = await health.List(health_pb2.HealthListRequest(), context=None)
    return int(listed.statuses[service].status)


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0.01)


async def test_a_service_follows_its_engines_breaker_and_liveness_stays_up() -> None:
    """Open breaker: NOT_SERVING; half-open (probes may pass): SERVING; "" never moves."""
    clock = Clock()
    cassandra = CircuitBreaker("cassandra", failure_threshold=2, reset_timeout_s=5, clock=clock)
    sqlite = CircuitBreaker("sqlite", clock=clock)
    health = Health()
    for name in ("", "loom.v1.Inbox", "loom.v1.Summary"):
        await health.set(name, SERVING)
    monitor = HealthMonitor(
        health, {"loom.v1.Inbox": [cassandra], "loom.v1.Summary": [sqlite]}, interval_s=0.001
    )
    monitor.start()
    try:
        await settle()
        assert await status(health, "loom.v1.Inbox") == SERVING
        cassandra.on_failure()
        cassandra.on_failure()  # threshold reached: open
        await settle()
        assert await status(health, "loom.v1.Inbox") == NOT_SERVING
        assert await status(health, "loom.v1.Summary") == SERVING
        assert await status(health, "") == SERVING
        clock.now += 5  # the pause is over: half-open lets probes through
        await settle()
        assert await status(health, "loom.v1.Inbox") == SERVING
        cassandra.before_call()
        cassandra.on_failure()  # the probe failed: open again
        await settle()
        assert await status(health, "loom.v1.Inbox") == NOT_SERVING
        clock.now += 5
        cassandra.before_call()
        cassandra.on_success()  # the engine is back
        await settle()
        assert await status(health, "loom.v1.Inbox") == SERVING
    finally:
        await monitor.stop()
    await health.enter_graceful_shutdown()
    assert await status(health, "") == NOT_SERVING
