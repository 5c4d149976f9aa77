"""``grpc.health.v1`` with every method of the current contract.

grpcio-health-checking's async servicer implements Check and Watch but not List (added to
the health proto later), so a List call died with UNIMPLEMENTED and a Python class name in
its details. List answers every registered service's status.
"""

from __future__ import annotations

from typing import Any

from grpc_health.v1 import health_pb2
from grpc_health.v1._async import HealthServicer

__all__ = ["Health"]


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
