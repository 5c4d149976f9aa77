"""JobStore on the embedded SQLite engine: jobs, task markers, counters and the chunk ledger.

    iter_job     (job_id) state, spec, rate, version, tat_ms (the pace)
    iter_task    (job_id, task_id) level, parents, bounds, marker, seq, done, spawned
    iter_counter (job_id, name) value
    iter_chunk   (job_id, chunk_id) width, count, state, lease_until_ms, sends, acked_keys
    iter_chunk_keys (job_id, chunk_id) keys

A step (`commit_step`) is one IMMEDIATE transaction on the single writer thread: the task
update guarded by ``WHERE seq = ?``, the new tasks, the chunk and the counter increments
commit together or not at all, which is what makes counters and ledger agree.

A chunk's keys (tens of kilobytes) are written once, into a table of their own: leases and
settlements rewrite only the small state row. SQLite rewrites a whole record on every
update, so keys kept in the state row were written three times per chunk, which made the
writer thread the pipeline's bottleneck. (State files from before keep their chunks' keys in
``iter_chunk.keys``; reads take them from there when the keys table has none.)
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path

from storage.ports import ChunkRecord, ChunkState, JobRecord, LedgerSummary, Step, TaskRecord
from storage.sqlite import versions
from storage.sqlite.database import SqliteDatabase
from storage.sqlite.job_rows import (
    CHUNK_FIELDS,
    JOB_COLS,
    JOB_FIELDS,
    TASK_COLS,
    TASK_FIELDS,
    chunk_from_row,
    chunk_params,
    insert_sql,
    job_from_row,
    job_params,
    task_from_row,
    task_params,
)

__all__ = ["SqliteJobStore"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS iter_job (
    job_id TEXT NOT NULL PRIMARY KEY,
    created_ms INTEGER NOT NULL,
    spec TEXT NOT NULL,
    state TEXT NOT NULL,
    rate INTEGER NOT NULL,
    paused_by TEXT NOT NULL,
    error TEXT NOT NULL,
    finished_ms INTEGER NOT NULL,
    version INTEGER NOT NULL,
    tat_ms REAL NOT NULL DEFAULT 0
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS iter_job_created ON iter_job (created_ms, job_id);
CREATE INDEX IF NOT EXISTS iter_job_state ON iter_job (state);
CREATE TABLE IF NOT EXISTS iter_task (
    job_id TEXT NOT NULL,
    task_id TEXT NOT NULL,
    level INTEGER NOT NULL,
    parents TEXT NOT NULL,
    first TEXT NOT NULL,
    last TEXT NOT NULL,
    after TEXT NOT NULL,
    upto TEXT NOT NULL,
    seq INTEGER NOT NULL,
    done INTEGER NOT NULL,
    rows INTEGER NOT NULL,
    started_ms INTEGER NOT NULL,
    spawned TEXT NOT NULL,
    PRIMARY KEY (job_id, task_id)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS iter_counter (
    job_id TEXT NOT NULL,
    name TEXT NOT NULL,
    value INTEGER NOT NULL,
    PRIMARY KEY (job_id, name)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS iter_chunk (
    job_id TEXT NOT NULL,
    chunk_id TEXT NOT NULL,
    width INTEGER NOT NULL,
    keys BLOB NOT NULL,
    count INTEGER NOT NULL,
    state TEXT NOT NULL,
    lease_until_ms INTEGER NOT NULL,
    sends INTEGER NOT NULL,
    acked_keys BLOB NOT NULL,
    version INTEGER NOT NULL,
    PRIMARY KEY (job_id, chunk_id)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS iter_chunk_available ON iter_chunk (job_id, state, lease_until_ms);
CREATE TABLE IF NOT EXISTS iter_chunk_keys (
    job_id TEXT NOT NULL,
    chunk_id TEXT NOT NULL,
    keys BLOB NOT NULL,
    PRIMARY KEY (job_id, chunk_id)
);
"""

_CHUNKS = (
    "SELECT "
    + ", ".join(
        "coalesce(k.keys, c.keys) AS keys" if f == "keys" else f"c.{f} AS {f}" for f in CHUNK_FIELDS
    )
    + " FROM iter_chunk AS c LEFT JOIN iter_chunk_keys AS k "
    "ON k.job_id = c.job_id AND k.chunk_id = c.chunk_id"
)
"""Chunks with their keys, wherever they are kept."""


