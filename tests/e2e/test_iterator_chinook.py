"""The Iterator over a real third-party schema: the Chinook sample database, whose tables and
columns are CamelCase, loaded into SQLite, PostgreSQL and MariaDB (pinned from Maven Central
at run time, `loadtest/corpora/chinook.py`).

The hierarchy artist → album → track → invoice line is configuration only, names spelled as
Chinook spells them, with a ``where`` on ``"Milliseconds"``. Real jobs through the real
server emit exactly what plain SQL joins of the same scope give. Start-up refuses what
would fail every job — a ``where`` the database rejects, a name in a case the reads will not
find — naming the setting and quoting the database; and a schema changed under a running
job fails the job, with the reason in GetJob, where an outage only pauses it.
"""

from __future__ import annotations

import asyncio
import re
import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import grpc
import pytest
import pytest_asyncio
from grpc_health.v1 import health_pb2, health_pb2_grpc
from loom.v1 import iterator_pb2 as pb
from loom.v1 import iterator_pb2_grpc
from sqlalchemy import Index, MetaData, select, text
from sqlalchemy.ext.asyncio import create_async_engine

from loadtest.corpora.chinook import load
from loadtest.corpora.iterator import private_database
from server.config import ConfigError, Settings
from server.iterator.settings import IteratorLevel
from tests.conftest import selected_engines
from tests.engines import settings_for, source_url
from tests.serving import Running, eventually, running_server

ENGINES = ("sqlite", "postgres", "mariadb")
CHAIN = (
    ("artist", "Artist", "ArtistId", ""),
    ("album", "Album", "AlbumId", "ArtistId"),
    ("track", "Track", "TrackId", "AlbumId"),
    ("invoice_line", "InvoiceLine", "InvoiceLineId", "TrackId"),
)
"""(level, table, id column, parent column), top first: Chinook as its own names say."""
LONG = 200_000
"""Only tracks longer than this many milliseconds count (the track level's `where`)."""


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "chinook_engine" in metafunc.fixturenames:
        engines = selected_engines(metafunc.config, ENGINES)
        metafunc.parametrize("chinook_engine", engines, ids=engines, scope="module")


@dataclass
class Chinook:
    """Chinook loaded in a database of its own on one engine."""

    engine: str
    url: str
    meta: MetaData


def track_where(engine: str, column: str = "Milliseconds") -> str:
    """The operator's SQL for "long tracks": PostgreSQL needs the CamelCase column quoted
    (unquoted it folds to lower case), MariaDB and SQLite take it bare."""
    name = f'"{column}"' if engine == "postgres" else column
    return f"{name} > {LONG}"


def levels(engine: str, **changes: dict[str, Any]) -> tuple[IteratorLevel, ...]:
    """Chinook's hierarchy as `[[iterator.levels]]` would say it; `changes` maps a level
    name to settings that differ (a typo, a name in another case)."""
    out = []
    for name, table, id_column, parent in CHAIN:
        level = IteratorLevel(name, table, id_column, parent_column=parent)
        if name == "track":
            level = replace(level, where=track_where(engine))
        out.append(replace(level, **changes.get(name, {})))
    return tuple(out)


async def _loaded(engine: str, url: str) -> MetaData:
    """Loads Chinook at `url` with the `(parent, id)` indexes the Iterator asks for (what an
    operator adds; Chinook's own scripts index the parent column alone)."""
    meta = await load(url)
    db = create_async_engine(url)
    try:
        async with db.begin() as conn:
            for _, table, id_column, parent in CHAIN[1:]:
                t = meta.tables[table]
                index = Index(f"loom_{table}_by_{parent}", t.c[parent], t.c[id_column])
                await conn.run_sync(index.create)
    finally:
        await db.dispose()
    return meta


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def chinook(
    chinook_engine: str, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Chinook]:
    """Chinook on `chinook_engine`, in a database of its own, shared by the module."""
    data = Path(tmp_path_factory.mktemp(f"chinook-{chinook_engine}"))
    async with private_database(source_url(chinook_engine, data)) as url:
        yield Chinook(chinook_engine, url, await _loaded(chinook_engine, url))


