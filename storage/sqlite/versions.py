"""Schema versions of the SQLite files: each store's layout, its steps, and the runner.

Each file records its store's version in a table of its own, ``loom_schema (store,
version)``, written in the same file as the data so a backup or a copied data directory
carries it. The runner (`upgrade`) is called by `SqliteDatabase.migrate` on the writer
thread, under the ``.open-lock`` `flock` that already orders the processes of ``loom serve
--workers N``, so two processes never migrate one file at once. The sequence is
`storage.versions`': read, refuse a newer version, create what is missing, run each step in
its own transaction together with its version record (a kill leaves the file at the last
recorded step, and the next start resumes there).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Final

from storage.clock import now_ms
from storage.errors import DriverErrors
from storage.versions import TEMPLATES_V2, THREADS_V2, Layout, Plan, Step, plan

__all__ = [
    "ERASURES",
    "INBOX",
    "JOBS",
    "QUEUE",
    "SUMMARIES",
    "TEMPLATES",
    "THREADS",
    "SqliteLayout",
    "inspect",
    "upgrade",
]

_errors = DriverErrors("sqlite", (sqlite3.Error,))
"""The read-only check's errors (a file that is not a database, unreadable); the stores'
own are translated by `storage.sqlite.database`."""

SqliteStep = Callable[[sqlite3.Connection], None]
SqliteLayout = Layout[SqliteStep]

_META = """
CREATE TABLE IF NOT EXISTS loom_schema (
    store TEXT PRIMARY KEY,
    version INTEGER NOT NULL,
    updated_at_ms INTEGER NOT NULL
);
"""


def _move_chunk_keys(conn: sqlite3.Connection) -> None:
    """1.0.0 kept a chunk's keys in its state row (``iter_chunk.keys``), rewritten with
    every lease; they now live in ``iter_chunk_keys``, written once. Moves them, and empties
    the old column (a chunk whose keys were moved already is left alone)."""
    conn.execute(
        "INSERT OR IGNORE INTO iter_chunk_keys (job_id, chunk_id, keys) "
        "SELECT job_id, chunk_id, keys FROM iter_chunk WHERE length(keys) > 0"
    )
    conn.execute("UPDATE iter_chunk SET keys = x'' WHERE length(keys) > 0")


def _nothing_to_rewrite(conn: sqlite3.Connection) -> None:
    """A version change with no rewrite: the store reads both encodings."""
    del conn


THREADS: Final[SqliteLayout] = Layout(
    store="threads",
    current=2,
    steps=(
        Step(
            to=2,
            does=THREADS_V2,
            run=_nothing_to_rewrite,
        ),
    ),
)
SUMMARIES: Final[SqliteLayout] = Layout(store="summaries", current=1)
INBOX: Final[SqliteLayout] = Layout(
    store="inbox",
    current=3,
    steps=(
        Step(
            to=2,
            does="deleted-thread markers, pending sweeps and operations tables created",
            run=_nothing_to_rewrite,
        ),
        Step(
            to=3,
            does="the change log (inbox_change) created, empty: watching starts from now",
            run=_nothing_to_rewrite,
        ),
    ),
)
QUEUE: Final[SqliteLayout] = Layout(store="queue", current=1)
ERASURES: Final[SqliteLayout] = Layout(store="erasures", current=1)
JOBS: Final[SqliteLayout] = Layout(
    store="jobs",
    current=2,
    steps=(
        Step(
            to=2,
            does="chunk keys moved from iter_chunk.keys to iter_chunk_keys",
            run=_move_chunk_keys,
        ),
    ),
)
TEMPLATES: Final[SqliteLayout] = Layout(
    store="templates",
    current=2,
    steps=(
        Step(
            to=2,
            does=TEMPLATES_V2,
            run=_nothing_to_rewrite,
        ),
    ),
)


def _recorded(conn: sqlite3.Connection, store: str) -> int | None:
    has_meta = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'loom_schema'"
    ).fetchone()
    if has_meta is None:
        return None
    row = conn.execute("SELECT version FROM loom_schema WHERE store = ?", (store,)).fetchone()
    return None if row is None else int(row[0])


def _has_data(conn: sqlite3.Connection) -> bool:
    """Whether a Loom table exists (a file from before versions were recorded)."""
    row = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name != 'loom_schema' "
        "AND name NOT LIKE 'sqlite_%' LIMIT 1"
    ).fetchone()
    return row is not None


def _plan(conn: sqlite3.Connection, layout: SqliteLayout, path: Path) -> Plan[SqliteStep]:
    return plan(
        layout,
        f"sqlite file {path} ({layout.store})",
        recorded=_recorded(conn, layout.store),
        has_data=_has_data(conn),
    )


def _record(conn: sqlite3.Connection, store: str, version: int) -> None:
    conn.execute(
        "INSERT INTO loom_schema (store, version, updated_at_ms) VALUES (?, ?, ?) "
        "ON CONFLICT (store) DO UPDATE SET version = excluded.version, "
        "updated_at_ms = excluded.updated_at_ms",
        (store, version, now_ms()),
    )


def upgrade(
    conn: sqlite3.Connection, script: str, layout: SqliteLayout, path: Path
) -> Plan[SqliteStep]:
    """Brings the file on `conn` (autocommit) to `layout.current`: see the module docstring.

    Raises `storage.versions.StoreTooNew` before writing anything.
    """
    found = _plan(conn, layout, path)
    conn.executescript(script + _META)
    for step in found.steps:
        conn.execute("BEGIN IMMEDIATE")
        try:
            step.run(conn)
            _record(conn, layout.store, step.to)
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")
        found.log_step(step)
    if found.writes:
        _record(conn, layout.store, found.target)  # a new file, or one that had no record
    found.log_done()
    return found


def inspect(path: Path, layout: SqliteLayout) -> Plan[SqliteStep]:
    """What opening the file at `path` would do, read-only (a missing file is not created)."""
    if not path.exists():
        return plan(layout, f"sqlite file {path} ({layout.store})", recorded=None, has_data=False)
    with _errors(path.name):
        conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
        try:
            return _plan(conn, layout, path)
        finally:
            conn.close()
