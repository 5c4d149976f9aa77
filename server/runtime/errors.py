"""The one error hierarchy of Loom's domain, free of gRPC so domain code can raise it.

    LoomError
    ├── InvalidArgument      bad input; carries field violations
    ├── NotFound             the named thing does not exist
    ├── FailedPrecondition   the request is valid but the state forbids it
    │   └── EngineRejected   an engine refused a statement as written (no retry helps)
    ├── ResourceExhausted    a bulkhead or queue is full; retry later
    ├── Unavailable          an engine is down or the circuit breaker is open
    │   └── CorruptData      stored bytes do not decode (a bug or a foreign writer)
    ├── DeadlineExceeded     the work did not finish in time
    ├── Unauthenticated      no credentials, or credentials that do not verify
    └── PermissionDenied     verified credentials without the scope the method needs

Two boundaries, one each way. Storage adapters raise `storage.errors.StorageError`
(translated once, inside the adapter); `server.runtime.guard` turns those into these errors
at the one door every store call passes, so domain code catches `LoomError` alone. Then
`server.runtime.status` maps each class to a gRPC status code, in one place.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "CorruptData",
    "DeadlineExceeded",
    "EngineRejected",
    "FailedPrecondition",
    "FieldViolation",
    "InvalidArgument",
    "LoomError",
    "NotFound",
    "PermissionDenied",
    "ResourceExhausted",
    "ResumeRequired",
    "ResyncRequired",
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


class EngineRejected(FailedPrecondition):
    """An engine answered and refused a statement as written (a table or column it lacks, a
    syntax error: `storage.errors.StorageRejected`). Retrying cannot help, and the engine is
    healthy. `reason` is the engine's own message, for callers that quote it on purpose."""

    def __init__(self, message: str, reason: str = "") -> None:
        super().__init__(message)
        self.reason = reason or message


class ResyncRequired(FailedPrecondition):
    """What the caller holds (a resume token) is older than what the server keeps: it must
    read the whole state again (ErrorInfo reason `RESYNC_REQUIRED`)."""

    info_reason = "RESYNC_REQUIRED"


class ResourceExhausted(LoomError):
    """A bounded resource (bulkhead, queue) is full; the caller should back off."""


class Unavailable(LoomError):
    """A dependency is down, or its circuit breaker is open; retrying later may work."""


class ResumeRequired(Unavailable):
    """A stream ended on purpose (the server drains, or the caller read too slowly): the
    caller reconnects with the last token it received (ErrorInfo reason `RESUME`)."""

    info_reason = "RESUME"


class CorruptData(Unavailable):
    """Stored bytes do not decode, whether the adapter or the domain decoded them: a bug or a
    foreign writer. Answered UNAVAILABLE like the engine fault it resembles; never retried."""


class DeadlineExceeded(LoomError):
    """The work ran out of time and was cancelled."""


class Unauthenticated(LoomError):
    """The call carries no bearer token, or one that does not verify (signature, exp, aud)."""


class PermissionDenied(LoomError):
    """The caller is authenticated but its token lacks the scope this method requires."""
