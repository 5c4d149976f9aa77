"""``grpc.health.v1`` with every method of the current contract, following the engines.

grpcio-health-checking's async servicer implements Check and Watch but not List (added to
the health proto later), so a List call died with UNIMPLEMENTED and a Python class name in
its details. List answers every registered service's status. `HealthMonitor` sets each
service's status from its engines' circuit breakers.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from typing import Any

from grpc_health.v1 import health_pb2
from grpc_health.v1._async import HealthServicer

from server.runtime.breaker import BreakerState, CircuitBreaker
from server.runtime.workers import WorkerPool

__all__ = ["Health", "HealthMonitor"]


class Health(HealthServicer):  # type: ignore[misc]
    """The stock async servicer plus ``List``."""

    async def List(  # noqa: N802 - gRPC method name
        self, request: health_pb2.HealthListRequest, context: Any
    ) -> health_pb2.HealthListResponse:
        """Every service's status, the server's own ("") included."""
        return health_pb2.HealthListResponse(
            statuses={
                name: health_pb2.HealthCheckResponse(status=status)
                for name, status in self._server_status.items()
            }
        )


class HealthMonitor:
    """Keeps each service's health status in step with the breakers of its engines.

    A service is NOT_SERVING while a breaker it depends on is open (its engine is down: a
    load balancer should send its calls elsewhere) and SERVING otherwise — half-open
    included, so probe calls can reach it and close the breaker again. The server's own
    status ("", what a liveness probe asks) never follows an engine: a process that is up
    but whose database is down must not be restarted in a loop.
    """

    def __init__(
        self,
        health: Health,
        dependencies: Mapping[str, Iterable[CircuitBreaker]],
        *,
        interval_s: float = 0.25,
    ) -> None:
        self._health = health
        self._dependencies = {service: list(b) for service, b in dependencies.items()}
        self._interval_s = interval_s
        self._runner = WorkerPool("health-monitor", 1, self._follow)

    def start(self) -> None:
        """Starts following the breakers (inside the running loop)."""
        self._runner.start()

    async def stop(self) -> None:
        """Stops following (before the graceful-shutdown NOT_SERVING is set)."""
        await self._runner.stop()

    async def _follow(self) -> None:
        shown: dict[str, int] = {}
        while True:
            for service, breakers in self._dependencies.items():
                down = any(b.state is BreakerState.OPEN for b in breakers)
                status = (
                    health_pb2.HealthCheckResponse.NOT_SERVING
                    if down
                    else health_pb2.HealthCheckResponse.SERVING
                )
                if shown.get(service) != status:
                    shown[service] = status
                    await self._health.set(service, status)
            await asyncio.sleep(self._interval_s)
