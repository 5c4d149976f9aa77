"""The wall clock every layer reads, in whole milliseconds since the Unix epoch.

Stored timestamps (queue visibility, template ages, job records, Bigtable cell times) are
integers of milliseconds, and they are compared across processes and replicas, so there is
one reading of the clock: `time.time_ns()` divided exactly, never a float multiplied and
truncated. It lives in `storage` because storage may not import `server`, while `server`
may import `storage`.
"""

from __future__ import annotations

import time

__all__ = ["now_ms"]


def now_ms() -> int:
    """Milliseconds since the Unix epoch, from the wall clock (not monotonic: the value is
    stored and read by other processes)."""
    return time.time_ns() // 1_000_000
