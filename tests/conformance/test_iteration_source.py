"""The IterationSource contract, run unchanged on SQLite, PostgreSQL and MariaDB.

Each test creates its own tables (a unique prefix in the shared test database): a parent
table, a child table with soft-deleted rows, and a leaf table keyed by a composite key.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import BigInteger, Column, MetaData, String, Table, make_url, text
from sqlalchemy.ext.asyncio import create_async_engine

from storage import factory
from storage.errors import StorageRejected, StorageUnavailable
from storage.ports import IterationSource, Positions, SourceLevel
from tests.engines import source_url
from tests.serving import free_port

# parent p: ids 1..5 (3 deleted); child c: rows of parents 1, 2, 4, 5 (none for 3);
# leaf v: composite key (a, b) under child ids.
PARENTS = [(1, 0), (2, 0), (3, 1), (4, 0), (5, 0)]
CHILDREN = [(i, (1, 1, 2, 4, 5)[i % 5], int(i % 7 == 0)) for i in range(1, 301)]
LEAVES = [(c, a, b) for c in (10, 20) for a in (1, 2) for b in (1, 2, 3)]


@pytest.fixture
def url(source_engine: str, tmp_path: Path) -> str:
    """The test database of `source_engine` (a fresh SQLite file)."""
    return source_url(source_engine, tmp_path)


@pytest.fixture
async def source(url: str) -> AsyncIterator[IterationSource]:
    """A source over three fresh tables (a unique prefix) in `url`'s database."""
    ns = f"t{uuid.uuid4().hex[:8]}"
    engine = create_async_engine(url)
    async with engine.begin() as conn:
        await conn.execute(text(f"CREATE TABLE {ns}_p (id BIGINT PRIMARY KEY, deleted INT)"))
        await conn.execute(
            text(f"CREATE TABLE {ns}_c (id BIGINT PRIMARY KEY, pid BIGINT, deleted INT)")
        )
        await conn.execute(text(f"CREATE INDEX {ns}_c_pid ON {ns}_c (pid, id)"))
        await conn.execute(
            text(f"CREATE TABLE {ns}_v (cid BIGINT, a BIGINT, b BIGINT, PRIMARY KEY (cid, a, b))")
        )
        await conn.execute(
            text(f"INSERT INTO {ns}_p VALUES (:i, :d)"), [{"i": i, "d": d} for i, d in PARENTS]
        )
        await conn.execute(
            text(f"INSERT INTO {ns}_c VALUES (:i, :p, :d)"),
            [{"i": i, "p": p, "d": d} for i, p, d in CHILDREN],
        )
        await conn.execute(
            text(f"INSERT INTO {ns}_v VALUES (:c, :a, :b)"),
            [{"c": c, "a": a, "b": b} for c, a, b in LEAVES],
        )
    await engine.dispose()
    levels = [
        SourceLevel(
            name="p", table=f"{ns}_p", id_columns=("id",), parent_column="", where="deleted = 0"
        ),
        SourceLevel(
            name="c", table=f"{ns}_c", id_columns=("id",), parent_column="pid", where="deleted = 0"
        ),
        SourceLevel(
            name="v", table=f"{ns}_v", id_columns=("a", "b"), parent_column="cid", where=""
        ),
    ]
    src = await factory.open_iteration_source(url, levels)
    try:
        yield src
    finally:
        await src.close()
        cleanup = create_async_engine(url)
        async with cleanup.begin() as conn:
            for t in ("v", "c", "p"):
                await conn.execute(text(f"DROP TABLE {ns}_{t}"))
        await cleanup.dispose()


def _children(parents: set[int]) -> list[tuple[int, int]]:
    return sorted((p, i) for i, p, d in CHILDREN if p in parents and not d)


async def _walk(
    src: IterationSource, level: int, parents: list[int], limit: int
) -> list[tuple[int, ...]]:
    rows: list[tuple[int, ...]] = []
    after: tuple[int, ...] = ()
    while True:
        chunk = await src.read(
            level, parents=parents, first=(), last=(), after=after, upto=(), limit=limit
        )
        rows += chunk
        if len(chunk) < limit:
            return rows
        after = chunk[-1]


async def test_bounded_read_keeps_valid_rows_in_the_range(source: IterationSource) -> None:
    """A bounded read returns the level's valid ids in [first, last], in order."""
    rows = await source.read(0, parents=None, first=(2,), last=(5,), after=(), upto=(), limit=10)
    assert rows == [(2,), (4,), (5,)]
    assert isinstance(rows, Positions)
    assert (rows.width, rows.tobytes()) == (1, Positions.of(1, [(2,), (4,), (5,)]).tobytes())
    assert await source.exists(0, (1,), (1,))
    assert not await source.exists(0, (3,), (3,))  # soft-deleted
    assert not await source.exists(0, (6,), (9,))


