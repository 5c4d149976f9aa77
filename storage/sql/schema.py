"""The default iterated hierarchy's schema: Box's enterprise -> user -> file -> version.

Portable DDL (SQLite, PostgreSQL, MariaDB/MySQL). Each child table has an index on
``(parent, id, deleted)``: the keyset read ``WHERE parent = ? AND id > ? AND deleted = 0
ORDER BY id`` is then an index-only range scan on every engine, and start-up validation
finds the ``(parent, id)`` prefix it asks for. Used for the embedded default source and by
the load-test corpus (`loadtest/corpora/iterator.py`).
"""

from __future__ import annotations

__all__ = ["DEFAULT_SCHEMA", "TABLES"]

TABLES = ("enterprise", "users", "file", "file_version")
"""Top level first."""

DEFAULT_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS enterprise ("
    "id BIGINT NOT NULL PRIMARY KEY, deleted SMALLINT NOT NULL DEFAULT 0)",
    "CREATE TABLE IF NOT EXISTS users ("
    "id BIGINT NOT NULL PRIMARY KEY, enterprise_id BIGINT NOT NULL, "
    "deleted SMALLINT NOT NULL DEFAULT 0)",
    "CREATE INDEX IF NOT EXISTS users_by_enterprise ON users (enterprise_id, id, deleted)",
    "CREATE TABLE IF NOT EXISTS file ("
    "id BIGINT NOT NULL PRIMARY KEY, user_id BIGINT NOT NULL, "
    "deleted SMALLINT NOT NULL DEFAULT 0)",
    "CREATE INDEX IF NOT EXISTS file_by_user ON file (user_id, id, deleted)",
    "CREATE TABLE IF NOT EXISTS file_version ("
    "id BIGINT NOT NULL PRIMARY KEY, file_id BIGINT NOT NULL, "
    "deleted SMALLINT NOT NULL DEFAULT 0)",
    "CREATE INDEX IF NOT EXISTS file_version_by_file ON file_version (file_id, id, deleted)",
)
"""Statements, in order; each is idempotent."""
