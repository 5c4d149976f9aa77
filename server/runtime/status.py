"""The one place where Loom's errors become gRPC status codes.

It maps the domain hierarchy (`server.runtime.errors`) only: storage errors never get this
far, because `server.runtime.guard` turns them into domain errors at the store's door.
Invalid input carries a ``google.rpc.BadRequest`` detail with one field violation per bad
field, readable by any gRPC client (grpcurl prints it; Go's status.FromError finds it).
"""

from __future__ import annotations

from dataclasses import dataclass

import grpc
from google.protobuf import any_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_status import rpc_status

from server.runtime import errors

__all__ = ["ERROR_DOMAIN", "code_for", "is_unmapped", "rich_status"]

ERROR_DOMAIN = "loom.v1"
"""The ErrorInfo domain of the reasons Loom's errors carry (`RESYNC_REQUIRED`, `RESUME`)."""

_CODES: tuple[tuple[type[BaseException], grpc.StatusCode], ...] = (
    (errors.InvalidArgument, grpc.StatusCode.INVALID_ARGUMENT),
    (errors.NotFound, grpc.StatusCode.NOT_FOUND),
    (errors.FailedPrecondition, grpc.StatusCode.FAILED_PRECONDITION),
    (errors.ResourceExhausted, grpc.StatusCode.RESOURCE_EXHAUSTED),
    (errors.Unavailable, grpc.StatusCode.UNAVAILABLE),
    (errors.DeadlineExceeded, grpc.StatusCode.DEADLINE_EXCEEDED),
    (errors.Unauthenticated, grpc.StatusCode.UNAUTHENTICATED),
    (errors.PermissionDenied, grpc.StatusCode.PERMISSION_DENIED),
    (TimeoutError, grpc.StatusCode.DEADLINE_EXCEEDED),
    (NotImplementedError, grpc.StatusCode.UNIMPLEMENTED),
)


def code_for(exc: BaseException) -> grpc.StatusCode:
    """The status code a caller sees for `exc`; INTERNAL for anything unforeseen (and only
    for that: no mapped error is INTERNAL, so INTERNAL always means a bug)."""
    for kind, code in _CODES:
        if isinstance(exc, kind):
            return code
    return grpc.StatusCode.INTERNAL


def is_unmapped(exc: BaseException) -> bool:
    """Whether no layer mapped `exc`: a bug, answered INTERNAL, logged and counted."""
    return code_for(exc) is grpc.StatusCode.INTERNAL


def _message(exc: BaseException, code: grpc.StatusCode, request_id: str | None) -> str:
    if isinstance(exc, errors.LoomError):
        return exc.message
    if code is grpc.StatusCode.DEADLINE_EXCEEDED:
        return "deadline exceeded"
    if code is grpc.StatusCode.UNIMPLEMENTED:
        return "not implemented yet"
    # Never the class or its message (they can hold internals, or the caller's own data);
    # the request id finds the traceback in the server's log.
    return f"internal error (request id {request_id})" if request_id else "internal error"


@dataclass(frozen=True, slots=True)
class _Status(grpc.Status):  # type: ignore[misc]
    code: grpc.StatusCode
    details: str
    trailing_metadata: tuple[tuple[str, str | bytes], ...]


_DETAIL_BUDGET = 6 * 1024
"""Bytes of BadRequest detail at most. The status travels base64-encoded in trailing
metadata, and clients refuse metadata over 16 KiB (the call then fails RESOURCE_EXHAUSTED
instead of INVALID_ARGUMENT): a 1,000-message batch with a bad field in each must still
arrive as INVALID_ARGUMENT, naming the first violations and how many more there are."""


def _bad_request(violations: list[errors.FieldViolation]) -> error_details_pb2.BadRequest:
    bad = error_details_pb2.BadRequest()
    size = 0
    for i, v in enumerate(violations):
        entry = error_details_pb2.BadRequest.FieldViolation(
            field=v.field, description=v.description[:512]
        )
        size += entry.ByteSize() + 3
        if size > _DETAIL_BUDGET:
            bad.field_violations.add(description=f"and {len(violations) - i} more violations")
            break
        bad.field_violations.append(entry)
    return bad


def rich_status(exc: BaseException, request_id: str | None = None) -> grpc.Status:
    """A `grpc.Status` for `exc`, with BadRequest field violations for invalid input."""
    code = code_for(exc)
    message = _message(exc, code, request_id)[:1024]
    proto = status_pb2.Status(code=code.value[0], message=message)
    if isinstance(exc, errors.InvalidArgument):
        bad = _bad_request(exc.violations)
        detail = any_pb2.Any()
        detail.Pack(bad)
        proto.details.append(detail)
    info = getattr(exc, "info_reason", "")
    if info:
        detail = any_pb2.Any()
        detail.Pack(error_details_pb2.ErrorInfo(reason=info, domain=ERROR_DOMAIN))
        proto.details.append(detail)
    assert proto.code != code_pb2.OK
    status = rpc_status.to_status(proto)
    extra = (("x-request-id", request_id),) if request_id else ()
    return _Status(status.code, status.details, (*status.trailing_metadata, *extra))
