"""The one error type a Loom client raises, translated from grpc at exactly one boundary.

::

    LoomError                 any failed RPC: .code, .message, .field_violations, .reason,
                              .domain, .request_id
      (raised ``from`` the grpc.aio.AioRpcError it translates)

INVALID_ARGUMENT answers carry a ``google.rpc.BadRequest`` detail (in the
``grpc-status-details-bin`` trailer) with one violation per bad field, and some answers a
``google.rpc.ErrorInfo`` whose reason tells apart failures of one code (WatchInbox's
FAILED_PRECONDITION ``RESYNC_REQUIRED``, UNAVAILABLE ``RESUME``); both are decoded here so
callers never touch ``grpc_status`` themselves.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import grpc
from google.rpc import error_details_pb2, status_pb2
from grpc_status import rpc_status

__all__ = ["FieldViolation", "LoomError", "translate_errors"]

_REQUEST_ID_KEY = "x-request-id"


@dataclass(frozen=True, slots=True)
class FieldViolation:
    """One bad field of a request, as the server named it."""

    field: str
    """Path of the field in the request, e.g. ``"messages[3].thread_id"``."""
    description: str
    """Why the value was rejected, e.g. ``"must not be empty"``."""


class LoomError(Exception):
    """A Loom RPC failed; `code` says how, `field_violations` which fields were invalid."""

    code: grpc.StatusCode
    """The gRPC status code, e.g. ``grpc.StatusCode.INVALID_ARGUMENT``."""
    message: str
    """The server's human-readable status message."""
    field_violations: tuple[FieldViolation, ...]
    """The ``google.rpc.BadRequest`` field violations (empty unless INVALID_ARGUMENT)."""
    request_id: str | None
    """The server's ``x-request-id`` for this call, to find its log line."""
    reason: str | None
    """The ``google.rpc.ErrorInfo`` reason, e.g. ``"RESYNC_REQUIRED"``; None without one."""
    domain: str | None
    """The ``google.rpc.ErrorInfo`` domain that scopes `reason`; None without one."""

    def __init__(
        self,
        code: grpc.StatusCode,
        message: str,
        field_violations: tuple[FieldViolation, ...] = (),
        request_id: str | None = None,
        *,
        reason: str | None = None,
        domain: str | None = None,
    ) -> None:
        super().__init__(f"{code.name}: {message}")
        self.code = code
        self.message = message
        self.field_violations = field_violations
        self.request_id = request_id
        self.reason = reason
        self.domain = domain

    @property
    def violations_by_field(self) -> dict[str, str]:
        """The field violations as ``{field: description}``."""
        return {v.field: v.description for v in self.field_violations}

    @classmethod
    def from_rpc_error(cls, error: grpc.aio.AioRpcError) -> LoomError:
        """Translates a failed grpc.aio call, decoding its rich status details."""
        code: grpc.StatusCode = error.code()
        message: str = error.details() or ""
        status = _status(error)
        info = _error_info(status)
        return cls(
            code,
            message,
            _field_violations(status),
            _request_id(error),
            reason=info.reason if info is not None else None,
            domain=info.domain if info is not None else None,
        )


@contextmanager
def translate_errors() -> Iterator[None]:
    """Re-raises any `grpc.aio.AioRpcError` inside the block as a `LoomError` from it."""
    try:
        yield
    except grpc.aio.AioRpcError as exc:
        raise LoomError.from_rpc_error(exc) from exc


def _status(error: grpc.aio.AioRpcError) -> status_pb2.Status | None:
    try:
        status: status_pb2.Status | None = rpc_status.from_call(error)
    except ValueError:  # a status detail that contradicts the call's code: ignore the detail
        return None
    return status


def _error_info(status: status_pb2.Status | None) -> error_details_pb2.ErrorInfo | None:
    for detail in () if status is None else status.details:
        info = error_details_pb2.ErrorInfo()
        if detail.Unpack(info):
            return info
    return None


def _field_violations(status: status_pb2.Status | None) -> tuple[FieldViolation, ...]:
    if status is None:
        return ()
    found: list[FieldViolation] = []
    for detail in status.details:
        bad = error_details_pb2.BadRequest()
        if detail.Unpack(bad):
            found.extend(FieldViolation(v.field, v.description) for v in bad.field_violations)
    return tuple(found)


def _request_id(error: grpc.aio.AioRpcError) -> str | None:
    for key, value in error.trailing_metadata() or ():
        if key == _REQUEST_ID_KEY:
            return value if isinstance(value, str) else value.decode()
    return None
