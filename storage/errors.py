"""Errors every storage adapter raises, whatever its engine.

Each adapter translates its driver's exceptions into these exactly once, at its boundary,
so the server never has to know a Cassandra, Bigtable or SQLite exception type.

    StorageError
    ├── StorageUnavailable   the engine cannot be reached, timed out or is overloaded
    └── StorageCorrupt       stored data could not be decoded (a bug or a foreign writer)
"""

from __future__ import annotations

__all__ = ["StorageCorrupt", "StorageError", "StorageUnavailable"]


class StorageError(Exception):
    """Base of engine faults; the gRPC layer answers UNAVAILABLE."""


class StorageUnavailable(StorageError):
    """The engine is down, unreachable, timing out or refusing work."""


class StorageCorrupt(StorageError):
    """Stored bytes do not decode; never retried."""
