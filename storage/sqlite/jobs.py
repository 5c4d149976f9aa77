"""JobStore on the embedded SQLite engine: jobs, task markers, counters and the chunk ledger.

    iter_job     (job_id) state, spec, rate, version, tat_ms (the pace)
    iter_task    (job_id, task_id) level, parents, bounds, marker, seq, done, spawned
    iter_counter (job_id, name) value
    iter_chunk   (job_id, chunk_id) width, keys, count, state, lease_until_ms, sends

A step (`commit_step`) is one IMMEDIATE transaction on the single writer thread: the task
update guarded by ``WHERE seq = ?``, the new tasks, the chunk and the counter increments
commit together or not at all, which is what makes counters and ledger agree.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from storage.ports import ChunkRecord, ChunkState, JobRecord, LedgerSummary, Step, TaskRecord
from storage.sqlite.database import SqliteDatabase

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
"""

_JOB_COLS = "job_id, created_ms, spec, state, rate, paused_by, error, finished_ms, version"
_TASK_COLS = (
    "task_id, level, parents, first, last, after, upto, seq, done, rows, started_ms, spawned"
)
_CHUNK_COLS = "chunk_id, width, keys, count, state, lease_until_ms, sends, acked_keys, version"


def _job(row: Sequence[Any]) -> JobRecord:
    return JobRecord(
        job_id=row[0],
        created_ms=int(row[1]),
        spec=row[2],
        state=row[3],
        rate=int(row[4]),
        paused_by=row[5],
        error=row[6],
        finished_ms=int(row[7]),
        version=int(row[8]),
    )


def _task_row(job_id: str, t: TaskRecord) -> tuple[Any, ...]:
    return (
        job_id,
        t.task_id,
        t.level,
        json.dumps(t.parents),
        json.dumps(t.first),
        json.dumps(t.last),
        json.dumps(t.after),
        json.dumps(t.upto),
        t.seq,
        int(t.done),
        t.rows,
        t.started_ms,
        json.dumps(t.spawned),
    )


def _task(row: Sequence[Any]) -> TaskRecord:
    return TaskRecord(
        task_id=row[0],
        level=int(row[1]),
        parents=tuple(json.loads(row[2])),
        first=tuple(json.loads(row[3])),
        last=tuple(json.loads(row[4])),
        after=tuple(json.loads(row[5])),
        upto=tuple(json.loads(row[6])),
        seq=int(row[7]),
        done=bool(row[8]),
        rows=int(row[9]),
        started_ms=int(row[10]),
        spawned=tuple(json.loads(row[11])),
    )


