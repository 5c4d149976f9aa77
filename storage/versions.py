"""Schema versions of Loom's stores: what a store holds, what this binary knows, the steps
between.

Every store records its layout's version in itself (a meta table or row beside its data, one
per engine family: `storage.sqlite.versions`, `storage.cassandra.versions`), so that a
release can open data written by any earlier one, and refuses data written by a later one
instead of misreading it. Version 1 is what release 1.0.0 wrote; a store holding data but
no record was written before versions were recorded, which is 1.0.0's layout too. A store
with nothing in it is created at the current version.

At open, each store runs the same sequence (`plan`, then its engine's runner):

1. read the recorded version (nothing is written yet);
2. a version above the binary's `Layout.current` stops with `StoreTooNew`, naming the store
   and both versions, before anything is written;
3. create what the current layout lacks (every schema statement is ``IF NOT EXISTS``:
   additive only), then run each pending `Step` in order and record its version right after
   it, so a process killed mid-upgrade resumes at the first unrecorded step. Steps are
   idempotent: a step killed before its record runs again from the start.

`loom serve --check-only` shows the same plans without writing (`storage.upgrades`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

import structlog

from storage.errors import StorageUnavailable

__all__ = [
    "TEMPLATES_V2",
    "THREADS_V2",
    "Layout",
    "Plan",
    "Step",
    "StoreTooNew",
    "apply",
    "inspected",
    "plan",
]

RunT = TypeVar("RunT")

_STDLIB = logging.getLogger("loom.storage.versions")


def _log(level: str, event: str, **fields: object) -> None:
    """One structured line in the server's log; where nothing configured structlog (a
    script opening stores through `storage.factory`), stdlib logging's, never stdout."""
    if structlog.is_configured():
        getattr(structlog.get_logger("loom.storage.versions"), level)(event, **fields)
    else:
        getattr(_STDLIB, level)("%s %s", event, fields)


class StoreTooNew(ValueError):
    """A store records a version this binary does not know: it was written (or upgraded) by
    a later release. `loom serve` stops with exit 2 and this message; nothing was written."""

    def __init__(self, where: str, found: int, known: int) -> None:
        super().__init__(
            f"{where} is at schema version {found}, newer than this release knows "
            f"(version {known}): it was written by a later Loom. Run that release or a later "
            "one; this one stops without writing to it"
        )
        self.where = where
        self.found = found
        self.known = known


THREADS_V2 = (
    "thread -> message edges and retired-UT marks kept, for deletions; threads woven before "
    "have none, so a deletion removes them without splitting their unified thread"
)
"""The ThreadStore's layout step to version 2, alike on every engine: the new tables (families)
are created by the layout itself and nothing is rewritten (1.0.0 kept no edges to backfill)."""


TEMPLATES_V2 = (
    "templates formed from now on are encoded v2 (spans); v1 rows still decode, none rewritten"
)
"""The TemplateStore's step to version 2, the same on every engine that holds it: only the
record changes, so each engine's step runs nothing."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Step(Generic[RunT]):
    """One migration: brings a store from version ``to - 1`` to ``to``."""

    to: int
    """The version the store is at once this step has run."""
    does: str
    """What it changes, for the log and ``--check-only`` (one line)."""
    run: RunT
    """The engine's work (a function of the engine's handle); idempotent."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Layout(Generic[RunT]):
    """A store's layout as this binary writes it, and the steps from version 1 to it."""

    store: str
    """The store's name in its version record (``threads``, ``jobs``)."""
    current: int
    """The version this binary writes and reads."""
    steps: tuple[Step[RunT], ...] = ()
    """Steps to 2, 3, ... `current`, in order."""

    def __post_init__(self) -> None:
        expected = list(range(2, self.current + 1))
        if [s.to for s in self.steps] != expected:
            raise ValueError(f"{self.store}: steps must lead to versions {expected}")


