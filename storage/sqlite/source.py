"""IterationSource on a SQLite file, read through stdlib `sqlite3` with every chunk packed by
SQLite itself.

The SQL source reads through SQLAlchemy and aiosqlite: a thread hop per call and a Python
row per row, about a tenth of what a plain `sqlite3` keyset loop reads. Here a read is one
statement on a reader thread's own connection, and SQLite concatenates the chunk as it
goes::

    WITH t(k0, k1) AS (<the keyset read, ORDER BY ... LIMIT n>)
    SELECT count(*), group_concat(k0), group_concat(k1) FROM t

`sqlite3` releases the GIL while SQLite steps, and the whole chunk is one step, so a read
runs beside the event loop instead of taking the GIL back for every row; numpy then turns
each column's text into int64s in C. The statements, the windowing over parents and the
error translation are the SQL source's (`storage.sql.source`), as is catalog inspection at
start-up (SQLAlchemy's inspector).

Two checks keep the packing honest. A NULL or a value that is not an integer in a key
column would vanish from (or break) the concatenation: the row count must match, else the
read is refused naming the level. And `group_concat` does not promise to keep the
subquery's order, though SQLite does: the positions are checked to ascend, and sorted if
they ever do not.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import threading
from array import array
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
from sqlalchemy.engine import make_url

from storage.ports import Positions, SourceLevel
from storage.sql.source import (
    LevelStatements,
    Plan,
    Shape,
    SqlIterationSource,
    create_engine_for,
    next_read,
    not_integers,
)

__all__ = ["SqliteIterationSource"]

_READERS = 4
"""Reader threads (one connection each): the Iterator's workers read concurrently."""


def _packed(columns: Sequence[np.ndarray[Any, Any]]) -> Positions:
    """Positions from one int64 array per column (in ORDER BY order), checked ascending."""
    width = len(columns)
    flat = np.empty(len(columns[0]) * width, dtype=np.int64)
    for i, column in enumerate(columns):
        flat[i::width] = column
    if len(columns[0]) > 1 and not _ascending(columns):
        order = np.lexsort(columns[::-1])
        for i, column in enumerate(columns):
            flat[i::width] = column[order]
    out = array("q")
    out.frombytes(flat.tobytes())
    return Positions(width, out)


def _ascending(columns: Sequence[np.ndarray[Any, Any]]) -> bool:
    """Whether consecutive positions ascend (compared as tuples)."""
    greater = np.zeros(len(columns[0]) - 1, dtype=bool)
    equal = np.ones(len(columns[0]) - 1, dtype=bool)
    for column in columns:
        step = np.diff(column)
        greater |= equal & (step > 0)
        equal &= step == 0
    return bool(greater.all())


class SqliteIterationSource(SqlIterationSource):
    """`storage.ports.IterationSource` on one SQLite file: reads through stdlib `sqlite3`."""

    def __init__(self, url: str, levels: Sequence[SourceLevel]) -> None:
        database = make_url(url).database
        if not database or database == ":memory:":
            raise ValueError(f"the SQLite source needs a file, not {url!r}")
        self._path = Path(database)
        super().__init__(create_engine_for(url), levels)
        self._local = threading.local()
        self._connections: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        self._readers = ThreadPoolExecutor(_READERS, thread_name_prefix="iter-source")
        self._packed: dict[tuple[int, Shape], str] = {}

    @classmethod
    def open(cls, url: str, levels: Sequence[SourceLevel]) -> SqliteIterationSource:
        """A source on the SQLite file of `url` (``sqlite+aiosqlite:///path``)."""
        return cls(url, levels)

    def _statements(self, level: SourceLevel) -> LevelStatements:
        # stdlib sqlite3 has no expanding parameters: the parent list is one JSON array.
        return LevelStatements(level, self._quote, "IN (SELECT value FROM json_each(:parents))")

    def _connection(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(
                self._path, timeout=5, isolation_level=None, check_same_thread=False
            )
            conn.execute("PRAGMA query_only = 1")  # the iterated database is never written
            self._local.conn = conn
            with self._lock:
                self._connections.append(conn)
        return conn

    def _sql(self, level: int, shape: Shape) -> str:
        found = self._packed.get((level, shape))
        if found is None:
            statements = self.statements[level]
            names = [f"k{i}" for i in range(statements.width(shape))]
            found = (
                f"WITH t({', '.join(names)}) AS ({statements.sql(shape)}) "
                f"SELECT count(*), {', '.join(f'group_concat({n})' for n in names)} FROM t"
            )
            self._packed[level, shape] = found
        return found

    def _read(self, level: int, shape: Shape, params: dict[str, Any]) -> Positions:
        """Runs on a reader thread: one statement, one step, the chunk parsed in C."""
        if shape[0] == "many":
            params = {**params, "parents": json.dumps(list(params["parents"]))}
        row = self._connection().execute(self._sql(level, shape), params).fetchone()
        count = int(row[0])
        width = len(row) - 1
        if count == 0:
            return Positions(width)
        try:
            columns = [np.fromstring(text, dtype=np.int64, sep=",") for text in row[1:]]
        except (TypeError, ValueError):
            columns = []
        if len(columns) != width or any(len(c) != count for c in columns):
            raise not_integers(self.levels[level])
        return _packed(columns)

    def _collect(self, level: int, plan: Plan, rows: Positions) -> Positions:
        """Runs on a reader thread: every statement of one read."""
        read = next(plan, None)
        while read is not None:
            got = self._read(level, *read)
            rows.extend(got)
            read = next_read(plan, len(got))
        return rows

    async def _execute(self, level: int, plan: Plan, rows: Positions) -> Positions:
        # One thread hop per read, not per statement.
        loop = asyncio.get_running_loop()
        with self._errors("read"):
            return await loop.run_in_executor(self._readers, self._collect, level, plan, rows)

    async def _run(self, level: int, shape: Shape, params: dict[str, Any]) -> Positions:
        loop = asyncio.get_running_loop()
        with self._errors("read"):
            return await loop.run_in_executor(self._readers, self._read, level, shape, params)

    async def ping(self) -> None:
        def run() -> None:
            self._connection().execute("SELECT 1").fetchone()

        with self._errors("ping"):
            await asyncio.get_running_loop().run_in_executor(self._readers, run)

    async def close(self) -> None:
        await asyncio.to_thread(self._readers.shutdown, wait=True)
        with self._lock:
            for conn in self._connections:
                conn.close()
            self._connections.clear()
        await super().close()
