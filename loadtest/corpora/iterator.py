"""A Box-like hierarchy to iterate: enterprises -> users -> files -> versions.

Files per user follow a Zipf law (most users own a handful, a few own very many), a few
"large users" own `large_user_files` each (Box splits users above 250K files), each file
has 1..`max_versions` versions (geometric), and `deleted_fraction` of the rows of every
table are soft-deleted (``deleted = 1``) so the ``where`` of each level matters. Ids are
dense per table but interleaved across parents (a user's files are not contiguous), as
rows created over years would be.

`expected_ids` is the plain SQL a reviewer would write for a scope (joins down the
hierarchy), the ground truth the e2e suite and the load test compare emissions with.
"""

from __future__ import annotations

import contextlib
import random
import sqlite3
import uuid
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from storage.sql.schema import DEFAULT_SCHEMA

__all__ = [
    "Corpus",
    "CorpusShape",
    "expected_ids",
    "generate",
    "private_database",
    "write_sqlite",
    "write_url",
]


@dataclass(frozen=True, slots=True)
class CorpusShape:
    """How big and how skewed."""

    enterprises: int = 5
    users_per_enterprise: int = 40
    zipf_s: float = 1.3
    """Zipf exponent of files per user."""
    max_files_per_user: int = 2000
    large_users: int = 1
    large_user_files: int = 5000
    max_versions: int = 4
    deleted_fraction: float = 0.05
    seed: int = 7


@dataclass(slots=True)
class Corpus:
    """Rows per table: (id, parent, deleted)."""

    enterprise: list[tuple[int, int]] = field(default_factory=list)
    users: list[tuple[int, int, int]] = field(default_factory=list)
    file: list[tuple[int, int, int]] = field(default_factory=list)
    file_version: list[tuple[int, int, int]] = field(default_factory=list)


def _zipf(rng: random.Random, s: float, cap: int) -> int:
    # Inverse-CDF draw of a bounded Zipf(s) over 0..cap (0 files is common too).
    u = rng.random()
    return min(cap, int((1.0 - u) ** (-1.0 / (s - 1.0))) - 1) if s > 1 else rng.randint(0, cap)


def generate(shape: CorpusShape) -> Corpus:
    """A corpus of `shape`, the same for the same seed."""
    rng = random.Random(shape.seed)
    c = Corpus()
    user_id = 0
    owners: list[int] = []
    for e in range(1, shape.enterprises + 1):
        c.enterprise.append((e, int(rng.random() < shape.deleted_fraction / 4)))
        for _ in range(shape.users_per_enterprise):
            user_id += 1
            deleted = int(rng.random() < shape.deleted_fraction)
            c.users.append((user_id, e, deleted))
            owners.extend([user_id] * _zipf(rng, shape.zipf_s, shape.max_files_per_user))
    live_users = [u for u, _, d in c.users if not d]
    for big in rng.sample(live_users, min(shape.large_users, len(live_users))):
        owners.extend([big] * shape.large_user_files)
    rng.shuffle(owners)  # files of one user are interleaved with everyone else's
    version_id = 0
    for file_id, owner in enumerate(owners, start=1):
        c.file.append((file_id, owner, int(rng.random() < shape.deleted_fraction)))
        versions = 1
        while versions < shape.max_versions and rng.random() < 0.4:
            versions += 1
        for _ in range(versions):
            version_id += 1
            c.file_version.append((version_id, file_id, int(rng.random() < shape.deleted_fraction)))
    return c


def _inserts(c: Corpus) -> Iterator[tuple[str, Sequence[tuple[int, ...]]]]:
    yield "INSERT INTO enterprise (id, deleted) VALUES (?, ?)", c.enterprise
    yield "INSERT INTO users (id, enterprise_id, deleted) VALUES (?, ?, ?)", c.users
    yield "INSERT INTO file (id, user_id, deleted) VALUES (?, ?, ?)", c.file
    yield "INSERT INTO file_version (id, file_id, deleted) VALUES (?, ?, ?)", c.file_version


