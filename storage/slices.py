"""Consecutive slices of a sequence: how every layer splits work into bounded calls.

Engines bound what one call may carry (SQLite's bound parameters, Cassandra IN lists,
Bigtable mutations per request, the Inbox's fan-out chunks), so a long list is sent as
several calls of at most ``size`` items. ``itertools.batched`` (Python 3.12) would do, but
Loom runs on 3.11; slicing also keeps each part the sequence type it came from (a list's
slices are lists), which drivers binding an IN list want.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TypeVar

__all__ = ["slices"]

T = TypeVar("T")


def slices(items: Sequence[T], size: int, *, start: int = 0) -> Iterator[Sequence[T]]:
    """``items[start:]`` in consecutive slices of at most ``size`` items."""
    for i in range(start, len(items), size):
        yield items[i : i + size]
