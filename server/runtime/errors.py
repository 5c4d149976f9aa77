"""The one error hierarchy of Loom's domain, free of gRPC so domain code can raise it.

    LoomError
    ├── InvalidArgument      bad input; carries field violations
    ├── NotFound             the named thing does not exist
    ├── FailedPrecondition   the request is valid but the state forbids it
    ├── ResourceExhausted    a bulkhead or queue is full; retry later
    ├── Unavailable          an engine is down or the circuit breaker is open
    ├── DeadlineExceeded     the work did not finish in time
    ├── Unauthenticated      no credentials, or credentials that do not verify
    └── PermissionDenied     verified credentials without the scope the method needs

`server.runtime.status` maps each class to a gRPC status code, in one place. Storage
adapters raise `storage.errors.StorageError` (translated once, inside the adapter); the
runtime maps those to UNAVAILABLE.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "DeadlineExceeded",
    "FailedPrecondition",
    "FieldViolation",
    "InvalidArgument",
    "LoomError",
    "NotFound",
    "PermissionDenied",
    "ResourceExhausted",
    "Unauthenticated",
    "Unavailable",
]


@dataclass(frozen=True, slots=True)
class FieldViolation:
    """One bad field: its path in the request (``messages[3].gid``) and what is wrong."""

    field: str
    description: str


class LoomError(Exception):
    """Base of every error Loom reports to a caller on purpose."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class InvalidArgument(LoomError):
    """The request is malformed; `violations` names every bad field."""

    def __init__(self, violations: list[FieldViolation], message: str | None = None) -> None:
        if not violations:
            raise ValueError("InvalidArgument needs at least one violation")
        text = message or "; ".join(f"{v.field}: {v.description}" for v in violations[:5])
        if len(violations) > 5:
            text += f"; and {len(violations) - 5} more"
        super().__init__(text)
        self.violations = violations


class NotFound(LoomError):
    """The thing the request names does not exist."""


class FailedPrecondition(LoomError):
    """The request is well formed but the current state does not allow it."""


class ResourceExhausted(LoomError):
    """A bounded resource (bulkhead, queue) is full; the caller should back off."""


class Unavailable(LoomError):
    """A dependency is down, or its circuit breaker is open; retrying later may work."""


class DeadlineExceeded(LoomError):
    """The work ran out of time and was cancelled."""


class Unauthenticated(LoomError):
    """The call carries no bearer token, or one that does not verify (signature, exp, aud)."""


class PermissionDenied(LoomError):
    """The caller is authenticated but its token lacks the scope this method requires."""
