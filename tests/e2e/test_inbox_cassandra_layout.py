"""A keyspace holding Loom's earlier Cassandra inbox tables is refused, never served empty.

Inboxes once lived in two tables (``inbox_entries``, ``inbox_unread``); they now share one
(``inbox``, one partition per inbox). A server pointed at a keyspace of the old layout
would answer every inbox empty and every unread count 0, so it must stop at start-up,
naming the tables and the setting, as an operator would want.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from storage import factory
from storage.cassandra.session import CassandraSession
from tests.engines import settings_for
from tests.serving import run_loom

pytestmark = pytest.mark.engine("cassandra")


async def _old_layout(tmp_path: Path) -> tuple[str, str, int]:
    """A fresh keyspace with an ``inbox_entries`` table as an earlier Loom created it."""
    settings = settings_for("cassandra", tmp_path, inbox_store="cassandra")
    session = await CassandraSession.open(settings.cassandra)
    try:
        await session.ensure_schema(
            (
                "CREATE TABLE IF NOT EXISTS {ks}.inbox_entries (inbox_id text, thread_id text, "
                "last_message_id bigint, is_read boolean, PRIMARY KEY ((inbox_id), thread_id))",
            )
        )
    finally:
        await session.close()
    c = settings.cassandra
    return c.keyspace, ",".join(c.contact_points), c.port


async def test_the_store_refuses_a_keyspace_of_the_earlier_layout(tmp_path: Path) -> None:
    """Opening the store on a keyspace with the earlier two inbox tables fails naming them and the
    setting."""
    settings = settings_for("cassandra", tmp_path, inbox_store="cassandra")
    fresh = await factory.open_inbox_store(settings)  # a new keyspace opens
    await fresh.close()

    keyspace, _, _ = await _old_layout(tmp_path)
    old = replace(settings, cassandra=replace(settings.cassandra, keyspace=keyspace))
    with pytest.raises(ValueError, match="inbox_entries") as refused:
        await factory.open_inbox_store(old)
    assert "cassandra.keyspace" in str(refused.value)


async def test_loom_serve_stops_naming_the_tables(tmp_path: Path) -> None:
    """`loom serve` on such a keyspace exits 2 with a message naming the keyspace and its tables."""
    keyspace, contact, port = await _old_layout(tmp_path)
    env = {
        "LOOM_STORAGE__INBOX_STORE": "cassandra",
        "LOOM_CASSANDRA__KEYSPACE": keyspace,
        "LOOM_CASSANDRA__CONTACT_POINTS": contact,
        "LOOM_CASSANDRA__PORT": str(port),
        "LOOM_CASSANDRA__CREATE_SCHEMA": "true",
    }
    done = run_loom("serve", "--port", "0", "--data-dir", str(tmp_path / "d"), env=env)
    assert done.returncode == 2, done.stderr
    assert "loom: cannot start:" in done.stderr
    assert f"keyspace {keyspace} holds inbox tables of an earlier Loom (inbox_entries)" in (
        done.stderr
    )
    assert '"event": "serving"' not in done.stderr
