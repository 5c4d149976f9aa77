"""A small generated hierarchy in the embedded Iterator source, so `make run` has something
to iterate.

With no ``[iterator] source_url`` the Iterator reads ``iterator-source.sqlite3`` in the data
directory, created with the default schema (`storage.sql.schema`) and no rows: every scope
would answer NOT_FOUND. `make run` calls ``python -m storage.sqlite.demo_source --data-dir
DIR`` before serving, which fills an *empty* source with Box's four levels:

- enterprises 1..20, 5 users each (users 1..100);
- 0..6 files per user, 1..3 versions per file;
- about one user and one file in twenty soft-deleted (``deleted = 1``), so each level's
  ``where deleted = 0`` visibly counts.

The rows come from a fixed seed (the same ones on every machine), generated here rather than
downloaded, and are few enough to read by eye. A source holding any enterprise is left as it
is: the command never adds to or overwrites an operator's rows, and running it twice writes
once. The load harness's larger, skewed corpus is `loadtest/corpora/iterator.py`.
"""

from __future__ import annotations

import argparse
import random
import sqlite3
from collections.abc import Sequence
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

from storage.sql.schema import DEFAULT_SCHEMA

__all__ = ["SOURCE_FILE", "DemoRows", "demo_rows", "main", "write_demo_source"]

SOURCE_FILE = "iterator-source.sqlite3"
"""The embedded source's file in the data directory (`storage.engines`' embedded source)."""

ENTERPRISES = 20
USERS_PER_ENTERPRISE = 5
MAX_FILES_PER_USER = 6
MAX_VERSIONS_PER_FILE = 3
DELETED_SHARE = 0.05
SEED = 20261121


@dataclass(frozen=True, slots=True)
class DemoRows:
    """Rows per table, each ``(id, parent id, deleted)`` (an enterprise's parent is 0)."""

    enterprise: tuple[tuple[int, int, int], ...]
    users: tuple[tuple[int, int, int], ...]
    file: tuple[tuple[int, int, int], ...]
    file_version: tuple[tuple[int, int, int], ...]

    def live(self) -> dict[str, int]:
        """Rows per table that the default levels count (``deleted = 0``)."""
        return {
            "enterprise": sum(1 for row in self.enterprise if not row[2]),
            "users": sum(1 for row in self.users if not row[2]),
            "file": sum(1 for row in self.file if not row[2]),
            "file_version": sum(1 for row in self.file_version if not row[2]),
        }


def demo_rows() -> DemoRows:
    """The demo hierarchy, the same on every call."""
    rng = random.Random(SEED)
    enterprises = tuple((e, 0, 0) for e in range(1, ENTERPRISES + 1))
    users: list[tuple[int, int, int]] = []
    files: list[tuple[int, int, int]] = []
    versions: list[tuple[int, int, int]] = []
    for enterprise, _, _ in enterprises:
        for _ in range(USERS_PER_ENTERPRISE):
            user = len(users) + 1
            users.append((user, enterprise, int(rng.random() < DELETED_SHARE)))
            for _ in range(rng.randint(0, MAX_FILES_PER_USER)):
                file = len(files) + 1
                files.append((file, user, int(rng.random() < DELETED_SHARE)))
                for _ in range(rng.randint(1, MAX_VERSIONS_PER_FILE)):
                    versions.append((len(versions) + 1, file, 0))
    return DemoRows(enterprises, tuple(users), tuple(files), tuple(versions))


def write_demo_source(data_dir: Path) -> DemoRows | None:
    """Writes the demo hierarchy into the embedded source of `data_dir` when it holds no
    enterprise; returns what it wrote, or None when it left an existing source alone."""
    data_dir.mkdir(parents=True, exist_ok=True)
    with closing(sqlite3.connect(data_dir / SOURCE_FILE, timeout=30)) as conn, conn:
        for statement in DEFAULT_SCHEMA:
            conn.execute(statement)
        if conn.execute("SELECT 1 FROM enterprise LIMIT 1").fetchone():
            return None
        rows = demo_rows()
        conn.executemany(
            "INSERT INTO enterprise (id, deleted) VALUES (?, ?)",
            [(e, deleted) for e, _, deleted in rows.enterprise],
        )
        children = (
            ("users", "enterprise_id", rows.users),
            ("file", "user_id", rows.file),
            ("file_version", "file_id", rows.file_version),
        )
        for table, parent, table_rows in children:
            conn.executemany(
                f"INSERT INTO {table} (id, {parent}, deleted) VALUES (?, ?, ?)", table_rows
            )
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m storage.sqlite.demo_source [--data-dir DIR]``: what `make run` calls."""
    parser = argparse.ArgumentParser(
        prog="python -m storage.sqlite.demo_source",
        description="Fill an empty embedded Iterator source with a small demo hierarchy.",
    )
    parser.add_argument("--data-dir", type=Path, default=Path("data"), help="default: ./data")
    args = parser.parse_args(argv)
    rows = write_demo_source(args.data_dir)
    path = args.data_dir / SOURCE_FILE
    if rows is None:
        print(f"{path}: the Iterator's source already holds enterprises; left as it is")
        return 0
    live = rows.live()
    print(
        f"{path}: demo hierarchy written: enterprises 1..{ENTERPRISES}, "
        f"{live['users']} users, {live['file']} files, {live['file_version']} versions "
        "(rows not deleted)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