@pytest.mark.parametrize("limit", [1, 7, 50, 1000], ids=lambda n: f"limit{n}")
async def test_keyset_walk_over_many_parents_sees_every_child_once(
    source: IterationSource, limit: int
) -> None:
    """Walking children of several parents chunk by chunk yields each valid row once, in
    (parent, id) order, whatever the chunk size (parents without children included)."""
    rows = await _walk(source, 1, [1, 2, 3, 5], limit)
    assert rows == _children({1, 2, 3, 5})
    empty = await source.read(1, parents=[3], first=(), last=(), after=(), upto=(), limit=limit)
    assert (len(empty), empty.width) == (0, 2)  # a children position: (parent, id)


async def test_upto_bound_is_inclusive_and_splits_a_parent(source: IterationSource) -> None:
    """Reads stop at an inclusive end position, even inside a parent: two ranges cut at a
    probe point cover the parent exactly."""
    everything = _children({1, 2})
    cut = await source.probe(1, parents=[1], first=(), last=(), after=(), upto=(), offset=20)
    assert cut == everything[20]
    left = await source.read(1, parents=[1, 2], first=(), last=(), after=(), upto=cut, limit=1000)
    right = await source.read(1, parents=[1, 2], first=(), last=(), after=cut, upto=(), limit=1000)
    assert [*left, *right] == everything
    assert left[-1] == cut


async def test_a_parent_alone_bounds_before_its_first_row(source: IterationSource) -> None:
    """(p,) sorts before every row of parent p: ranges cut there split a parent list
    between parents, with no query to find the cut, and cover it exactly."""
    everything = _children({1, 2, 4, 5})
    parents = [1, 2, 4, 5]
    left = await source.read(1, parents=parents, first=(), last=(), after=(), upto=(4,), limit=1000)
    right = await source.read(
        1, parents=parents, first=(), last=(), after=(4,), upto=(), limit=1000
    )
    assert left == _children({1, 2})
    assert [*left, *right] == everything
    middle = await source.read(
        1, parents=parents, first=(), last=(), after=(2,), upto=(5,), limit=1000
    )
    assert middle == _children({2, 4})


async def test_probe_past_the_end_is_none(source: IterationSource) -> None:
    """A probe further than the rows left answers None."""
    n = len(_children({4}))
    assert (
        await source.probe(1, parents=[4], first=(), last=(), after=(), upto=(), offset=n) is None
    )
    last = await source.probe(1, parents=[4], first=(), last=(), after=(), upto=(), offset=n - 1)
    assert last == _children({4})[-1]


async def test_composite_keys_compare_as_row_values(source: IterationSource) -> None:
    """A composite-keyed level is walked by (parent, a, b) > marker, one row at a time."""
    rows = await _walk(source, 2, [10, 20], 1)
    assert rows == sorted(LEAVES)
    after = await source.read(
        2, parents=[10, 20], first=(), last=(), after=(10, 1, 3), upto=(20, 1, 2), limit=100
    )
    assert after == [(10, 2, 1), (10, 2, 2), (10, 2, 3), (20, 1, 1), (20, 1, 2)]


async def test_schema_reports_tables_columns_and_indexes(source: IterationSource) -> None:
    """The live catalog shows each table's columns and its (parent, id) index."""
    facts = await source.schema()
    child = source.levels[1].table
    assert {"id", "pid", "deleted"} <= set(facts.columns[child])
    assert any(ix[:2] == ("pid", "id") for ix in facts.indexes[child])
    await source.ping()


async def _open_with(source: IterationSource, url: str, **changes: Any) -> IterationSource:
    """Another source on the same tables, with some settings of the child level changed."""
    levels = list(source.levels)
    levels[1] = replace(levels[1], **changes)
    return await factory.open_iteration_source(url, levels)


async def test_a_where_the_database_refuses_is_rejected(source: IterationSource, url: str) -> None:
    """A `where` naming a column the table lacks is refused for good (StorageRejected, with
    the database's message), by the start-up check and by a read alike; a good level's
    check passes and reads nothing."""
    for level in range(3):
        await source.check_read(level)
    bad = await _open_with(source, url, where="delted = 0")
    try:
        with pytest.raises(StorageRejected, match=r"(?i)delted"):
            await bad.check_read(1)
        with pytest.raises(StorageRejected, match=r"(?i)delted"):
            await bad.read(1, parents=[1], first=(), last=(), after=(), upto=(), limit=10)
        await bad.check_read(0)  # the other levels are fine
    finally:
        await bad.close()
    syntax = await _open_with(source, url, where="deleted = = 0")
    try:
        with pytest.raises(StorageRejected):
            await syntax.check_read(1)
    finally:
        await syntax.close()


