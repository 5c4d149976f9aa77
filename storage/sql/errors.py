"""The SQL source's driver errors, classified once: the statement is wrong, or the database
cannot be reached.

A statement the database refuses as written fails the same way on every retry. Taken for an
outage, it paused a job, the source monitor found the database answering and resumed it,
and the job flapped between RUNNING and PAUSED for ever. So each driver's own code decides:

- PostgreSQL (asyncpg): SQLSTATE class 42, "syntax error or access rule violation"
  (42601 syntax error, 42P01 undefined table, 42703 undefined column, 42883 undefined
  function, 42501 insufficient privilege).
- MariaDB / MySQL (PyMySQL under aiomysql): the SQLSTATE of the error packet, class 42
  (1054 unknown column is 42S22, 1146 unknown table 42S02, 1064 syntax error 42000); the
  error number when a PyMySQL older than 1.2 does not keep the SQLSTATE.
- SQLite: the primary result code SQLITE_ERROR (no such table / column / function, syntax
  error). SQLITE_BUSY, LOCKED, IOERR, CANTOPEN, FULL stay outages.

Those become `StorageRejected` carrying the database's own message (and, from PostgreSQL,
its hint: "Perhaps you meant to reference the column …"); everything else — a refused
connection, a timeout, a server shutting down — is `StorageUnavailable`. `source_errors`
gives the source adapter its one `DriverErrors` per dialect.
"""

from __future__ import annotations

import sqlite3
from typing import Any

import asyncpg
from sqlalchemy.exc import SQLAlchemyError

from storage.errors import (
    DriverErrors,
    StorageError,
    StorageRejected,
    StorageUnavailable,
    describe,
)

__all__ = ["source_errors"]

_MYSQL_CLASS_42 = {
    1051: "42S02",  # unknown table (DROP)
    1054: "42S22",  # unknown column
    1064: "42000",  # syntax error
    1109: "42S02",  # unknown table in a clause
    1142: "42000",  # table access denied
    1143: "42000",  # column access denied
    1146: "42S02",  # table does not exist
    1149: "42000",  # syntax error
    1305: "42000",  # function does not exist
}
"""MySQL error numbers whose SQLSTATE is of class 42, for PyMySQL releases that drop it."""


def _sqlite(orig: sqlite3.Error) -> tuple[bool, str]:
    code = getattr(orig, "sqlite_errorcode", None)
    name = getattr(orig, "sqlite_errorname", None) or "SQLite error"
    permanent = code is not None and code & 0xFF == sqlite3.SQLITE_ERROR
    return permanent, f"{orig} ({name})"


def _postgres(orig: Any) -> tuple[bool, str]:
    state = str(getattr(orig, "sqlstate", None) or "")
    # asyncpg's own exception: raised as is by the PostgreSQL source, or the cause of the
    # one SQLAlchemy flattens its fields into.
    cause = orig if isinstance(orig, asyncpg.PostgresError) else orig.__cause__
    message = str(getattr(cause, "message", "") or orig)
    hint = getattr(cause, "hint", None)
    if hint:
        message += f" (hint: {hint})"
    return state.startswith("42"), f"{message} (SQLSTATE {state})" if state else message


def _mysql(orig: Any) -> tuple[bool, str]:
    args: tuple[Any, ...] = tuple(getattr(orig, "args", ()))
    number = args[0] if args and isinstance(args[0], int) else None
    message = str(args[1]) if len(args) > 1 else str(orig)
    state = str(getattr(orig, "sqlstate", None) or _MYSQL_CLASS_42.get(number or 0, ""))
    codes = ", ".join(x for x in (f"SQLSTATE {state}" if state else "", f"error {number}") if x)
    return state.startswith("42"), f"{message} ({codes})"


_FAULTS: tuple[type[BaseException], ...] = (
    SQLAlchemyError,
    sqlite3.Error,
    asyncpg.PostgresError,
    asyncpg.InterfaceError,
    OSError,
    ConnectionError,
    TimeoutError,
)
"""What a source call can raise: SQLAlchemy wraps the drivers' errors; a connection attempt
may fail beneath it; the SQLite and PostgreSQL sources read through stdlib `sqlite3` and
asyncpg themselves."""


def _refusal(exc: BaseException, dialect: str) -> str | None:
    """The database's own message when it refused the statement for good, else None."""
    # SQLAlchemy's DBAPIError wraps the driver's error; sqlite3 and asyncpg raise their own.
    native = isinstance(exc, sqlite3.Error | asyncpg.PostgresError)
    orig = exc if native else getattr(exc, "orig", None)
    permanent, message = False, ""
    if isinstance(orig, sqlite3.Error):
        permanent, message = _sqlite(orig)
    elif orig is not None and dialect == "postgresql":
        permanent, message = _postgres(orig)
    elif orig is not None and dialect == "mysql":
        permanent, message = _mysql(orig)
    return message if permanent else None


def source_errors(dialect: str) -> DriverErrors:
    """The one translator of a source on `dialect` (sqlite, postgresql, mysql):
    `StorageRejected` with the database's message when it refused the statement for good,
    `StorageUnavailable` naming the driver's exception otherwise."""

    def classify(exc: BaseException) -> type[StorageError]:
        return StorageUnavailable if _refusal(exc, dialect) is None else StorageRejected

    def detail(exc: BaseException) -> str:
        refusal = _refusal(exc, dialect)
        return describe(exc) if refusal is None else " ".join(refusal.split())

    return DriverErrors(f"source {dialect}", _FAULTS, classify=classify, detail=detail)
