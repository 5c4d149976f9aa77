"""The Iterator's source baselines: the keyset scan of the same database, no pipeline.

One loop of ``WHERE user_id = ? AND id > ? ORDER BY id LIMIT n`` per user of the scope,
measured in the same run as the pipeline, two ways:

- `floor_scan`, **the floor**: the database's own keyset loop through its plainest driver,
  stdlib ``sqlite3`` for SQLite (in one thread, no event loop) and asyncpg with a prepared
  statement for PostgreSQL: no ORM, no pipeline. The pipeline's objects/s is reported as a
  fraction of this.
- `sqlalchemy_scan`: the same loop through SQLAlchemy's async Core (aiosqlite / asyncpg), the
  layer the pipeline itself reads through; it carries the driver overhead the floor does not.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time

import asyncpg
from sqlalchemy import text
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import create_async_engine

__all__ = ["floor_scan", "sqlalchemy_scan"]

_SQL = "SELECT id FROM file WHERE user_id = {u} AND id > {m} AND deleted = 0 ORDER BY id LIMIT {n}"


async def sqlalchemy_scan(url: str, users: list[int], chunk: int) -> tuple[int, float]:
    """The keyset loop through SQLAlchemy async Core. (rows, seconds)"""
    engine = create_async_engine(url)
    sql = text(_SQL.format(u=":u", m=":m", n=":n"))
    rows = 0
    started = time.perf_counter()
    async with engine.connect() as conn:
        for user in users:
            marker = -1
            while True:
                got = (await conn.execute(sql, {"u": user, "m": marker, "n": chunk})).all()
                rows += len(got)
                if len(got) < chunk:
                    break
                marker = got[-1][0]
    seconds = time.perf_counter() - started
    await engine.dispose()
    return rows, seconds


def _sqlite_loop(path: str, users: list[int], chunk: int) -> tuple[int, float]:
    sql = _SQL.format(u="?", m="?", n="?")
    rows = 0
    conn = sqlite3.connect(path)
    try:
        started = time.perf_counter()
        for user in users:
            marker = -1
            while True:
                got = conn.execute(sql, (user, marker, chunk)).fetchall()
                rows += len(got)
                if len(got) < chunk:
                    break
                marker = got[-1][0]
        return rows, time.perf_counter() - started
    finally:
        conn.close()


async def _postgres_loop(dsn: str, users: list[int], chunk: int) -> tuple[int, float]:
    conn = await asyncpg.connect(dsn)
    try:
        statement = await conn.prepare(_SQL.format(u="$1", m="$2", n="$3"))
        rows = 0
        started = time.perf_counter()
        for user in users:
            marker = -1
            while True:
                got = await statement.fetch(user, marker, chunk)
                rows += len(got)
                if len(got) < chunk:
                    break
                marker = got[-1][0]
        return rows, time.perf_counter() - started
    finally:
        await conn.close()


async def floor_scan(url: str, users: list[int], chunk: int) -> tuple[int, float]:
    """The floor: the keyset loop through the database's plainest driver. (rows, seconds)"""
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        assert parsed.database, url
        return await asyncio.to_thread(_sqlite_loop, parsed.database, users, chunk)
    if parsed.get_backend_name() == "postgresql":
        dsn = parsed.set(drivername="postgresql").render_as_string(hide_password=False)
        return await _postgres_loop(dsn, users, chunk)
    raise ValueError(f"no floor driver for {parsed.get_backend_name()} ({url})")