def _add(conn: sqlite3.Connection, job_id: str, deltas: Mapping[str, int]) -> None:
    conn.executemany(
        "INSERT INTO iter_counter (job_id, name, value) VALUES (?, ?, ?) "
        "ON CONFLICT (job_id, name) DO UPDATE SET value = value + excluded.value",
        [(job_id, k, v) for k, v in deltas.items() if v],
    )


class SqliteJobStore:
    """`storage.ports.JobStore` on one SQLite file."""

    def __init__(self, db: SqliteDatabase) -> None:
        self._db = db

    @classmethod
    async def open(
        cls, path: Path, *, synchronous: str = "FULL", readers: int = 4
    ) -> SqliteJobStore:
        """Opens (creating when missing) the state file at `path`."""
        db = SqliteDatabase(path, synchronous=synchronous, readers=readers, named_rows=True)
        await db.migrate(_SCHEMA, versions.JOBS)
        return cls(db)

    async def create_job(
        self, job: JobRecord, root: TaskRecord, counters: Mapping[str, int]
    ) -> None:
        def run(conn: sqlite3.Connection) -> None:
            conn.execute(insert_sql("iter_job", JOB_FIELDS), job_params(job))
            conn.execute(insert_sql("iter_task", TASK_FIELDS), task_params(job.job_id, root))
            _add(conn, job.job_id, counters)

        await self._db.write(run)

    async def get_job(self, job_id: str) -> JobRecord | None:
        def run(conn: sqlite3.Connection) -> JobRecord | None:
            row = conn.execute(
                f"SELECT {JOB_COLS} FROM iter_job WHERE job_id = ?", (job_id,)
            ).fetchone()
            return None if row is None else job_from_row(row)

        return await self._db.read(run)

    async def list_jobs(self, limit: int, before: tuple[int, str] | None) -> list[JobRecord]:
        def run(conn: sqlite3.Connection) -> list[JobRecord]:
            if before is None:
                rows = conn.execute(
                    f"SELECT {JOB_COLS} FROM iter_job "
                    "ORDER BY created_ms DESC, job_id DESC LIMIT ?",
                    (limit,),
                ).fetchall()
            else:
                rows = conn.execute(
                    f"SELECT {JOB_COLS} FROM iter_job WHERE (created_ms, job_id) < (?, ?) "
                    "ORDER BY created_ms DESC, job_id DESC LIMIT ?",
                    (*before, limit),
                ).fetchall()
            return [job_from_row(r) for r in rows]

        return await self._db.read(run)

    async def active_jobs(self) -> list[JobRecord]:
        def run(conn: sqlite3.Connection) -> list[JobRecord]:
            rows = conn.execute(
                f"SELECT {JOB_COLS} FROM iter_job WHERE state IN ('running', 'paused')"
            ).fetchall()
            return [job_from_row(r) for r in rows]

        return await self._db.read(run)

    async def update_job(self, job: JobRecord, expected_version: int) -> bool:
        def run(conn: sqlite3.Connection) -> bool:
            cursor = conn.execute(
                "UPDATE iter_job SET spec = :spec, state = :state, rate = :rate, "
                "paused_by = :paused_by, error = :error, finished_ms = :finished_ms, "
                "version = :expected + 1 WHERE job_id = :job_id AND version = :expected",
                {**job_params(job), "expected": expected_version},
            )
            return cursor.rowcount == 1

        return await self._db.write(run)

    async def get_task(self, job_id: str, task_id: str) -> TaskRecord | None:
        def run(conn: sqlite3.Connection) -> TaskRecord | None:
            row = conn.execute(
                f"SELECT {TASK_COLS} FROM iter_task WHERE job_id = ? AND task_id = ?",
                (job_id, task_id),
            ).fetchone()
            return None if row is None else task_from_row(row)

        return await self._db.read(run)

    async def open_tasks(self, job_id: str) -> list[TaskRecord]:
        def run(conn: sqlite3.Connection) -> list[TaskRecord]:
            rows = conn.execute(
                f"SELECT {TASK_COLS} FROM iter_task WHERE job_id = ? AND done = 0", (job_id,)
            ).fetchall()
            return [task_from_row(row) for row in rows]

        return await self._db.read(run)

    async def commit_step(self, job_id: str, step: Step, expected_seq: int) -> bool:
        task = {**task_params(job_id, step.task), "expected": expected_seq}

        def run(conn: sqlite3.Connection) -> bool:
            cursor = conn.execute(
                "UPDATE iter_task SET after = :after, upto = :upto, seq = :seq, done = :done, "
                "rows = :rows, started_ms = :started_ms, spawned = :spawned "
                "WHERE job_id = :job_id AND task_id = :task_id AND seq = :expected",
                task,
            )
            if cursor.rowcount != 1:
                return False
            conn.executemany(
                insert_sql("iter_task", TASK_FIELDS, or_ignore=True),
                [task_params(job_id, n) for n in step.new_tasks],
            )
            if step.chunk is not None:
                conn.execute(
                    insert_sql("iter_chunk", CHUNK_FIELDS, or_ignore=True),
                    chunk_params(job_id, replace(step.chunk, keys=b"")),
                )
                conn.execute(
                    "INSERT OR IGNORE INTO iter_chunk_keys (job_id, chunk_id, keys) "
                    "VALUES (?, ?, ?)",
                    (job_id, step.chunk.chunk_id, step.chunk.keys),
                )
            _add(conn, job_id, step.counters)
            return True

        return await self._db.write(run)

    async def counters(self, job_id: str) -> dict[str, int]:
        def run(conn: sqlite3.Connection) -> dict[str, int]:
            rows = conn.execute(
                "SELECT name, value FROM iter_counter WHERE job_id = ?", (job_id,)
            ).fetchall()
            return {str(row["name"]): int(row["value"]) for row in rows}

        return await self._db.read(run)

    async def add_counters(self, job_id: str, deltas: Mapping[str, int]) -> None:
        await self._db.write(lambda conn: _add(conn, job_id, deltas))

    async def lease_chunks(
        self, job_id: str, *, now_ms: int, lease_ms: int, max_objects: int, max_chunks: int
    ) -> list[ChunkRecord]:
        def run(conn: sqlite3.Connection) -> list[ChunkRecord]:
            # Which chunks first (small rows), then the keys of those taken only.
            available = conn.execute(
                "SELECT chunk_id, count FROM iter_chunk WHERE job_id = ? "
                "AND state IN ('ready', 'leased') AND lease_until_ms <= ? LIMIT ?",
                (job_id, now_ms, max_chunks),
            ).fetchall()
            wanted: list[str] = []
            total = 0
            for row in available:
                if wanted and total + int(row["count"]) > max_objects:
                    break
                wanted.append(row["chunk_id"])
                total += int(row["count"])
            if not wanted:
                return []
            rows = conn.execute(
                f"{_CHUNKS} WHERE c.job_id = ? AND c.chunk_id IN (SELECT value FROM json_each(?))",
                (job_id, json.dumps(wanted)),
            ).fetchall()
            taken = [
                replace(
                    c,
                    state="leased",
                    lease_until_ms=now_ms + lease_ms,
                    sends=c.sends + 1,
                    version=c.version + 1,
                )
                for c in map(chunk_from_row, rows)
            ]
            conn.executemany(
                "UPDATE iter_chunk SET state = ?, lease_until_ms = ?, sends = ?, version = ? "
                "WHERE job_id = ? AND chunk_id = ?",
                [
                    (c.state, c.lease_until_ms, c.sends, c.version, job_id, c.chunk_id)
                    for c in taken
                ],
            )
            return taken

        return await self._db.write(run)

    async def settle_chunks(
        self,
        job_id: str,
        chunk_ids: Sequence[str],
        state: ChunkState,
        counts: Mapping[str, int] | None = None,
    ) -> tuple[int, int]:
        # One local transaction reads each count as it settles: `counts` would save nothing.
        ids = list(dict.fromkeys(chunk_ids))

        def run(conn: sqlite3.Connection) -> tuple[int, int]:
            chunks = objects = 0
            for chunk_id in ids:
                row = conn.execute(
                    "UPDATE iter_chunk SET state = ?, version = version + 1 "
                    "WHERE job_id = ? AND chunk_id = ? AND state IN ('ready', 'leased') "
                    "RETURNING count",
                    (state, job_id, chunk_id),
                ).fetchone()
                if row is not None:
                    chunks += 1
                    objects += int(row["count"])
            _add(conn, job_id, {f"{state}_chunks": chunks, f"{state}_objects": objects})
            return chunks, objects

        return await self._db.write(run)

    async def leased_chunks(self, job_id: str, limit: int) -> list[ChunkRecord]:
        def run(conn: sqlite3.Connection) -> list[ChunkRecord]:
            rows = conn.execute(
                f"{_CHUNKS} WHERE c.job_id = ? AND c.state = 'leased' LIMIT ?", (job_id, limit)
            ).fetchall()
            return [chunk_from_row(r) for r in rows]

        return await self._db.read(run)

    async def save_chunk_acks(self, job_id: str, chunk: ChunkRecord, expected_version: int) -> bool:
        def run(conn: sqlite3.Connection) -> bool:
            cursor = conn.execute(
                "UPDATE iter_chunk SET acked_keys = ?, version = version + 1 "
                "WHERE job_id = ? AND chunk_id = ? AND version = ?",
                (chunk.acked_keys, job_id, chunk.chunk_id, expected_version),
            )
            return cursor.rowcount == 1

        return await self._db.write(run)

    async def ledger(self, job_id: str, *, settled: ChunkState) -> LedgerSummary:
        def run(conn: sqlite3.Connection) -> LedgerSummary:
            tasks = conn.execute(
                "SELECT count(*) AS tasks, coalesce(sum(done = 0), 0) AS open "
                "FROM iter_task WHERE job_id = ?",
                (job_id,),
            ).fetchone()
            chunks = conn.execute(
                "SELECT count(*) AS chunks, coalesce(sum(state != ?), 0) AS unsettled, "
                "coalesce(sum(count), 0) AS objects FROM iter_chunk WHERE job_id = ?",
                (settled, job_id),
            ).fetchone()
            return LedgerSummary(
                tasks=int(tasks["tasks"]),
                tasks_open=int(tasks["open"]),
                chunks=int(chunks["chunks"]),
                chunks_unsettled=int(chunks["unsettled"]),
                objects=int(chunks["objects"]),
            )

        return await self._db.read(run)

    async def get_pace(self, job_id: str) -> float | None:
        def run(conn: sqlite3.Connection) -> float | None:
            row = conn.execute("SELECT tat_ms FROM iter_job WHERE job_id = ?", (job_id,)).fetchone()
            return None if row is None else float(row["tat_ms"])

        return await self._db.read(run)

    async def set_pace(self, job_id: str, pace_ms: float, *, expected_ms: float) -> bool:
        def run(conn: sqlite3.Connection) -> bool:
            cursor = conn.execute(
                "UPDATE iter_job SET tat_ms = ? WHERE job_id = ? AND tat_ms = ?",
                (pace_ms, job_id, expected_ms),
            )
            return cursor.rowcount == 1

        return await self._db.write(run)

    async def delete_job(self, job_id: str) -> int:
        # One transaction per table, the job record (with its counters) last: reads of the
        # job stay whole until it goes, and an interrupted call leaves it to be retried.
        # `secure_delete` zeroes the rows in the file; `scrub` truncates the WAL after.
        def clear(table: str) -> Callable[[sqlite3.Connection], int]:
            def run(conn: sqlite3.Connection) -> int:
                return conn.execute(f"DELETE FROM {table} WHERE job_id = ?", (job_id,)).rowcount

            return run

        def last(conn: sqlite3.Connection) -> int:
            counters = conn.execute("DELETE FROM iter_counter WHERE job_id = ?", (job_id,))
            job = conn.execute("DELETE FROM iter_job WHERE job_id = ?", (job_id,))
            return counters.rowcount + job.rowcount

        removed = 0
        for table in ("iter_chunk_keys", "iter_chunk", "iter_task"):
            removed += await self._db.write(clear(table))
        removed += await self._db.write(last)
        if removed:
            await self._db.scrub()
        return removed

    async def close(self) -> None:
        await self._db.close()
