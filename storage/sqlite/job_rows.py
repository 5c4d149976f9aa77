"""Rows of the SQLite job store and the records they hold, converted by column name.

Each table has one column per field of its record, named as the field (task and chunk rows
add the job id), so rows are read by name (`sqlite3.Row`) and written by named parameters:
no statement depends on the order of a dozen columns.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from dataclasses import fields
from typing import Any

from storage.ports import ChunkRecord, JobRecord, TaskRecord

__all__ = [
    "CHUNK_COLS",
    "CHUNK_FIELDS",
    "JOB_COLS",
    "JOB_FIELDS",
    "TASK_COLS",
    "TASK_FIELDS",
    "chunk_from_row",
    "chunk_params",
    "insert_sql",
    "job_from_row",
    "job_params",
    "task_from_row",
    "task_params",
]

JOB_FIELDS, TASK_FIELDS, CHUNK_FIELDS = (
    tuple(f.name for f in fields(record)) for record in (JobRecord, TaskRecord, ChunkRecord)
)
JOB_COLS, TASK_COLS, CHUNK_COLS = (", ".join(f) for f in (JOB_FIELDS, TASK_FIELDS, CHUNK_FIELDS))


def insert_sql(table: str, names: Sequence[str], *, or_ignore: bool = False) -> str:
    """An INSERT of the columns `names` (and the job id) by named parameters (``:name``)."""
    columns = ("job_id", *(n for n in names if n != "job_id"))
    verb = "INSERT OR IGNORE" if or_ignore else "INSERT"
    return (
        f"{verb} INTO {table} ({', '.join(columns)}) VALUES ({', '.join(':' + c for c in columns)})"
    )


def job_params(job: JobRecord) -> dict[str, Any]:
    return {f: getattr(job, f) for f in JOB_FIELDS}


def job_from_row(row: sqlite3.Row) -> JobRecord:
    return JobRecord(
        job_id=row["job_id"],
        created_ms=int(row["created_ms"]),
        spec=row["spec"],
        state=row["state"],
        rate=int(row["rate"]),
        paused_by=row["paused_by"],
        error=row["error"],
        finished_ms=int(row["finished_ms"]),
        version=int(row["version"]),
    )


def task_params(job_id: str, t: TaskRecord) -> dict[str, Any]:
    """The task's columns by name: keys are JSON arrays, `done` an integer."""
    return {
        "job_id": job_id,
        "task_id": t.task_id,
        "level": t.level,
        "parents": json.dumps(t.parents),
        "first": json.dumps(t.first),
        "last": json.dumps(t.last),
        "after": json.dumps(t.after),
        "upto": json.dumps(t.upto),
        "seq": t.seq,
        "done": int(t.done),
        "rows": t.rows,
        "started_ms": t.started_ms,
        "spawned": json.dumps(t.spawned),
    }


def task_from_row(row: sqlite3.Row) -> TaskRecord:
    return TaskRecord(
        task_id=row["task_id"],
        level=int(row["level"]),
        parents=tuple(json.loads(row["parents"])),
        first=tuple(json.loads(row["first"])),
        last=tuple(json.loads(row["last"])),
        after=tuple(json.loads(row["after"])),
        upto=tuple(json.loads(row["upto"])),
        seq=int(row["seq"]),
        done=bool(row["done"]),
        rows=int(row["rows"]),
        started_ms=int(row["started_ms"]),
        spawned=tuple(json.loads(row["spawned"])),
    )


def chunk_params(job_id: str, c: ChunkRecord) -> dict[str, Any]:
    return {"job_id": job_id, **{f: getattr(c, f) for f in CHUNK_FIELDS}}


def chunk_from_row(row: sqlite3.Row) -> ChunkRecord:
    return ChunkRecord(
        chunk_id=row["chunk_id"],
        width=int(row["width"]),
        keys=bytes(row["keys"]),
        count=int(row["count"]),
        state=row["state"],
        lease_until_ms=int(row["lease_until_ms"]),
        sends=int(row["sends"]),
        acked_keys=bytes(row["acked_keys"]),
        version=int(row["version"]),
    )
