"""Every Loom table on Cassandra speculates after at most 50 ms, the tables of an earlier
release too, and a policy that is none stops start-up naming the setting."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from storage import factory
from storage.cassandra import speculation
from storage.cassandra.session import CassandraSession
from storage.errors import StorageMisconfigured
from storage.settings import CassandraSettings
from tests.engines import settings_for

pytestmark = pytest.mark.engine("cassandra")

_OLD = "CREATE TABLE IF NOT EXISTS {ks}.legacy (k text PRIMARY KEY, v text)"


async def _policies(settings: CassandraSettings) -> dict[str, str]:
    """Each table of the keyspace -> its speculative retry, as the cluster says it."""
    session = await CassandraSession.open(replace(settings, create_schema=False))
    try:
        stmt = await session.prepare(
            "SELECT table_name, speculative_retry FROM system_schema.tables WHERE keyspace_name = ?"
        )
        rows = await session.run(stmt, (settings.keyspace,))
    finally:
        await session.close()
    return {r["table_name"]: r["speculative_retry"] for r in rows}


async def _ensure(settings: CassandraSettings, *tables: str) -> None:
    session = await CassandraSession.open(settings)
    try:
        await session.ensure_schema(tables)
    finally:
        await session.close()


async def test_every_store_table_gets_the_capped_policy(tmp_path: Path) -> None:
    settings = settings_for(
        "cassandra", tmp_path, inbox_store="cassandra", threadweaver_store="cassandra"
    )
    for opened in (
        await factory.open_inbox_store(settings),
        await factory.open_thread_store(settings),
    ):
        await opened.close()
    found = await _policies(settings.cassandra)
    assert len(found) >= 5, found
    wanted = speculation.canonical(settings.cassandra.speculative_retry)
    assert wanted == "min(99p,50ms)"
    assert {t: speculation.canonical(p) for t, p in found.items()} == dict.fromkeys(found, wanted)


async def test_a_table_of_an_earlier_release_is_altered_once(tmp_path: Path) -> None:
    c = settings_for("cassandra", tmp_path, inbox_store="cassandra").cassandra
    await _ensure(replace(c, speculative_retry=""), _OLD)  # as an earlier release left it
    assert speculation.canonical((await _policies(c))["legacy"]) == "99p"
    await _ensure(c, _OLD)
    assert speculation.canonical((await _policies(c))["legacy"]) == "min(99p,50ms)"
    await _ensure(replace(c, speculative_retry="20ms"), _OLD)
    assert speculation.canonical((await _policies(c))["legacy"]) == "20ms"


@pytest.mark.parametrize(
    ("policy", "says"),
    [
        ("99p' AND comment = 'x", "is not a speculative retry policy"),
        ("MIN(banana)", "the cluster refused"),
    ],
)
async def test_a_wrong_policy_stops_start_up_naming_the_setting(
    tmp_path: Path, policy: str, says: str
) -> None:
    c = settings_for("cassandra", tmp_path, inbox_store="cassandra").cassandra
    with pytest.raises(StorageMisconfigured, match=says) as refused:
        await _ensure(replace(c, speculative_retry=policy), _OLD)
    assert "cassandra.speculative_retry" in str(refused.value)


def test_spellings_cassandra_answers_with_compare_equal() -> None:
    assert speculation.canonical("MIN(99PERCENTILE, 50ms)") == "min(99p,50ms)"
    assert speculation.canonical("99.0p") == "99p"
    assert speculation.canonical("50.00ms") == "50ms"
    assert speculation.canonical("ALWAYS") != speculation.canonical("NEVER")
    assert speculation.table_of("CREATE TABLE IF NOT EXISTS {ks}.inbox (a int)") == "inbox"
    assert speculation.table_of("CREATE INDEX x ON {ks}.inbox (a)") is None
    plain = "CREATE TABLE IF NOT EXISTS {ks}.t (a int PRIMARY KEY)"
    assert speculation.with_policy(plain, "20ms") == f"{plain} WITH speculative_retry = '20ms'"
    tuned = f"{plain} WITH gc_grace_seconds = 10"
    assert speculation.with_policy(tuned, "20ms").endswith(" AND speculative_retry = '20ms'")
    assert speculation.with_policy(tuned, "") == tuned
    index = "CREATE INDEX x ON {ks}.t (a)"
    assert speculation.with_policy(index, "20ms") == index