def write_sqlite(path: Path, c: Corpus) -> None:
    """Creates the default schema in a SQLite file and loads `c` into it."""
    conn = sqlite3.connect(path)
    try:
        for statement in DEFAULT_SCHEMA:
            conn.execute(statement)
        for sql, rows in _inserts(c):
            conn.executemany(sql, rows)
        conn.commit()
        conn.execute("ANALYZE")
    finally:
        conn.close()


async def write_url(url: str, c: Corpus, *, batch: int = 20_000) -> None:
    """Creates the default schema at a SQLAlchemy async URL (dropping old tables first)
    and loads `c` into it."""
    from sqlalchemy import text
    from sqlalchemy.ext.asyncio import create_async_engine

    engine = create_async_engine(url)
    try:
        async with engine.begin() as conn:
            for table in ("file_version", "file", "users", "enterprise"):
                await conn.execute(text(f"DROP TABLE IF EXISTS {table}"))
            for statement in DEFAULT_SCHEMA:
                await conn.execute(text(statement))
        for sql, rows in _inserts(c):
            cols = sql[sql.index("(") + 1 : sql.index(")")].split(", ")
            named = sql.split(" VALUES ")[0] + " VALUES (" + ", ".join(f":{k}" for k in cols) + ")"
            for start in range(0, len(rows), batch):
                part = [dict(zip(cols, r, strict=True)) for r in rows[start : start + batch]]
                async with engine.begin() as conn:
                    await conn.execute(text(named), part)
        async with engine.begin() as conn:
            analyze = "ANALYZE" if not url.startswith("mysql") else "ANALYZE TABLE file"
            await conn.execute(text(analyze))
    finally:
        await engine.dispose()


@contextlib.asynccontextmanager
async def private_database(url: str) -> AsyncIterator[str]:
    """A fresh, empty database on the server `url` points at (PostgreSQL or MariaDB),
    dropped afterwards; its URL. A SQLite URL is yielded unchanged.

    Tests and load tests that write the default tables each get their own database, so two
    of them sharing one test server never drop each other's tables mid-run.
    """
    from sqlalchemy import text
    from sqlalchemy.engine import make_url
    from sqlalchemy.ext.asyncio import create_async_engine

    if url.startswith("sqlite"):
        yield url
        return
    name = f"loom_{uuid.uuid4().hex[:12]}"
    admin = create_async_engine(url, isolation_level="AUTOCOMMIT")
    postgres = url.startswith("postgresql")
    try:
        async with admin.connect() as conn:
            await conn.execute(text(f"CREATE DATABASE {name}"))
        yield make_url(url).set(database=name).render_as_string(hide_password=False)
    finally:
        with contextlib.suppress(Exception):  # a stopped server keeps its leftovers
            async with admin.connect() as conn:
                force = " WITH (FORCE)" if postgres else ""
                await conn.execute(text(f"DROP DATABASE IF EXISTS {name}{force}"))
        await admin.dispose()


_CHAIN = (
    ("enterprise", "id", ""),
    ("users", "id", "enterprise_id"),
    ("file", "id", "user_id"),
    ("file_version", "id", "file_id"),
)


def expected_ids(scope_level: int, emit_level: int) -> str:
    """Plain SQL (joins, no keyset) for the ids of `emit_level` under ids ``:first``..
    ``:last`` of `scope_level` in the default hierarchy, valid rows only."""
    tables = _CHAIN[scope_level : emit_level + 1]
    sql = f"SELECT t{emit_level}.id FROM {tables[0][0]} t{scope_level}"
    for offset, (table, _, parent) in enumerate(tables[1:], start=scope_level + 1):
        sql += f" JOIN {table} t{offset} ON t{offset}.{parent} = t{offset - 1}.id"
    conds = [f"t{scope_level}.id BETWEEN :first AND :last"]
    conds += [f"t{i}.deleted = 0" for i in range(scope_level, emit_level + 1)]
    return f"{sql} WHERE {' AND '.join(conds)}"
