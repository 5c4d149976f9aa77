"""Errors every storage adapter raises, whatever its engine.

Each adapter translates its driver's exceptions into these exactly once, at its boundary,
so the server never has to know a Cassandra, Bigtable or SQLite exception type.

    StorageError
    ├── StorageUnavailable   the engine cannot be reached, timed out or is overloaded
    ├── StorageCorrupt       stored data could not be decoded (a bug or a foreign writer)
    └── StorageRejected      the engine answered and refused the statement for good
                             (an undefined table or column, a syntax error)

Only `StorageUnavailable` is worth waiting out: a rejected statement fails the same way
every time it is sent, so whoever sent it gives up instead of retrying.
"""

from __future__ import annotations

__all__ = ["StorageCorrupt", "StorageError", "StorageRejected", "StorageUnavailable"]


class StorageError(Exception):
    """Base of engine faults; the gRPC layer answers UNAVAILABLE."""


class StorageUnavailable(StorageError):
    """The engine is down, unreachable, timing out or refusing work."""


class StorageCorrupt(StorageError):
    """Stored bytes do not decode; never retried."""


class StorageRejected(StorageError):
    """The engine is up and refused the statement as written: a table or column it does not
    have, a syntax error (SQLSTATE class 42; SQLite's "no such column"). Retrying cannot
    help, and it says nothing about the engine's health (a circuit breaker counts it as an
    answer). The message is the database's own."""