def _chunk(row: Sequence[Any]) -> ChunkRecord:
    return ChunkRecord(
        chunk_id=row[0],
        width=int(row[1]),
        keys=bytes(row[2]),
        count=int(row[3]),
        state=row[4],
        lease_until_ms=int(row[5]),
        sends=int(row[6]),
        acked_keys=bytes(row[7]),
        version=int(row[8]),
    )


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
        db = SqliteDatabase(path, synchronous=synchronous, readers=readers)
        await db.migrate(_SCHEMA)
        return cls(db)

    async def create_job(
        self, job: JobRecord, root: TaskRecord, counters: Mapping[str, int]
    ) -> None:
        def run(conn: sqlite3.Connection) -> None:
            conn.execute(
                f"INSERT INTO iter_job ({_JOB_COLS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    job.job_id,
                    job.created_ms,
                    job.spec,
                    job.state,
                    job.rate,
                    job.paused_by,
                    job.error,
                    job.finished_ms,
                    job.version,
                ),
            )
            conn.execute(
                f"INSERT INTO iter_task (job_id, {_TASK_COLS}) VALUES ({', '.join('?' * 13)})",
                _task_row(job.job_id, root),
            )
            _add(conn, job.job_id, counters)

        await self._db.write(run)

    async def get_job(self, job_id: str) -> JobRecord | None:
        def run(conn: sqlite3.Connection) -> JobRecord | None:
            row = conn.execute(
                f"SELECT {_JOB_COLS} FROM iter_job WHERE job_id = ?", (job_id,)
            ).fetchone()
            return None if row is None else _job(row)

        return await self._db.read(run)

    async def list_jobs(self, limit: int, before: tuple[int, str] | None) -> list[JobRecord]:
        def run(conn: sqlite3.Connection) -> list[JobRecord]:
            if before is None:
                rows = conn.execute(
                    f"SELECT {_JOB_COLS} FROM iter_job "
                    "ORDER BY created_ms DESC, job_id DESC LIMIT ?",
                    (limit,),
                ).fetchall()
            else:
                rows = conn.execute(
                    f"SELECT {_JOB_COLS} FROM iter_job WHERE (created_ms, job_id) < (?, ?) "
                    "ORDER BY created_ms DESC, job_id DESC LIMIT ?",
                    (*before, limit),
                ).fetchall()
            return [_job(r) for r in rows]

        return await self._db.read(run)

    async def active_jobs(self) -> list[JobRecord]:
        def run(conn: sqlite3.Connection) -> list[JobRecord]:
            rows = conn.execute(
                f"SELECT {_JOB_COLS} FROM iter_job WHERE state IN ('running', 'paused')"
            ).fetchall()
            return [_job(r) for r in rows]

        return await self._db.read(run)

    async def update_job(self, job: JobRecord, expected_version: int) -> bool:
        def run(conn: sqlite3.Connection) -> bool:
            cursor = conn.execute(
                "UPDATE iter_job SET spec = ?, state = ?, rate = ?, paused_by = ?, error = ?, "
                "finished_ms = ?, version = ? WHERE job_id = ? AND version = ?",
                (
                    job.spec,
                    job.state,
                    job.rate,
                    job.paused_by,
                    job.error,
                    job.finished_ms,
                    expected_version + 1,
                    job.job_id,
                    expected_version,
                ),
            )
            return cursor.rowcount == 1

        return await self._db.write(run)

    async def get_task(self, job_id: str, task_id: str) -> TaskRecord | None:
        def run(conn: sqlite3.Connection) -> TaskRecord | None:
            row = conn.execute(
                f"SELECT {_TASK_COLS} FROM iter_task WHERE job_id = ? AND task_id = ?",
                (job_id, task_id),
            ).fetchone()
            return None if row is None else _task(row)

        return await self._db.read(run)

    async def open_tasks(self, job_id: str) -> list[TaskRecord]:
        def run(conn: sqlite3.Connection) -> list[TaskRecord]:
            rows = conn.execute(
                f"SELECT {_TASK_COLS} FROM iter_task WHERE job_id = ? AND done = 0", (job_id,)
            ).fetchall()
            return [_task(row) for row in rows]

        return await self._db.read(run)

    async def commit_step(self, job_id: str, step: Step, expected_seq: int) -> bool:
        t = step.task
        row = _task_row(job_id, t)

        def run(conn: sqlite3.Connection) -> bool:
            cursor = conn.execute(
                "UPDATE iter_task SET after = ?, upto = ?, seq = ?, done = ?, rows = ?, "
                "started_ms = ?, spawned = ? WHERE job_id = ? AND task_id = ? AND seq = ?",
                (
                    row[6],
                    row[7],
                    t.seq,
                    int(t.done),
                    t.rows,
                    t.started_ms,
                    row[12],
                    job_id,
                    t.task_id,
                    expected_seq,
                ),
            )
            if cursor.rowcount != 1:
                return False
            conn.executemany(
                f"INSERT OR IGNORE INTO iter_task (job_id, {_TASK_COLS}) "
                f"VALUES ({', '.join('?' * 13)})",
                [_task_row(job_id, n) for n in step.new_tasks],
            )
            c = step.chunk
            if c is not None:
                conn.execute(
                    f"INSERT OR IGNORE INTO iter_chunk (job_id, {_CHUNK_COLS}) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        job_id,
                        c.chunk_id,
                        c.width,
                        c.keys,
                        c.count,
                        c.state,
                        c.lease_until_ms,
                        c.sends,
                        c.acked_keys,
                        c.version,
                    ),
                )
            _add(conn, job_id, step.counters)
            return True

        return await self._db.write(run)

    async def counters(self, job_id: str) -> dict[str, int]:
        def run(conn: sqlite3.Connection) -> dict[str, int]:
            rows = conn.execute(
                "SELECT name, value FROM iter_counter WHERE job_id = ?", (job_id,)
            ).fetchall()
            return {str(k): int(v) for k, v in rows}

        return await self._db.read(run)

    async def add_counters(self, job_id: str, deltas: Mapping[str, int]) -> None:
        await self._db.write(lambda conn: _add(conn, job_id, deltas))

    async def lease_chunks(
        self, job_id: str, *, now_ms: int, lease_ms: int, max_objects: int, max_chunks: int
    ) -> list[ChunkRecord]:
        def run(conn: sqlite3.Connection) -> list[ChunkRecord]:
            rows = conn.execute(
                f"SELECT {_CHUNK_COLS} FROM iter_chunk WHERE job_id = ? "
                "AND state IN ('ready', 'leased') AND lease_until_ms <= ? LIMIT ?",
                (job_id, now_ms, max_chunks),
            ).fetchall()
            taken: list[ChunkRecord] = []
            total = 0
            for row in rows:
                if taken and total + int(row[3]) > max_objects:
                    break
                c = _chunk(row)
                taken.append(
                    ChunkRecord(
                        c.chunk_id,
                        c.width,
                        c.keys,
                        c.count,
                        "leased",
                        now_ms + lease_ms,
                        c.sends + 1,
                        c.acked_keys,
                        c.version + 1,
                    )
                )
                total += c.count
            conn.executemany(
                "UPDATE iter_chunk SET state = 'leased', lease_until_ms = ?, sends = ?, "
                "version = ? WHERE job_id = ? AND chunk_id = ?",
                [(c.lease_until_ms, c.sends, c.version, job_id, c.chunk_id) for c in taken],
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
                    objects += int(row[0])
            _add(conn, job_id, {f"{state}_chunks": chunks, f"{state}_objects": objects})
            return chunks, objects

        return await self._db.write(run)

    async def leased_chunks(self, job_id: str, limit: int) -> list[ChunkRecord]:
        def run(conn: sqlite3.Connection) -> list[ChunkRecord]:
            rows = conn.execute(
                f"SELECT {_CHUNK_COLS} FROM iter_chunk WHERE job_id = ? AND state = 'leased' "
                "LIMIT ?",
                (job_id, limit),
            ).fetchall()
            return [_chunk(r) for r in rows]

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
            tasks, open_tasks = conn.execute(
                "SELECT count(*), coalesce(sum(done = 0), 0) FROM iter_task WHERE job_id = ?",
                (job_id,),
            ).fetchone()
            chunks, unsettled, objects = conn.execute(
                "SELECT count(*), coalesce(sum(state != ?), 0), coalesce(sum(count), 0) "
                "FROM iter_chunk WHERE job_id = ?",
                (settled, job_id),
            ).fetchone()
            return LedgerSummary(tasks, open_tasks, chunks, unsettled, objects)

        return await self._db.read(run)

    async def get_pace(self, job_id: str) -> float | None:
        def run(conn: sqlite3.Connection) -> float | None:
            row = conn.execute("SELECT tat_ms FROM iter_job WHERE job_id = ?", (job_id,)).fetchone()
            return None if row is None else float(row[0])

        return await self._db.read(run)

    async def set_pace(self, job_id: str, pace_ms: float, *, expected_ms: float) -> bool:
        def run(conn: sqlite3.Connection) -> bool:
            cursor = conn.execute(
                "UPDATE iter_job SET tat_ms = ? WHERE job_id = ? AND tat_ms = ?",
                (pace_ms, job_id, expected_ms),
            )
            return cursor.rowcount == 1

        return await self._db.write(run)

    async def close(self) -> None:
        await self._db.close()
