"""The version mechanism's promises, on real engines: a newer store stops start-up and is
not written, a migration killed mid-step resumes where it stopped, steps are idempotent.
"""

from __future__ import annotations

import asyncio
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import aioboto3
import pytest

from storage.bigtable import versions as bigtable_versions
from storage.bigtable.client import admin_client
from storage.bigtable.templates import BigtableTemplateStore
from storage.bigtable.threads import BigtableThreadStore
from storage.cassandra import versions as cassandra_versions
from storage.cassandra.inbox import CassandraInboxStore
from storage.cassandra.session import CassandraSession
from storage.cassandra.threads import TABLES as THREAD_TABLES
from storage.cassandra.threads import CassandraThreadStore
from storage.dynamodb import summaries
from storage.dynamodb.client import DynamoDBClient
from storage.dynamodb.jobs import DynamoDBJobStore
from storage.dynamodb.summaries import DynamoDBSummaryStore
from storage.ports import ChunkRecord, Positions
from storage.settings import BigtableSettings
from storage.sqlite import versions as sqlite_versions
from storage.sqlite.database import SqliteDatabase
from storage.sqlite.inbox import SqliteInboxStore
from storage.sqlite.job_rows import CHUNK_FIELDS, chunk_params, insert_sql
from storage.sqlite.jobs import SqliteJobStore
from storage.sqs import versions as sqs_versions
from storage.sqs.queue import SqsWorkQueue, client_options
from storage.upgrades import SQLITE_FILES
from storage.versions import Layout, Step, StoreTooNew
from tests.engines import settings_for
from tests.serving import free_port, run_loom


def _dump(path: Path) -> list[str]:
    with sqlite3.connect(path) as conn:
        return list(conn.iterdump())


def _files(data: Path) -> list[str]:
    return sorted(p.name for p in data.iterdir())


def _set_version(path: Path, store: str, version: int) -> None:
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE loom_schema SET version = ? WHERE store = ?", (version, store))


async def _newer_inbox(data: Path) -> Path:
    """A data directory holding one inbox file that records version 99."""
    path = data / "inbox.sqlite3"
    store = await SqliteInboxStore.open(path)
    await store.close()
    _set_version(path, "inbox", 99)
    return path