def _settings(
    chinook: Chinook, data: Path, hierarchy: Sequence[IteratorLevel], **iterator: Any
) -> Settings:
    """A server iterating `chinook` (queues and job state embedded), in small chunks so
    albums are read in several steps and the longest are split."""
    base = settings_for("sqlite", data, iterator_queue="sqlite", iterator_state="sqlite")
    knobs = {
        "source_url": chinook.url,
        "levels": tuple(hierarchy),
        "large_range_threshold": 12,
        "max_chunk": 25,
        "initial_chunk": 25,
        "min_chunk": 5,
        "check_interval_s": 0.1,
        **iterator,
    }
    return replace(base, iterator=replace(base.iterator, **knobs))


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def server(
    chinook: Chinook, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Running]:
    """A server whose hierarchy is Chinook's, shared by the module."""
    data = Path(tmp_path_factory.mktemp(f"chinook-server-{chinook.engine}"))
    async with running_server(_settings(chinook, data, levels(chinook.engine))) as running:
        yield running


async def truth(chinook: Chinook, scope: str, emit: str, first: int, last: int) -> list[int]:
    """The ids of level `emit` under ids `first`..`last` of level `scope`: plain SQL joins
    down Chinook's foreign keys, long tracks only, no keyset."""
    names = [c[0] for c in CHAIN]
    top, bottom = names.index(scope), names.index(emit)
    tables = [chinook.meta.tables[CHAIN[i][1]] for i in range(top, bottom + 1)]
    joined: Any = tables[0]
    for offset, table in enumerate(tables[1:], start=1):
        level = top + offset
        joined = joined.join(
            table, table.c[CHAIN[level][3]] == tables[offset - 1].c[CHAIN[level - 1][2]]
        )
    query = select(tables[-1].c[CHAIN[bottom][2]]).select_from(joined)
    query = query.where(tables[0].c[CHAIN[top][2]].between(first, last))
    if top <= names.index("track") <= bottom:
        query = query.where(chinook.meta.tables["Track"].c.Milliseconds > LONG)
    db = create_async_engine(chinook.url)
    try:
        async with db.connect() as conn:
            return sorted(row[0] for row in await conn.execute(query))
    finally:
        await db.dispose()


async def _drain(stub: iterator_pb2_grpc.IteratorStub, job_id: str) -> list[int]:
    keys: list[int] = []
    async for batch in stub.StreamObjects(pb.StreamObjectsRequest(job_id=job_id), timeout=120):
        keys.extend(k for c in batch.chunks for k in c.object_keys)
    return keys


async def _slow_track_job(
    stub: iterator_pb2_grpc.IteratorStub,
) -> tuple[asyncio.Task[list[int]], Callable[[], Awaitable[pb.Job]]]:
    """Every track of every artist at 100 objects/s, streamed by a consumer; returns once it
    has emitted, with the consumer's task and a GetJob of it."""
    job = await stub.StartIteration(pb.StartIterationRequest(
        level="track", rate_limit_per_second=100,
        enterprise_range=pb.EnterpriseRange(first_enterprise_id=1, last_enterprise_id=275),
    ))  # fmt: skip
    consumer = asyncio.create_task(_drain(stub, job.job_id))

    async def get() -> pb.Job:
        return await stub.GetJob(pb.GetJobRequest(job_id=job.job_id))

    await eventually(get, lambda j: j.objects_emitted > 0, timeout_s=60)
    return consumer, get