@dataclass(frozen=True, slots=True, kw_only=True)
class Plan(Generic[RunT]):
    """What opening a store will do (or did)."""

    where: str
    """The store as an operator finds it (``sqlite file data/inbox.sqlite3``)."""
    recorded: int | None
    """The version recorded in the store; None: none recorded."""
    start: int
    """The version the store holds: `recorded`, 1 for data without a record, or the current
    version for a store not created yet."""
    target: int
    """The binary's version of this store."""
    steps: tuple[Step[RunT], ...]
    """The steps to run, in order."""
    new: bool
    """Nothing is stored yet: the store is created at `target`."""

    @property
    def writes(self) -> bool:
        """Whether opening the store writes its layout or version record."""
        return self.new or self.recorded != self.target

    def describe(self) -> str:
        """One line for ``loom serve --check-only``."""
        if self.new:
            return f"{self.where}: not created yet; would be created at version {self.target}"
        if not self.steps and self.recorded == self.target:
            return f"{self.where}: version {self.target}, up to date"
        found = f"version {self.start}" + ("" if self.recorded is not None else " (unrecorded)")
        if not self.steps:
            return f"{self.where}: {found}; would record version {self.target}"
        what = "; ".join(f"to {s.to}: {s.does}" for s in self.steps)
        return f"{self.where}: {found}; would migrate to {self.target} ({what})"

    def log_step(self, step: Step[RunT]) -> None:
        """The log line of a step that has just run (and been recorded)."""
        _log(
            "info",
            "store migrated",
            store=self.where,
            version_before=step.to - 1,
            version_after=step.to,
            step=step.does,
        )

    def log_done(self) -> None:
        """The log line once a store that needed writing is at its target."""
        if self.new:
            _log("info", "store created", store=self.where, version=self.target)
        elif self.writes and self.start == self.target:
            _log("info", "store version recorded", store=self.where, version=self.target)
        elif self.writes:
            _log(
                "info",
                "store upgraded",
                store=self.where,
                version_before=self.start,
                version_after=self.target,
            )


def plan(layout: Layout[RunT], where: str, *, recorded: int | None, has_data: bool) -> Plan[RunT]:
    """The plan for a store at `where` that records `recorded` and holds data or not.

    Raises `StoreTooNew` for a version above `layout.current`, and `ValueError` for one
    below 1 (a record no Loom writes).
    """
    if recorded is not None and recorded > layout.current:
        raise StoreTooNew(where, recorded, layout.current)
    if recorded is not None and recorded < 1:
        raise ValueError(f"{where}: recorded schema version {recorded} is not a version")
    new = recorded is None and not has_data
    start = layout.current if new else (recorded or 1)
    steps = tuple(s for s in layout.steps if s.to > start)
    return Plan(
        where=where,
        recorded=recorded,
        start=start,
        target=layout.current,
        steps=steps,
        new=new,
    )


async def inspected(
    where: str, reading: Awaitable[Plan[RunT]], *, timeout_s: float, required: bool
) -> Plan[RunT] | None:
    """The plan `reading` returns, or None when the engine does not answer within
    `timeout_s` and the store may open without it (`required` false).

    A store whose schema the operator owns opens without any round trip, so a server
    starts while an engine is down and reports it through health and breakers instead
    (`tests/e2e/test_probe.py`); its version check must not take that away. It is skipped
    with a warning, and runs at the next start-up. Where opening creates tables anyway
    (`required`), the engine's error stops start-up as it always did.
    """
    try:
        async with asyncio.timeout(timeout_s):
            return await reading
    except (StorageUnavailable, TimeoutError) as exc:
        if required:
            raise
        _log(
            "warning", "store version not checked: engine unreachable", store=where, error=str(exc)
        )
        return None


async def apply(
    found: Plan[RunT],
    *,
    create: Callable[[], Awaitable[None]],
    recordable: Callable[[], Awaitable[bool]],
    run_step: Callable[[RunT], Awaitable[None]],
    record: Callable[[int], Awaitable[None]],
) -> Plan[RunT]:
    """Carries out `found` on an engine reached over the network (SQLite's runner is
    synchronous, in one transaction per step: `storage.sqlite.versions`).

    `create` makes what the current layout lacks (a no-op when the settings forbid schema
    changes); `recordable` says whether the version record's table exists now. Without it
    (an operator-owned schema) a store whose layout is current is served unrecorded, and one
    that needs a step stops start-up with a `ValueError` saying so.
    """
    await create()
    if not await recordable():
        if found.steps:
            raise ValueError(
                f"{found.where} needs migrating to version {found.target}, but the settings "
                "forbid schema changes and its version table is missing: start once with "
                "them allowed, or create this release's tables"
            )
        return found
    for step in found.steps:
        await run_step(step.run)
        await record(step.to)
        found.log_step(step)
    if found.writes:
        await record(found.target)
    found.log_done()
    return found