class TestNewerStore:
    """A store written by a later release."""

    async def test_serve_stops_naming_the_store_and_both_versions(self, tmp_path: Path) -> None:
        """Exit 2 (as for any unusable setting), the file and both versions in the message,
        and nothing written: not the file, nor any other store's."""
        path = await _newer_inbox(tmp_path)
        files, dump = _files(tmp_path), _dump(path)
        done = await asyncio.to_thread(
            run_loom, "serve", "--port", "0", "--data-dir", str(tmp_path)
        )
        assert done.returncode == 2, done.stderr
        assert str(path) in done.stderr
        assert "schema version 99" in done.stderr
        assert f"(version {sqlite_versions.INBOX.current})" in done.stderr
        assert _files(tmp_path) == files
        assert _dump(path) == dump

    async def test_check_only_says_the_same(self, tmp_path: Path) -> None:
        """``--check-only`` refuses it the same way (exit 2), and writes nothing."""
        path = await _newer_inbox(tmp_path)
        dump = _dump(path)
        done = await asyncio.to_thread(
            run_loom, "serve", "--check-only", "--data-dir", str(tmp_path)
        )
        assert done.returncode == 2, done.stderr
        assert "schema version 99" in done.stderr
        assert _dump(path) == dump

    @pytest.mark.engine("cassandra")
    async def test_a_newer_cassandra_store_is_refused_before_any_ddl(self, tmp_path: Path) -> None:
        """The keyspace records threads at 99: opening ThreadStore raises, naming the
        keyspace and both versions, and creates none of its tables."""
        settings = settings_for("cassandra", tmp_path, threadweaver_store="cassandra").cassandra
        inbox = await CassandraInboxStore.open(settings)  # the keyspace and its version table
        await inbox.close()
        session = await CassandraSession.open(settings)
        try:
            stmt = await session.prepare(
                f"INSERT INTO {settings.keyspace}.loom_schema (store, version) VALUES (?, ?)"
            )
            await session.run(stmt, ["threads", 99])
            with pytest.raises(StoreTooNew) as refused:
                await CassandraThreadStore.open(settings)
            assert settings.keyspace in str(refused.value)
            assert "schema version 99" in str(refused.value)
            assert f"(version {cassandra_versions.THREADS.current})" in str(refused.value)
            assert session.tables_present(cassandra_versions.table_names(THREAD_TABLES)) == []
        finally:
            await session.close()

    @pytest.mark.engine("dynamodb")
    async def test_a_newer_dynamodb_store_is_refused_before_any_write(self, tmp_path: Path) -> None:
        """Summaries recorded at 99: opening SummaryStore raises naming its table and both
        versions, and does not create the table."""
        settings = settings_for("dynamodb", tmp_path, summary_store="dynamodb").dynamodb
        jobs = await DynamoDBJobStore.open(settings)  # the version table exists
        await jobs.close()
        client = await DynamoDBClient.open(settings)
        try:
            await client.raw.put_item(
                TableName=client.table_name("loom_schema"),
                Item={"store": {"S": "summaries"}, "version": {"N": "99"}},
            )
            with pytest.raises(StoreTooNew) as refused:
                await DynamoDBSummaryStore.open(settings)
            table = client.table_name(summaries.TABLE_SUFFIX)
            assert f"dynamodb table {table}" in str(refused.value)
            assert "schema version 99" in str(refused.value)
            assert "(version 1)" in str(refused.value)
            listed = await client.raw.list_tables()
            assert table not in listed["TableNames"]
        finally:
            await client.close()

    @pytest.mark.engine("bigtable")
    async def test_a_newer_bigtable_store_is_refused_before_any_write(self, tmp_path: Path) -> None:
        """Templates recorded at 99: opening TemplateStore raises naming its tables and both
        versions, and does not create its table."""
        settings = settings_for("bigtable", tmp_path, templates_store="bigtable").bigtable
        threads = await BigtableThreadStore.open(settings)  # the version table exists
        await threads.close()
        await asyncio.to_thread(_bigtable_version, settings, b"templates", b"99")
        with pytest.raises(StoreTooNew) as refused:
            await BigtableTemplateStore.open(settings, email_ttl_s=60.0)
        assert f"bigtable tables {settings.table_prefix}" in str(refused.value)
        assert "schema version 99" in str(refused.value)
        assert f"(version {bigtable_versions.TEMPLATES.current})" in str(refused.value)
        assert not await asyncio.to_thread(_bigtable_exists, settings, "templates")

    @pytest.mark.engine("sqs")
    async def test_a_newer_sqs_queue_is_refused_before_any_write(self, tmp_path: Path) -> None:
        """One queue of the store tagged 99: opening WorkQueue raises naming the queues and
        both versions, and creates none of the others."""
        settings = settings_for("sqs", tmp_path, iterator_queue="sqs").sqs
        first = await SqsWorkQueue.open(settings, ["a"])
        await first.close()
        async with aioboto3.Session().client("sqs", **client_options(settings)) as client:
            url = (await client.get_queue_url(QueueName=f"{settings.queue_prefix}a"))["QueueUrl"]
            await client.tag_queue(QueueUrl=url, Tags={sqs_versions.TAG: "99"})
            with pytest.raises(StoreTooNew) as refused:
                await SqsWorkQueue.open(settings, ["a", "b"])
            assert f"sqs queues {settings.queue_prefix}a" in str(refused.value)
            assert "schema version 99" in str(refused.value)
            assert "(version 1)" in str(refused.value)
            listed = await client.list_queues(QueueNamePrefix=settings.queue_prefix)
            assert listed.get("QueueUrls") == [url]


def _bigtable_version(settings: BigtableSettings, store: bytes, version: bytes) -> None:
    with admin_client(settings) as instance:
        row = instance.table(settings.table_prefix + "loom_schema").direct_row(store)
        row.set_cell("v", b"version", version)
        row.commit()


def _bigtable_exists(settings: BigtableSettings, table: str) -> bool:
    with admin_client(settings) as instance:
        return bool(instance.table(settings.table_prefix + table).exists())


class TestCheckOnly:
    """``loom serve --check-only`` on stores that are not there."""

    async def test_a_fresh_data_directory_is_reported_and_not_created(self, tmp_path: Path) -> None:
        """Every SQLite store 'not created yet', exit 0, and the directory still absent."""
        data = tmp_path / "never"
        done = await asyncio.to_thread(run_loom, "serve", "--check-only", "--data-dir", str(data))
        assert done.returncode == 0, done.stderr
        lines = done.stdout.splitlines()
        assert len(lines) == len(SQLITE_FILES)
        assert all("not created yet; would be created at version" in line for line in lines)
        assert not data.exists()

    async def test_an_unreachable_engine_exits_1(self, tmp_path: Path) -> None:
        """A Cassandra store whose cluster does not answer: exit 1 naming the engine."""
        env = {"LOOM_CASSANDRA__PORT": str(free_port())}
        done = await asyncio.to_thread(
            run_loom,
            "serve",
            "--check-only",
            "--data-dir",
            str(tmp_path),
            "--threadweaver-store",
            "cassandra",
            env=env,
        )
        assert done.returncode == 1, done.stderr
        assert "cannot check the stores: cassandra" in done.stderr


