"""The engine tables: one per port, the one place that says which engines serve it."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from server.config import Settings
from storage.engines import (
    INBOX_STORES,
    ITERATION_SOURCES,
    PORTS,
    SUMMARY_STORES,
    THREAD_STORES,
    UnsupportedEngine,
    engine_names,
)
from storage.settings import StorageSettings

ROOT = Path(__file__).resolve().parents[3]


class TestTables:
    def test_every_port_has_its_table(self) -> None:
        """Seven ports, each with the embedded engine first."""
        assert [port.port for port in PORTS] == [
            "ThreadStore",
            "SummaryStore",
            "InboxStore",
            "TemplateStore",
            "IterationSource",
            "WorkQueue",
            "JobStore",
        ]
        assert {"sqlite"} == {port.names[0] for port in PORTS}

    def test_each_port_is_chosen_by_a_real_setting(self) -> None:
        """A port's setting is a field of its settings section."""
        settings = Settings()
        for port in PORTS:
            section = getattr(settings, port.section)
            assert port.field in {f.name for f in dataclasses.fields(section)}, port.setting

    def test_the_storage_defaults_are_each_ports_embedded_engine(self) -> None:
        """`StorageSettings()` chooses the first engine of every port it has a field for."""
        storage = StorageSettings()
        for port in PORTS:
            if port.section == "storage":
                assert port.names[0] == port.chosen(storage).name

    def test_engine_names_lists_each_engine_once(self) -> None:
        """What a full test run covers: every engine of every port, once."""
        names = engine_names()
        assert sorted(set(names)) == sorted(names)
        assert {n for port in PORTS for n in port.names} == set(names)


class TestUnsupportedEngine:
    def test_names_the_setting_and_the_engines_it_accepts(self) -> None:
        """``storage.summary_store = 'sqs'`` says which setting and what it accepts."""
        with pytest.raises(UnsupportedEngine) as caught:
            SUMMARY_STORES.chosen(StorageSettings(summary_store="sqs"))
        expected = (
            "storage.summary_store = 'sqs' is not supported: SummaryStore runs on sqlite or "
            "dynamodb"
        )
        assert expected == str(caught.value)

    def test_lists_three_engines_in_order(self) -> None:
        """A port with three engines names all three, the embedded one first."""
        with pytest.raises(UnsupportedEngine, match=r"runs on sqlite, bigtable or cassandra$"):
            THREAD_STORES.engine("dynamodb")

    def test_is_a_value_error(self) -> None:
        """`loom serve` reports a ValueError from loading as bad settings (exit 2)."""
        assert issubclass(UnsupportedEngine, ValueError)


class TestSourceUrls:
    @pytest.mark.parametrize(
        ("url", "engine"),
        [
            ("sqlite+aiosqlite:///tmp/x.sqlite3", "sqlite"),
            ("postgresql+asyncpg://u:p@h/db", "postgres"),
            ("mysql+aiomysql://u:p@h/db", "mariadb"),
            ("mariadb+aiomysql://u:p@h/db", "mariadb"),
            ("", "sqlite"),
        ],
        ids=["sqlite", "postgres", "mysql", "mariadb", "embedded"],
    )
    def test_the_scheme_picks_the_engine(self, url: str, engine: str) -> None:
        """The source's engine is its URL's scheme; no URL is the embedded source."""
        assert engine == ITERATION_SOURCES.select(url).name

    def test_an_unknown_scheme_is_refused_without_quoting_the_url(self) -> None:
        """The message names the setting and the scheme, never the password."""
        with pytest.raises(UnsupportedEngine) as caught:
            ITERATION_SOURCES.select("oracle://scott:tiger@db/orcl")
        message = str(caught.value)
        assert message.startswith("iterator.source_url: scheme 'oracle' is not supported")
        assert "tiger" not in message
        assert "postgres (postgresql+asyncpg://)" in message


class TestEngineDefaults:
    def test_inbox_engines_set_the_fan_out_pacing(self) -> None:
        """The Inbox fan-out's pacing is the InboxStore engine's: paced on the embedded
        engine's single writer, unpaced with requests in flight on a distributed one; and so
        is the change-log tail's poll (Cassandra's changes settle for 1 s anyway)."""
        assert {e.name: e.defaults for e in INBOX_STORES.engines} == {
            "sqlite": {
                "inbox": {
                    "fanout_rate_per_s": 50_000.0,
                    "fanout_chunks_in_flight": 1,
                    "watch_poll_s": 0.05,
                }
            },
            "cassandra": {
                "inbox": {
                    "fanout_rate_per_s": 0.0,
                    "fanout_chunks_in_flight": 4,
                    "watch_poll_s": 0.2,
                }
            },
        }


def test_the_embedded_engine_needs_no_distributed_driver(tmp_path: Path) -> None:
    """Loading settings and opening the embedded stores imports no distributed engine's
    driver or adapter: the openers import them only when chosen."""
    script = textwrap.dedent(
        f"""
        import asyncio, sys
        from server.config import load_settings
        from storage import factory

        async def main() -> None:
            data = {{"sqlite": {{"data_dir": {str(tmp_path)!r}}}}}
            settings = load_settings(env={{}}, overrides=data)
            for store in (
                await factory.open_thread_store(settings),
                await factory.open_summary_store(settings),
                await factory.open_inbox_store(settings),
                await factory.open_job_store(settings),
                await factory.open_work_queue(settings, ["a"]),
                await factory.open_template_store(settings, email_ttl_s=60.0),
            ):
                await store.close()

        asyncio.run(main())
        roots = ("cassandra", "aioboto3", "botocore", "google.cloud", "asyncpg", "aiomysql")
        adapters = ("storage.cassandra", "storage.bigtable", "storage.dynamodb", "storage.sqs")
        print(sorted(m for m in sys.modules if m.startswith(roots + adapters)))
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]"
