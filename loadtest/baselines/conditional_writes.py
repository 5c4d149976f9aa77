"""Each engine's raw conditional-write rate: plain insert-if-absent calls, no algorithm.

The write baseline of the ThreadWeaver workload. The seed's algorithm costs at least one
insert-if-absent per message copy (``setUTForMessageId`` on every email), so the same
number of bare insert-if-absent calls, from the same client library on the same machine,
is the speed that weaving is held against: ``WeaveMessages`` throughput / this rate.

One call per message copy of the corpus, keyed by its Message-ID's MD5 (repeats included,
as a copy delivered to twenty mailboxes is twenty calls), shaped like the weave: batches of
the weave's size, as many concurrent batches as the weave has callers, each batch's calls
as concurrent as the adapters make theirs. Per engine, the engine's own conditional write:

* SQLite: ``INSERT ... ON CONFLICT DO NOTHING``, one write transaction per batch on the same
  single-writer thread the adapter uses (SQLite's fast path: no round trip, one commit);
* Bigtable: ``check_and_mutate_row`` with the seed's predicate, SetCell in the false branch;
* Cassandra: ``INSERT ... IF NOT EXISTS`` (a lightweight transaction).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path

from storage.clock import now_ms
from storage.settings import BigtableSettings, CassandraSettings

__all__ = ["Insert", "insert_if_absent", "measure_raw_rate", "raw_keys"]

Insert = Callable[[Sequence[tuple[bytes, str]]], Awaitable[None]]
"""Inserts one batch of (key, value) pairs, each only if its key is absent."""


def raw_keys(rfc_message_ids: Sequence[str], values: Sequence[str]) -> list[tuple[bytes, str]]:
    """(MD5 of the Message-ID, value) per message copy, in order."""
    return [
        (hashlib.md5(r.encode("utf-8"), usedforsecurity=False).digest(), v)
        for r, v in zip(rfc_message_ids, values, strict=True)
    ]


async def measure_raw_rate(
    insert: Insert, items: Sequence[tuple[bytes, str]], *, batch: int, callers: int
) -> tuple[int, float]:
    """Runs every item through `insert` in batches, `callers` at a time: (calls, seconds)."""
    batches = [items[i : i + batch] for i in range(0, len(items), batch)]
    queue = iter(batches)

    async def caller() -> None:
        for part in queue:
            await insert(part)

    start = time.perf_counter()
    await asyncio.gather(*(caller() for _ in range(callers)))
    return len(items), time.perf_counter() - start


@contextlib.asynccontextmanager
async def insert_if_absent(
    engine: str, run_id: str, environ: Mapping[str, str]
) -> AsyncIterator[Insert]:
    """An `Insert` on `engine`, in a namespace of its own (removed afterwards where it can)."""
    if engine == "sqlite":
        async with _sqlite() as insert:
            yield insert
    elif engine == "bigtable":
        async with _bigtable(run_id) as insert:
            yield insert
    elif engine == "cassandra":
        async with _cassandra(run_id, environ) as insert:
            yield insert
    else:
        raise ValueError(f"unknown engine {engine!r}")


@contextlib.asynccontextmanager
async def _sqlite() -> AsyncIterator[Insert]:
    import sqlite3

    from storage.sqlite.database import SqliteDatabase

    with tempfile.TemporaryDirectory(prefix="loom-raw-") as tmp:
        db = SqliteDatabase(Path(tmp) / "raw.sqlite3", synchronous="FULL")  # loom serve's default
        await db.migrate(
            "CREATE TABLE IF NOT EXISTS raw (k BLOB PRIMARY KEY, v TEXT NOT NULL) WITHOUT ROWID;"
        )

        async def insert(items: Sequence[tuple[bytes, str]]) -> None:
            def run(conn: sqlite3.Connection) -> None:
                conn.executemany(
                    "INSERT INTO raw (k, v) VALUES (?, ?) ON CONFLICT DO NOTHING", items
                )

            await db.write(run)

        try:
            yield insert
        finally:
            await db.close()


@contextlib.asynccontextmanager
async def _bigtable(run_id: str) -> AsyncIterator[Insert]:
    from google.cloud.bigtable.data import SetCell

    from storage.bigtable.client import (
        BigtableHandle,
        bounded_gather,
        errors,
        family_has_cells,
        gc_rule,
    )

    settings = replace(BigtableSettings(), table_prefix=f"lt{run_id}-", create_tables=True)
    handle = await BigtableHandle.open(settings, {"raw": {"m": gc_rule(max_versions=1)}})
    table = handle.table("raw")
    predicate = family_has_cells("m")

    async def one(item: tuple[bytes, str]) -> None:
        cell = SetCell("m", b"u", item[1].encode(), timestamp_micros=now_ms() * 1000)
        with errors("raw insert"):
            await table.check_and_mutate_row(item[0], predicate, false_case_mutations=[cell])

    async def insert(items: Sequence[tuple[bytes, str]]) -> None:
        await bounded_gather(one, items)

    try:
        yield insert
    finally:
        await handle.close()


@contextlib.asynccontextmanager
async def _cassandra(run_id: str, environ: Mapping[str, str]) -> AsyncIterator[Insert]:
    from storage.cassandra.session import CassandraSession, gather

    points = environ.get("LOOM_TEST_CASSANDRA_CONTACT_POINTS")
    if not points:
        raise ValueError("cassandra: LOOM_TEST_CASSANDRA_CONTACT_POINTS is unset")
    settings = replace(
        CassandraSettings(),
        contact_points=tuple(points.split(",")),
        port=int(environ.get("LOOM_TEST_CASSANDRA_PORT", "9042")),
        keyspace=f"loadtest_{run_id}_raw",
        create_schema=True,
    )
    session = await CassandraSession.open(settings)
    try:
        await session.ensure_schema(
            ["CREATE TABLE IF NOT EXISTS {ks}.raw (k blob PRIMARY KEY, v text)"]
        )
        stmt = await session.prepare(
            f"INSERT INTO {settings.keyspace}.raw (k, v) VALUES (?, ?) IF NOT EXISTS"
        )

        async def insert(items: Sequence[tuple[bytes, str]]) -> None:
            await gather(session.run(stmt, item) for item in items)

        yield insert
    finally:
        with contextlib.suppress(Exception):
            await session.execute_ddl(f"DROP KEYSPACE IF EXISTS {settings.keyspace}")
        await session.close()