_KILLED_STEP = textwrap.dedent(
    """
    import asyncio, os, signal, sys
    from pathlib import Path
    from storage.sqlite.database import SqliteDatabase
    from tests.upgrade.test_store_versions import SCRIPT, layout

    def die(conn):
        conn.execute("INSERT INTO probe (step) VALUES (3)")
        os.kill(os.getpid(), signal.SIGKILL)  # mid-step, its transaction open

    async def main():
        await SqliteDatabase(Path(sys.argv[1])).migrate(SCRIPT, layout(die))

    asyncio.run(main())
    """
)

SCRIPT = "CREATE TABLE IF NOT EXISTS probe (step INTEGER NOT NULL);"


def layout(third: sqlite_versions.SqliteStep) -> sqlite_versions.SqliteLayout:
    """A three-version store whose steps each leave a row in `probe` (the third is given)."""

    def second(conn: sqlite3.Connection) -> None:
        conn.execute("INSERT INTO probe (step) VALUES (2)")

    return Layout(
        store="probe",
        current=3,
        steps=(Step(to=2, does="second", run=second), Step(to=3, does="third", run=third)),
    )


class TestResume:
    """A migration killed part-way."""

    async def test_a_kill_mid_step_resumes_at_that_step(self, tmp_path: Path) -> None:
        """Killed (SIGKILL) inside step 3: the file is left at version 2 with step 2's work
        once and none of step 3's; the next open runs step 3 only."""
        path = tmp_path / "probe.sqlite3"
        with sqlite3.connect(path) as conn:  # an unversioned store of version 1
            conn.execute(SCRIPT)
        killed = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, "-c", _KILLED_STEP, str(path)],
            check=False,
            capture_output=True,
        )
        assert killed.returncode == -9, killed.stderr
        with sqlite3.connect(path) as conn:
            assert conn.execute("SELECT version FROM loom_schema").fetchall() == [(2,)]
            assert conn.execute("SELECT step FROM probe").fetchall() == [(2,)]

        def third(conn: sqlite3.Connection) -> None:
            conn.execute("INSERT INTO probe (step) VALUES (3)")

        db = SqliteDatabase(path)
        try:
            await db.migrate(SCRIPT, layout(third))
        finally:
            await db.close()
        with sqlite3.connect(path) as conn:
            assert conn.execute("SELECT version FROM loom_schema").fetchall() == [(3,)]
            assert conn.execute("SELECT step FROM probe ORDER BY step").fetchall() == [(2,), (3,)]


class TestJobsStep:
    """SQLite jobs, version 1 to 2: chunk keys leave the state row."""

    async def test_moves_keys_once_however_often_it_runs(self, tmp_path: Path) -> None:
        """Run twice over a 1.0.0-layout chunk: its keys are in iter_chunk_keys, once, and
        the old column is empty; the store leases the chunk with those keys."""
        path = tmp_path / "iterator-state.sqlite3"
        store = await SqliteJobStore.open(path)
        await store.close()
        keys = Positions.of(1, [(7,), (8,)]).tobytes()
        chunk = ChunkRecord(
            chunk_id="r/0",
            width=1,
            keys=keys,
            count=2,
            state="ready",
            lease_until_ms=0,
            sends=0,
            acked_keys=b"",
            version=1,
        )
        step = sqlite_versions.JOBS.steps[0]
        with sqlite3.connect(path) as conn:  # as 1.0.0 wrote it: keys in the state row
            conn.execute(insert_sql("iter_chunk", CHUNK_FIELDS), chunk_params("j", chunk))
            step.run(conn)
            step.run(conn)
            assert conn.execute("SELECT keys FROM iter_chunk_keys").fetchall() == [(keys,)]
            assert conn.execute("SELECT length(keys) FROM iter_chunk").fetchall() == [(0,)]
        store = await SqliteJobStore.open(path)
        try:
            leased = await store.lease_chunks(
                "j", now_ms=1, lease_ms=1000, max_objects=10, max_chunks=10
            )
            assert [c.keys for c in leased] == [keys]
        finally:
            await store.close()