@pytest.mark.parametrize(
    ("request_", "scope", "first", "last"),
    [
        (pb.StartIterationRequest(level="track", enterprise_range=pb.EnterpriseRange(
            first_enterprise_id=1, last_enterprise_id=275)), "artist", 1, 275),
        (pb.StartIterationRequest(level="invoice_line", enterprise_range=pb.EnterpriseRange(
            first_enterprise_id=1, last_enterprise_id=275)), "artist", 1, 275),
        (pb.StartIterationRequest(level="album", enterprise_id=90), "artist", 90, 90),
        (pb.StartIterationRequest(level="track", level_scope=pb.LevelScope(
            level="album", first_key=[1], last_key=[120])), "album", 1, 120),
    ],
    ids=["every-long-track", "every-invoice-line", "one-artists-albums", "albums-tracks"],
)  # fmt: skip
async def test_jobs_emit_exactly_the_database(
    chinook: Chinook,
    server: Running,
    request_: pb.StartIterationRequest,
    scope: str,
    first: int,
    last: int,
) -> None:
    """Every object of the scope is emitted once (every long track of every album of every
    artist, every invoice line of those tracks, …), and the job completes."""
    stub = iterator_pb2_grpc.IteratorStub(server.channel)
    expected = await truth(chinook, scope, request_.level, first, last)
    assert expected, "the scope is not empty"
    job = await stub.StartIteration(request_)
    emitted = await _drain(stub, job.job_id)
    assert sorted(emitted) == expected
    final = await stub.GetJob(pb.GetJobRequest(job_id=job.job_id))
    assert final.state == pb.JOB_STATE_COMPLETED
    assert final.objects_emitted == len(expected)


async def _start_up_error(settings: Settings) -> str:
    with pytest.raises(ConfigError) as err:
        async with running_server(settings):
            pass
    return str(err.value)


async def test_start_up_refuses_a_where_the_database_rejects(
    chinook: Chinook, tmp_path: Path
) -> None:
    """A misspelt column in a level's `where` stops start-up, naming the setting and
    quoting the database, instead of flapping every job between RUNNING and PAUSED."""
    typo = {"track": {"where": "Miliseconds > 200000"}}
    message = await _start_up_error(_settings(chinook, tmp_path, levels(chinook.engine, **typo)))
    assert message.startswith(
        "iterator.levels[2].where = 'Miliseconds > 200000' fails on the source: "
    ), message
    assert re.search(r"(?i)\bmiliseconds\b", message.split("fails on the source: ")[1])


async def _folds_case(chinook: Chinook) -> tuple[bool, bool]:
    """Whether this database finds a table, and a column, named in another case."""
    if chinook.engine == "sqlite":
        return True, True
    if chinook.engine == "postgres":
        return False, False
    db = create_async_engine(chinook.url)
    try:
        async with db.connect() as conn:
            casing = (await conn.execute(text("SELECT @@lower_case_table_names"))).scalar()
    finally:
        await db.dispose()
    return bool(casing), True


async def test_names_are_checked_the_way_the_reads_quote_them(
    chinook: Chinook, tmp_path: Path
) -> None:
    """`table = "artist"` over Chinook's "Artist" (and `parent_column = "artistid"`) stops
    start-up where the database would not find it, saying which name does exist; where it
    would (SQLite ignores case, MariaDB's columns too) the server starts and reads right."""
    tables_fold, columns_fold = await _folds_case(chinook)
    cases = [
        ("table", {"artist": {"table": "artist"}}, tables_fold, "iterator.levels[0].table", "Artist"),
        ("column", {"album": {"parent_column": "artistid"}}, columns_fold,
         "iterator.levels[1].parent_column", "ArtistId"),
    ]  # fmt: skip
    for what, changes, found, setting, actual in cases:
        settings = _settings(chinook, tmp_path / what, levels(chinook.engine, **changes))
        if not found:
            message = await _start_up_error(settings)
            assert message.startswith(f"{setting}: "), message
            assert f'did you mean "{actual}"?' in message
            continue
        async with running_server(settings) as running:
            stub = iterator_pb2_grpc.IteratorStub(running.channel)
            job = await stub.StartIteration(
                pb.StartIterationRequest(enterprise_id=22, level="album")
            )
            assert sorted(await _drain(stub, job.job_id)) == await truth(
                chinook, "artist", "album", 22, 22
            )


@pytest_asyncio.fixture(loop_scope="session")
async def own_chinook(chinook_engine: str, tmp_path: Path) -> AsyncIterator[Chinook]:
    """Chinook in a database of this test alone (it changes the schema)."""
    async with private_database(source_url(chinook_engine, tmp_path)) as url:
        yield Chinook(chinook_engine, url, await _loaded(chinook_engine, url))


async def _health(running: Running) -> int:
    reply = await health_pb2_grpc.HealthStub(running.channel).Check(
        health_pb2.HealthCheckRequest(service="loom.v1.Iterator"), timeout=10
    )
    return int(reply.status)


