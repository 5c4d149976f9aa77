"""ThreadWeaver's settings: the batch and read limits and the spam guard.

Loaded with every other setting by `server.config` (``[threadweaver]``).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ThreadWeaverSettings"]


@dataclass(frozen=True, slots=True)
class ThreadWeaverSettings:
    """ThreadWeaver limits."""

    max_batch: int = 1000
    """Messages per WeaveMessages call."""
    max_resolve: int = 100
    """Threads per ResolveThreads call."""
    default_max_threads: int = 10_000
    """Spam guard: member threads above which a unified thread is oversized."""
    max_closure: int = 10_000
    """Unified threads a merge closure may hold before the read is refused."""
    retire_grace_s: float = 60.0
    """How long a deletion keeps the UT ids it retired marked, so that a weave that read one
    before the rebuild (at most its 30 s deadline ago) still sees the mark and repairs."""
