"""Processes opening the same fresh SQLite files at once all start (``loom serve --workers N``).

The processes of ``loom serve --workers N`` open every embedded store together. The one that
lost the race to switch a fresh file to WAL was told "database is locked" at once (SQLite does
not wait out a lock upgrade, whatever the busy timeout), and its start-up failed — now and
then, so this opens a few hundred fresh files from four processes in lock step and wants
every open to succeed.
"""

from __future__ import annotations

import asyncio
import multiprocessing as mp
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Barrier
from pathlib import Path

from storage.sqlite.database import SqliteDatabase

SCHEMA = (
    "CREATE TABLE IF NOT EXISTS t (k TEXT PRIMARY KEY, v TEXT) WITHOUT ROWID;"
    "CREATE TABLE IF NOT EXISTS u (k TEXT PRIMARY KEY) WITHOUT ROWID;"
)
PROCESSES = 4
FILES = 200


def _open_each(paths: list[str], barrier: Barrier, out: Queue[list[str]]) -> None:
    """Opens and migrates each file as soon as every process is ready for it; puts the
    errors on `out`."""

    async def one(path: str) -> str | None:
        db = SqliteDatabase(Path(path))
        try:
            await db.migrate(SCHEMA)
            await db.write(lambda conn: conn.execute("INSERT OR IGNORE INTO u VALUES ('x')"))
        except Exception as exc:  # reported to the test, which names it
            return f"{Path(path).parent.name}: {exc!r}"
        finally:
            await db.close()
        return None

    errors = []
    for path in paths:
        barrier.wait(timeout=60)
        error = asyncio.run(one(path))
        if error:
            errors.append(error)
    out.put(errors)


def test_processes_opening_fresh_files_together_all_succeed(tmp_path: Path) -> None:
    """Four processes open the same 200 fresh files in lock step: no open fails."""
    paths = [str(tmp_path / f"f{i}" / "store.sqlite3") for i in range(FILES)]
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(PROCESSES)
    out: Queue[list[str]] = ctx.Queue()
    workers = [ctx.Process(target=_open_each, args=(paths, barrier, out)) for _ in range(PROCESSES)]
    for worker in workers:
        worker.start()
    results = [out.get(timeout=300) for _ in workers]
    for worker in workers:
        worker.join(timeout=60)
    assert [w.exitcode for w in workers] == [0] * PROCESSES
    errors = [e for found in results for e in found]
    assert errors == [], errors[:5]