async def test_a_column_renamed_under_a_running_job_fails_it(
    own_chinook: Chinook, tmp_path: Path
) -> None:
    """The track level's column is renamed while a job reads tracks: the job fails (not
    paused, not flapping), GetJob names the level and quotes the database, its stream ends,
    and the Iterator stays SERVING (the database is up; the job's read is wrong)."""
    chinook = own_chinook
    settings = _settings(chinook, tmp_path, levels(chinook.engine))
    async with running_server(settings) as running:
        stub = iterator_pb2_grpc.IteratorStub(running.channel)
        total = len(await truth(chinook, "artist", "track", 1, 275))
        consumer, get = await _slow_track_job(stub)
        db = create_async_engine(chinook.url)
        try:
            quote = db.dialect.identifier_preparer.quote
            async with db.begin() as conn:
                await conn.execute(text(
                    f"ALTER TABLE {quote('Track')} RENAME COLUMN {quote('Milliseconds')} "
                    f"TO {quote('Duration')}"
                ))  # fmt: skip
        finally:
            await db.dispose()
        final = await eventually(get, lambda j: j.state == pb.JOB_STATE_FAILED, timeout_s=60)
        assert final.error.startswith(
            "the source refused the read of level 'track' (iterator.levels[2]): "
        ), final.error
        assert re.search(r"(?i)\bmilliseconds\b", final.error)
        emitted = await asyncio.wait_for(consumer, timeout=60)
        assert 0 < len(emitted) < total
        assert len(set(emitted)) == len(emitted)
        assert await _health(running) == health_pb2.HealthCheckResponse.SERVING
        again = await get()
        assert (again.state, again.objects_emitted) == (pb.JOB_STATE_FAILED, final.objects_emitted)
        # A new job whose scope check reads the renamed column is refused, saying why.
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await stub.StartIteration(pb.StartIterationRequest(
                level="track", level_scope=pb.LevelScope(level="track", first_key=[1]),
            ))  # fmt: skip
        assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert "iterator.levels[2]" in (err.value.details() or "")


@pytest.mark.engine("sqlite")
async def test_a_locked_sqlite_source_pauses_the_job_until_released(tmp_path: Path) -> None:
    """SQLite's connection-level fault — the database locked by another process past the
    busy timeout — pauses the job (it is not the statement's fault); released, the job
    resumes and emits exactly the database, each object once."""
    url = source_url("sqlite", tmp_path)
    chinook = Chinook("sqlite", url, await _loaded("sqlite", url))
    settings = _settings(chinook, tmp_path, levels("sqlite"), source_probe_s=0.2)
    expected = await truth(chinook, "artist", "track", 1, 275)
    async with running_server(settings) as running:
        stub = iterator_pb2_grpc.IteratorStub(running.channel)
        consumer, get = await _slow_track_job(stub)
        path = url.removeprefix("sqlite+aiosqlite:///")
        holder = sqlite3.connect(path, isolation_level=None)
        try:
            holder.execute("BEGIN EXCLUSIVE")
            paused = await eventually(get, lambda j: j.state == pb.JOB_STATE_PAUSED, timeout_s=60)
            assert "locked" in paused.error
        finally:
            holder.rollback()
            holder.close()
        emitted = await asyncio.wait_for(consumer, timeout=120)
        assert sorted(emitted) == expected
        final = await get()
        assert final.state == pb.JOB_STATE_COMPLETED


def test_the_loader_reads_every_table() -> None:
    """The pinned release parses into Chinook's eleven tables with their documented sizes."""
    from loadtest.corpora.chinook import read_tables

    sizes = {name: len(t.rows) for name, t in read_tables().items()}
    assert sizes == {
        "Album": 347, "Artist": 275, "Customer": 59, "Employee": 8, "Genre": 25,
        "Invoice": 412, "InvoiceLine": 2240, "MediaType": 5, "Playlist": 18,
        "PlaylistTrack": 8715, "Track": 3503,
    }  # fmt: skip
    assert read_tables()["Track"].columns[6] == ("Milliseconds", "INTEGER")
