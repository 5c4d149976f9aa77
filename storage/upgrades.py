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

from collections.abc import Collection, Sequence
from pathlib import Path

from storage.errors import StorageError
from storage.settings import EngineSettings
from storage.sqlite import versions as sqlite_versions

__all__ = ["SQLITE_FILES", "EngineUnreadable", "check_stores"]

SQLITE_FILES: tuple[tuple[str, str, sqlite_versions.SqliteLayout], ...] = (
    ("threadweaver_store", "threadweaver.sqlite3", sqlite_versions.THREADS),
    ("summary_store", "summary.sqlite3", sqlite_versions.SUMMARIES),
    ("inbox_store", "inbox.sqlite3", sqlite_versions.INBOX),
    ("templates_store", "templates.sqlite3", sqlite_versions.TEMPLATES),
    ("iterator_queue", "iterator-queue.sqlite3", sqlite_versions.QUEUE),
    ("iterator_state", "iterator-state.sqlite3", sqlite_versions.JOBS),
)
"""Each SQLite store: its ``storage.*`` setting, its file (`storage.engines`), its layout."""


class EngineUnreadable(RuntimeError):
    """An engine holding a configured store did not answer the check (``--check-only``
    exits 1): a start-up tool's outcome, not a storage error of a request."""


async def check_stores(
    settings: EngineSettings,
    *,
    only: Collection[str] | None = None,
    queues: Sequence[str] = (),
) -> list[str]:
    """One line per store the settings choose (on the engines `only` names, when given): its
    version and what opening it would do; `queues` names the Iterator's queues (one per
    level). Raises `storage.versions.StoreTooNew` for a store
    newer than this release, `EngineUnreadable` when an engine does not answer."""
    try:
        return await _check(settings, only, queues)
    except StorageError as exc:
        raise EngineUnreadable(str(exc)) from exc


async def _check(
    settings: EngineSettings, only: Collection[str] | None, queues: Sequence[str]
) -> list[str]:
    chosen = {field: str(getattr(settings.storage, field)) for field, _, _ in SQLITE_FILES}
    if only is not None:
        chosen = {field: engine for field, engine in chosen.items() if engine in only}
    lines: list[str] = []
    for field, name, layout in SQLITE_FILES:
        if chosen.get(field) == "sqlite":
            path = Path(settings.sqlite.data_dir) / name
            lines.append(sqlite_versions.inspect(path, layout).describe())
    on = {engine: [f for f, e in chosen.items() if e == engine] for engine in set(chosen.values())}
    if on.get("cassandra"):
        lines += await _cassandra(settings, on["cassandra"])
    if on.get("bigtable"):
        lines += await _bigtable(settings, on["bigtable"])
    if on.get("dynamodb"):
        lines += await _dynamodb(settings, on["dynamodb"])
    if on.get("sqs"):
        lines.append(await _sqs(settings, queues))
    return lines


async def _cassandra(settings: EngineSettings, fields: list[str]) -> list[str]:
    from storage.cassandra import inbox_rows, versions
    from storage.cassandra.session import CassandraSession
    from storage.cassandra.threads import TABLES

    session = await CassandraSession.open(settings.cassandra)
    try:
        lines = []
        if "threadweaver_store" in fields:
            lines.append((await versions.inspect(session, TABLES, versions.THREADS)).describe())
        if "inbox_store" in fields:
            plan = await versions.inspect(session, inbox_rows.TABLES, versions.INBOX)
            lines.append(plan.describe())
        return lines
    finally:
        await session.close()


async def _bigtable(settings: EngineSettings, fields: list[str]) -> list[str]:
    from storage.bigtable import templates, threads, versions

    found = []
    if "threadweaver_store" in fields:
        found.append(await versions.inspect(settings.bigtable, threads.TABLES, versions.THREADS))
    if "templates_store" in fields:
        tables = dict.fromkeys(templates.TABLES)
        found.append(await versions.inspect(settings.bigtable, tables, versions.TEMPLATES))
    return [plan.describe() for plan in found]


async def _dynamodb(settings: EngineSettings, fields: list[str]) -> list[str]:
    from storage.dynamodb import jobs, summaries, versions
    from storage.dynamodb.client import DynamoDBClient

    client = await DynamoDBClient.open(settings.dynamodb)
    try:
        found = []
        if "summary_store" in fields:
            table = client.table_name(summaries.TABLE_SUFFIX)
            found.append(await versions.inspect(client, table, versions.SUMMARIES))
        if "iterator_state" in fields:
            table = client.table_name(jobs.TABLE_SUFFIX)
            found.append(await versions.inspect(client, table, versions.JOBS))
        return [plan.describe() for plan in found]
    finally:
        await client.close()


async def _sqs(settings: EngineSettings, queues: Sequence[str]) -> str:
    import aioboto3

    from storage.sqs import versions
    from storage.sqs.queue import client_options

    names = [f"{settings.sqs.queue_prefix}{q}" for q in queues]
    async with aioboto3.Session().client("sqs", **client_options(settings.sqs)) as client:
        return (await versions.inspect(client, names, versions.QUEUE)).describe()
