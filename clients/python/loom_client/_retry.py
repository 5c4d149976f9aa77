"""Retry policy: bounded exponential backoff with full jitter, inside the call's deadline.

Retrying is opt-in (per client or per call) because not every Loom RPC is idempotent: a
PostMessage retried after an UNAVAILABLE that happened mid-write may deliver twice, while a
WeaveMessage or a RecordDeliveryEvents retry changes nothing. Only codes that mean "try again
later" are retried -- UNAVAILABLE (connection or storage fault, circuit open) and
RESOURCE_EXHAUSTED (a full bulkhead, which rejects at once without doing the work). A
DEADLINE_EXCEEDED is never retried: the caller's time is spent, and retries always share the
single deadline of the logical call.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import grpc

__all__ = ["NO_RETRY", "RETRYABLE_CODES", "RetryPolicy"]

RETRYABLE_CODES = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.RESOURCE_EXHAUSTED})
"""Codes that are safe to retry: the server did not (or could not) do the work."""


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How a call is retried. The defaults retry up to 3 times within ~1 s of backoff."""

    max_attempts: int = 4
    """Attempts in total, the first included; 1 disables retrying."""
    initial_backoff_s: float = 0.05
    """Upper bound of the first pause; each later bound is `multiplier` times the previous."""
    max_backoff_s: float = 2.0
    """Cap on any single pause."""
    multiplier: float = 2.0
    """Growth of the pause bound per attempt."""
    retryable_codes: frozenset[grpc.StatusCode] = field(default=RETRYABLE_CODES)
    """Codes that trigger a retry; DEADLINE_EXCEEDED is refused here."""

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
        if self.initial_backoff_s < 0 or self.max_backoff_s < 0 or self.multiplier < 1:
            raise ValueError("backoffs must be >= 0 and multiplier >= 1")
        if grpc.StatusCode.DEADLINE_EXCEEDED in self.retryable_codes:
            raise ValueError("DEADLINE_EXCEEDED is never retried: the deadline is spent")

    def should_retry(self, code: grpc.StatusCode, attempt: int) -> bool:
        """Whether a failure with `code` on attempt number `attempt` (1-based) is retried."""
        return attempt < self.max_attempts and code in self.retryable_codes

    def backoff_s(self, attempt: int, rng: random.Random | None = None) -> float:
        """The pause after failed attempt `attempt` (1-based): uniform in [0, bound] (full jitter)."""
        bound = min(self.max_backoff_s, self.initial_backoff_s * self.multiplier ** (attempt - 1))
        return (rng or random).uniform(0.0, bound)


NO_RETRY = RetryPolicy(max_attempts=1)
"""The default: every call is attempted once."""
