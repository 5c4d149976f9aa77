"""What opening the configured stores would migrate, found without writing
(``loom serve --check-only``).

Opening a store migrates it (each engine family's runner, called where the adapter creates
its schema: `storage.sqlite.versions`, `storage.cassandra.versions`). Before a release is
rolled out an operator wants the same answer without any write: this module reads each
chosen store's version record the way its runner does, and returns the runner's `Plan`
(a store newer than this binary raises `storage.versions.StoreTooNew`, as start-up would).
Engines whose stores record no version yet are reported as such, not guessed at.
"""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path

from storage.settings import EngineSettings
from storage.sqlite import versions as sqlite_versions

__all__ = ["SQLITE_FILES", "check_stores"]

SQLITE_FILES: tuple[tuple[str, str, sqlite_versions.SqliteLayout], ...] = (
    ("threadweaver_store", "threadweaver.sqlite3", sqlite_versions.THREADS),
    ("summary_store", "summary.sqlite3", sqlite_versions.SUMMARIES),
    ("inbox_store", "inbox.sqlite3", sqlite_versions.INBOX),
    ("templates_store", "templates.sqlite3", sqlite_versions.TEMPLATES),
    ("iterator_queue", "iterator-queue.sqlite3", sqlite_versions.QUEUE),
    ("iterator_state", "iterator-state.sqlite3", sqlite_versions.JOBS),
)
"""Each SQLite store: its ``storage.*`` setting, its file (`storage.engines`), its layout."""

_CASSANDRA_STORES = ("threadweaver_store", "inbox_store")


async def check_stores(
    settings: EngineSettings, *, only: Collection[str] | None = None
) -> list[str]:
    """One line per store the settings choose (on the engines `only` names, when given): its
    version and what opening it would do."""
    lines: list[str] = []
    chosen = {field: str(getattr(settings.storage, field)) for field, _, _ in SQLITE_FILES}
    if only is not None:
        chosen = {field: engine for field, engine in chosen.items() if engine in only}
    for field, name, layout in SQLITE_FILES:
        if chosen.get(field) == "sqlite":
            path = Path(settings.sqlite.data_dir) / name
            lines.append(sqlite_versions.inspect(path, layout).describe())
    on_cassandra = [f for f in _CASSANDRA_STORES if chosen.get(f) == "cassandra"]
    if on_cassandra:
        lines += await _cassandra(settings, on_cassandra)
    for field, engine in chosen.items():
        if engine not in ("sqlite", "cassandra"):
            lines.append(f"{engine} ({field}): records no schema version yet; opened as it is")
    return lines


async def _cassandra(settings: EngineSettings, fields: list[str]) -> list[str]:
    from storage.cassandra import inbox_rows, versions
    from storage.cassandra.session import CassandraSession
    from storage.cassandra.threads import TABLES as THREAD_TABLES

    session = await CassandraSession.open(settings.cassandra)
    try:
        lines = []
        if "threadweaver_store" in fields:
            plan = await versions.inspect(session, THREAD_TABLES, versions.THREADS)
            lines.append(plan.describe())
        if "inbox_store" in fields:
            plan = await versions.inspect(session, inbox_rows.TABLES, versions.INBOX)
            lines.append(plan.describe())
        return lines
    finally:
        await session.close()