async def test_a_key_that_is_not_an_integer_is_rejected(source: IterationSource, url: str) -> None:
    """The Iterator walks integer keys: a level whose id column holds text is refused for
    good (StorageRejected naming the level), never emitted wrong or taken for an outage."""
    table = source.levels[1].table.removesuffix("_c") + "_s"
    engine = create_async_engine(url)
    async with engine.begin() as conn:
        await conn.execute(text(f"CREATE TABLE {table} (id VARCHAR(20) PRIMARY KEY, pid BIGINT)"))
        await conn.execute(text(f"INSERT INTO {table} VALUES ('a', 1), ('b', 1)"))
    odd = await _open_with(source, url, table=table, where="")
    try:
        with pytest.raises(StorageRejected, match=r"level 'c'.*not an integer"):
            await odd.read(1, parents=[1], first=(), last=(), after=(), upto=(), limit=10)
    finally:
        await odd.close()
        async with engine.begin() as conn:
            await conn.execute(text(f"DROP TABLE {table}"))
        await engine.dispose()


async def test_a_column_renamed_under_a_reader_is_rejected(
    source: IterationSource, url: str
) -> None:
    """The schema changes under a source that has been reading: its next read is refused
    for good, not taken for an outage."""
    assert await _walk(source, 1, [1, 2], 50) == _children({1, 2})
    child = source.levels[1].table
    engine = create_async_engine(url)
    async with engine.begin() as conn:
        await conn.execute(text(f"ALTER TABLE {child} RENAME COLUMN deleted TO gone"))
    await engine.dispose()
    with pytest.raises(StorageRejected, match=r"(?i)deleted"):
        await _walk(source, 1, [1, 2], 50)


async def test_an_unreachable_source_is_unavailable(
    source: IterationSource, url: str, tmp_path: Path
) -> None:
    """A database that cannot be reached is an outage (StorageUnavailable), never a
    refused statement: jobs wait for it instead of failing."""
    there = make_url(url)
    if there.get_backend_name() == "sqlite":
        there = there.set(database=str(tmp_path / "no-such-directory" / "source.sqlite3"))
    else:
        there = there.set(port=free_port())
    gone = await factory.open_iteration_source(there.render_as_string(False), source.levels)
    try:
        with pytest.raises(StorageUnavailable) as err:
            await gone.read(0, parents=None, first=(1,), last=(5,), after=(), upto=(), limit=10)
        assert not isinstance(err.value, StorageRejected)
        with pytest.raises(StorageUnavailable):
            await gone.check_read(0)
    finally:
        await gone.close()


@pytest.fixture
async def camel(source: IterationSource, url: str) -> AsyncIterator[tuple[str, str]]:
    """A table with a CamelCase name and columns (quoted by the dialect when it must be),
    beside the fixture's tables; yields (url, table name)."""
    table = f"{source.levels[0].table[:-2]}Artist"
    metadata = MetaData()
    Table(
        table,
        metadata,
        Column("ArtistId", BigInteger, primary_key=True, autoincrement=False),
        Column("Name", String(40)),
    )
    engine = create_async_engine(url)
    async with engine.begin() as conn:
        await conn.run_sync(metadata.create_all)
    try:
        yield url, table
    finally:
        async with engine.begin() as conn:
            await conn.run_sync(metadata.drop_all)
        await engine.dispose()


async def test_the_catalog_spells_names_as_the_reads_resolve_them(
    camel: tuple[str, str],
) -> None:
    """The schema facts spell a CamelCase table and its columns as the catalog does, and
    their case flags say what the reads do: a read naming the table (or a column) in
    lower case finds it exactly when the facts say the database folds case."""
    url, table = camel
    exact = SourceLevel(name="a", table=table, id_columns=("ArtistId",), parent_column="", where="")
    source = await factory.open_iteration_source(url, [exact])
    try:
        facts = await source.schema()
        await source.check_read(0)
    finally:
        await source.close()
    assert table in facts.tables
    assert facts.columns[table] == {"ArtistId", "Name"}
    assert ("ArtistId",) in facts.indexes[table]
    for level, folds in (
        (replace(exact, table=table.lower()), facts.tables_fold_case),
        (replace(exact, id_columns=("artistid",)), facts.columns_fold_case),
        (replace(exact, where="name IS NOT NULL"), facts.columns_fold_case),
    ):
        wrong = await factory.open_iteration_source(url, [level])
        try:
            if folds:
                await wrong.check_read(0)
            else:
                with pytest.raises(StorageRejected):
                    await wrong.check_read(0)
        finally:
            await wrong.close()
