"""ErasureLog: which subjects were erased, as keyed hashes only, kept apart from their data.

A subject-level erasure (a mailbox unwoven, an inbox deleted, a recipient erased) removes the
subject's rows from its service's store. A backup or a dump taken before it still holds
them; `loom restore` and `loom load` read this log and erase again whatever they brought
back. The log must not itself keep what it erased, so it holds an HMAC of each subject under
a key kept outside the log (`server.erasures.SubjectHasher`): from the log alone no one can
say whose data was erased, nor test a guessed id without the key.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

__all__ = ["Erasure", "ErasureLog"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Erasure:
    """One subject erased from one service."""

    service: str
    """The service's registry name (``threadweaver``, ``inbox``, ``summary``, ``templates``,
    ``iterator``)."""
    subject: bytes
    """The keyed hash of the subject's id (never the id)."""
    erased_at_ms: int
    """When it was first recorded, in milliseconds since the Unix epoch."""


class ErasureLog(Protocol):
    """The erasure log's store."""

    async def record(self, erasures: Sequence[Erasure]) -> None:
        """Adds `erasures`; one already present keeps its first time (idempotent)."""
        ...

    async def subjects(self, service: str) -> frozenset[bytes]:
        """The hashes of every subject erased from `service`."""
        ...

    async def count(self) -> int:
        """Entries in the log, every service together."""
        ...

    async def close(self) -> None:
        """Releases the store."""
        ...
