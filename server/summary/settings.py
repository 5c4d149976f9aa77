"""Summary's settings: when an exact recipient set becomes a sketch, and how hard a write
retries.

Loaded with every other setting by `server.config` (``[summary]``).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["SummarySettings"]


@dataclass(frozen=True, slots=True)
class SummarySettings:
    """Summary: when an exact recipient set becomes a sketch, and how hard a write retries."""

    exact_threshold: int = 250
    """Recipients per status kept as an exact id set (Remind: 99 % of messages have <= 250).
    Stored in each new summary; existing summaries keep the threshold they were created with."""
    exact_byte_budget: int = 16 * 1024
    """UTF-8 bytes of exact ids per status before promotion, whatever the count."""
    cpc_lg_k: int = 13
    """log2 of the CPC sketch's k above the exact threshold (13: ~0.6 % mean error, ~4.9 KB
    per status; each step down halves the bytes and multiplies the error by 1.41). Stored in
    each new summary; existing summaries keep theirs."""
    max_retries: int = 10
    """Optimistic-concurrency attempts per RecordDeliveryEvents before UNAVAILABLE."""
    retry_base_s: float = 0.002
    """First backoff after a lost conditional write; doubles per attempt, fully jittered."""
    retry_max_s: float = 0.1
    """Cap of one backoff."""
