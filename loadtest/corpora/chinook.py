"""The Chinook sample database, fetched pinned from Maven Central at run time, never committed.

Chinook (Luis Rocha; MIT) models a digital media store whose tables and columns are
CamelCase: ``"Artist"("ArtistId")`` → ``"Album"("ArtistId")`` → ``"Track"("AlbumId",
"Milliseconds")`` → ``"InvoiceLine"("TrackId")``. Real schemas look like that, and names in
that case are where an Iterator configured as ``table = "artist"`` goes wrong on
PostgreSQL, so the Iterator's tests read it on every source engine.

It comes from Julian Hyde's ``net.hydromatic:chinook-data-hsqldb:0.2`` (Apache-2.0), whose
``chinook.script`` is HSQLDB's plain-SQL image of the data set: one ``CREATE TABLE`` per
table and one ``INSERT`` per row (see `loadtest/corpora/README.md`). `ensure_jar()` runs
Maven's own client, ``mvn dependency:copy``, into ``~/.cache/loom/corpora`` (or
``$LOOM_CACHE_DIR/corpora``) once and checks the jar's pinned SHA-256 (a mismatch deletes it
and fails); later runs read the cache. `load()` creates the eleven tables, names spelled as
Chinook spells them (the dialect quotes them where it must), and inserts every row.
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
import shutil
import subprocess
import zipfile
from dataclasses import dataclass
from datetime import date
from decimal import Decimal
from pathlib import Path
from typing import Any

from sqlalchemy import Column, Date, Integer, MetaData, Numeric, String, Table
from sqlalchemy.ext.asyncio import create_async_engine

__all__ = [
    "ARTIFACT",
    "JAR_SHA256",
    "ChinookTable",
    "cache_dir",
    "ensure_jar",
    "load",
    "metadata",
    "read_tables",
]

ARTIFACT = "net.hydromatic:chinook-data-hsqldb:0.2"
"""Maven coordinates of the pinned release."""
JAR_SHA256 = "29805e76a53994841aff76d1b1d5656f0d8c4bf2f092cf63c0dd5521329e7212"
"""SHA-256 of ``chinook-data-hsqldb-0.2.jar`` (Maven Central's SHA-1:
56dcf0ad7baeb0ee9c65d6a5346022b79fc2d6b5)."""
LICENSE = "Apache-2.0 (the HSQLDB packaging); the Chinook data set itself is MIT (Luis Rocha)"

_CREATE = re.compile(r'^CREATE MEMORY TABLE "chinook"\."(\w+)"\((.*)\)$')
_COLUMN = re.compile(r'"(\w+)" (INTEGER|VARCHAR\((\d+)\)|DECIMAL\((\d+),(\d+)\)|DATE)')
_PRIMARY = re.compile(r"PRIMARY KEY\(([^)]*)\)")
_INSERT = re.compile(r'^INSERT INTO "chinook"\."(\w+)" VALUES\((.*)\)$')
_VALUE = re.compile(r"'(?:[^']|'')*'|NULL|-?\d+(?:\.\d+)?")
_ESCAPE = re.compile(r"\\u([0-9a-fA-F]{4})")


@dataclass(frozen=True)
class ChinookTable:
    """One table of the data set: its columns (name, HSQLDB type), key and rows."""

    name: str
    columns: tuple[tuple[str, str], ...]
    primary_key: tuple[str, ...]
    rows: tuple[tuple[Any, ...], ...]


def cache_dir() -> Path:
    """Where the downloaded jar is kept (``$LOOM_CACHE_DIR/corpora`` or
    ``~/.cache/loom/corpora``)."""
    base = os.environ.get("LOOM_CACHE_DIR") or str(Path.home() / ".cache" / "loom")
    return Path(base) / "corpora"


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def ensure_jar() -> Path:
    """The pinned jar in the cache, fetched by Maven (its local repository first, then
    Maven Central) when missing; its digest checked every time."""
    folder = cache_dir()
    folder.mkdir(parents=True, exist_ok=True)
    _, artifact, version = ARTIFACT.split(":")
    path = folder / f"{artifact}-{version}.jar"
    if path.exists() and _sha256(path) != JAR_SHA256:
        path.unlink()  # Maven would not overwrite it
    if not path.exists():
        command = ["mvn", "-B", "-q", "-Dstyle.color=never", "dependency:copy"]
        command += [f"-Dartifact={ARTIFACT}", f"-DoutputDirectory={folder}"]
        if shutil.which("mvn") is None:
            raise RuntimeError(f"mvn not found: it fetches {ARTIFACT} (the engines need it too)")
        offline = subprocess.run([*command, "-o"], capture_output=True, timeout=600, check=False)
        if offline.returncode != 0:
            online = subprocess.run(command, capture_output=True, timeout=600, check=False)
            if online.returncode != 0:
                raise RuntimeError(f"mvn could not fetch {ARTIFACT}: {online.stdout[-2000:]!r}")
    digest = _sha256(path)
    if digest != JAR_SHA256:
        path.unlink()
        raise RuntimeError(f"{path.name}: sha256 {digest} is not the pinned {JAR_SHA256}")
    return path


def _text(literal: str) -> str:
    inner = literal[1:-1].replace("''", "'")
    return _ESCAPE.sub(lambda m: chr(int(m.group(1), 16)), inner)


def _convert(literal: str, kind: str) -> Any:
    if literal == "NULL":
        return None
    if kind == "INTEGER":
        return int(literal)
    if kind.startswith("DECIMAL"):
        return Decimal(literal)
    if kind == "DATE":
        return date.fromisoformat(_text(literal))
    return _text(literal)


@functools.cache
def read_tables() -> dict[str, ChinookTable]:
    """Every table of the data set, parsed from the cached jar's ``chinook.script``."""
    with zipfile.ZipFile(ensure_jar()) as jar:
        script = jar.read("chinook.script").decode("ascii")
    shapes: dict[str, tuple[tuple[tuple[str, str], ...], tuple[str, ...]]] = {}
    rows: dict[str, list[tuple[Any, ...]]] = {}
    for line in script.splitlines():
        if created := _CREATE.match(line):
            name, body = created.groups()
            columns = tuple((m.group(1), m.group(2)) for m in _COLUMN.finditer(body))
            key = _PRIMARY.search(body)
            primary = tuple(c.strip('"') for c in key.group(1).split(",")) if key else ()
            shapes[name] = (columns, primary)
            rows[name] = []
        elif inserted := _INSERT.match(line):
            name, values = inserted.groups()
            columns = shapes[name][0]
            literals = _VALUE.findall(values)
            if len(literals) != len(columns):
                raise ValueError(f"chinook.script: cannot parse a row of {name}: {line[:120]}")
            rows[name].append(
                tuple(_convert(v, kind) for v, (_, kind) in zip(literals, columns, strict=True))
            )
    return {
        name: ChinookTable(name, columns, primary, tuple(rows[name]))
        for name, (columns, primary) in shapes.items()
    }


