"""The shape of a service's store as portable records: how it is scanned, loaded and compared.

Each service implements it beside its own data model (``server/<service>/portable.py``) and
declares it in its mount (`PortableService`); the registry (`server.registry`) lists them for
`loom dump`, `load` and `diff`. A `ServiceData` wraps one opened store of one service. `scan` streams its records as dump
messages (`loom.v1.dump`), page by page; `load` writes a batch of them into the store,
idempotently, merging with what the store already holds the way the service's data model
does (ThreadWeaver unions conversations, Summary merges sketches, an inbox row keeps its
newest message, a template keeps its newest formation, a job present is left alone);
`differences` compares the store with another one semantically, as the service's callers
would see it; `subjects` and `erase` let a restore or a load erase again what the erasure
log names.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from google.protobuf.message import Message

from storage.engines import Port

if TYPE_CHECKING:
    from server.config import Settings

__all__ = [
    "PAGE",
    "ActiveJobs",
    "Kind",
    "PortableService",
    "ServiceData",
    "as_record",
    "same_service",
]

PAGE = 1000
"""Records per scan page and per load batch: memory stays bounded by it."""


@dataclass(frozen=True, slots=True)
class Kind:
    """One record kind of a service: its file and its message type."""

    name: str
    message: type[Message]


class ServiceData(Protocol):
    """One service's opened store, as portable records."""

    kinds: tuple[Kind, ...]

    def scan(self) -> AsyncIterator[tuple[str, list[Message]]]:
        """Every record, as (kind, page of messages), kinds in `kinds` order."""
        ...

    async def load(self, kind: str, records: Sequence[Message]) -> None:
        """Writes `records` of `kind` (idempotent; merged with what is there)."""
        ...

    async def differences(self, other: ServiceData, limit: int) -> list[str]:
        """Up to `limit` ways `other`'s store differs from this one, as callers see it."""
        ...

    def subjects(self) -> AsyncIterator[str]:
        """Every subject the service's erasures name that this store holds (mailbox gids,
        inbox ids, recipients, job ids: what the service records in the erasure log), each
        at least once, so `loom restore` and `loom load` can find those the log says were
        erased (`server.portable.erasures`)."""
        ...

    async def erase(self, subjects: Sequence[str]) -> None:
        """Erases `subjects` the way the service's own erasure does; returns once nothing of
        them is left in the store."""
        ...

    async def close(self) -> None:
        """Closes the store."""
        ...


class ActiveJobs(ValueError):
    """An Iterator store with running or paused jobs: a dump of it would be a copy of work in
    flight that no store can resume, so it is refused."""


def as_record(record: Message, kind: type[Any]) -> Any:
    if not isinstance(record, kind):
        raise TypeError(f"expected {kind.DESCRIPTOR.full_name}, got {type(record).__name__}")
    return record


def same_service(mine: Any, other: ServiceData) -> Any:
    if type(other) is not type(mine):
        raise TypeError("stores of different services cannot be compared")
    return other


@dataclass(frozen=True, slots=True)
class PortableService:
    """What `loom dump`/`load`/`diff` need of one service: the port its store is on (which
    says which engine the settings chose), its embedded file, its record kinds, and how to
    open its store as `ServiceData`. Each service's mount declares its own."""

    port: Port[Any]
    sqlite_file: str
    kinds: tuple[Kind, ...]
    open: Callable[[Settings], Awaitable[ServiceData]]

    def engine(self, settings: Settings) -> str:
        """The engine `settings` give this service's store."""
        return str(self.port.chosen(settings.storage).name)
