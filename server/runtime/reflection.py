"""Server reflection that today's tools can use: v1 and v1alpha, method symbols included.

grpcio-reflection ships only ``grpc.reflection.v1alpha``; ghz, grpcui and newer grpcurl ask
``grpc.reflection.v1`` first. The two versions are the same messages on the wire, so one
servicer is registered under both names.

It also answers ``file_containing_symbol`` for a *method* (``loom.v1.Inbox.GetUnreadCount``),
which ghz sends before every run: the upb descriptor pool finds services and messages but not
their methods, so the stock servicer answered NOT_FOUND ("Symbol not found") and ghz refused
to start. A method symbol resolves to the file of its service.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import grpc
from grpc_reflection.v1alpha import _async as reflection_aio
from grpc_reflection.v1alpha import reflection_pb2

__all__ = ["SERVICE_NAMES", "enable_reflection"]

V1ALPHA = "grpc.reflection.v1alpha.ServerReflection"
V1 = "grpc.reflection.v1.ServerReflection"
SERVICE_NAMES = (V1, V1ALPHA)


class _Reflection(reflection_aio.ReflectionServicer):  # type: ignore[misc]
    """The stock async servicer, plus method symbols resolved to their service's file."""

    def _file_containing_symbol(self, request: Any, fully_qualified_name: str) -> Any:
        response = super()._file_containing_symbol(request, fully_qualified_name)
        if not response.HasField("error_response"):
            return response
        service_name, _, method = fully_qualified_name.rpartition(".")
        try:
            service = self._pool.FindServiceByName(service_name)
        except KeyError:
            return response
        if method not in service.methods_by_name:
            return response
        return super()._file_containing_symbol(request, service_name)


def enable_reflection(server: grpc.aio.Server, service_names: Iterable[str]) -> None:
    """Serves reflection for `service_names` under both the v1 and the v1alpha name."""
    servicer = _Reflection((*service_names, *SERVICE_NAMES))
    handlers = {
        "ServerReflectionInfo": grpc.stream_stream_rpc_method_handler(
            servicer.ServerReflectionInfo,
            request_deserializer=reflection_pb2.ServerReflectionRequest.FromString,
            response_serializer=reflection_pb2.ServerReflectionResponse.SerializeToString,
        )
    }
    for name in SERVICE_NAMES:
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(name, handlers),))