def _type(kind: str) -> Any:
    if kind == "INTEGER":
        return Integer()
    if kind == "DATE":
        return Date()
    if numeric := re.fullmatch(r"DECIMAL\((\d+),(\d+)\)", kind):
        return Numeric(int(numeric.group(1)), int(numeric.group(2)))
    return String(int(kind[len("VARCHAR(") : -1]))


def metadata() -> MetaData:
    """The data set's tables as SQLAlchemy sees them (for the DDL and for plain queries
    written against it, which quote each name as the dialect must)."""
    meta = MetaData()
    for table in read_tables().values():
        Table(
            table.name,
            meta,
            *(
                Column(
                    name,
                    _type(kind),
                    primary_key=name in table.primary_key,
                    autoincrement=False,
                )
                for name, kind in table.columns
            ),
            mysql_charset="utf8mb4",  # names like "Stanisław" (other dialects ignore it)
        )
    return meta


async def load(url: str, *, batch: int = 2000) -> MetaData:
    """Creates Chinook's tables at a SQLAlchemy async URL (an empty database) and inserts
    every row; returns their metadata."""
    meta = metadata()
    engine = create_async_engine(url)
    try:
        async with engine.begin() as conn:
            await conn.run_sync(meta.create_all)
        for table in read_tables().values():
            target = meta.tables[table.name]
            names = [name for name, _ in table.columns]
            for start in range(0, len(table.rows), batch):
                part = [dict(zip(names, r, strict=True)) for r in table.rows[start : start + batch]]
                async with engine.begin() as conn:
                    await conn.execute(target.insert(), part)
    finally:
        await engine.dispose()
    return meta
