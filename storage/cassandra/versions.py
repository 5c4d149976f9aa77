"""Schema versions of the Cassandra stores: each store's layout, and the runner.

The keyspace records each store's version in a table of its own, ``loom_schema (store
PRIMARY KEY, version)``, beside the stores' tables. The runner follows
`storage.versions`: read the record (from a keyspace or table that may not exist yet), refuse
a newer version before any DDL, create what the layout lacks, run the pending steps, and
record each step's version right after it. Replicas starting together may run a step at the
same time: steps are idempotent, and the record they write is the same value, so the last
write wins harmlessly. A replica of a release that records no versions (1.0.0) neither
reads nor writes the table; `docs/operations/upgrades.md` says what holds while both serve.

When the settings forbid DDL (``create_schema = false``) the operator owns the schema
(`storage.versions.apply` says what then holds).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Final

from storage.clock import now_ms
from storage.versions import THREADS_V2, Layout, Plan, Step, apply, plan

if TYPE_CHECKING:
    from storage.cassandra.session import CassandraSession

__all__ = ["INBOX", "META_TABLE", "THREADS", "CassandraLayout", "inspect", "table_names", "upgrade"]

CassandraStep = Callable[["CassandraSession"], Awaitable[None]]
CassandraLayout = Layout[CassandraStep]

META_TABLE: Final = "loom_schema"
_META_DDL = (
    "CREATE TABLE IF NOT EXISTS {ks}.loom_schema "
    "(store text PRIMARY KEY, version int, updated_at_ms bigint)"
)


async def _threads_v2(session: CassandraSession) -> None:
    """The ThreadStore's step to 2: its new tables come with the layout. Every mapped thread
    gets its mailbox row (``thread_msgs`` with an empty key, `storage.cassandra.
    threads_unweave`), so an erasure finds the threads 1.0.0 wove; one page at a time,
    idempotent."""
    ks = session.keyspace
    select = await session.prepare(f"SELECT gid, thread_id FROM {ks}.thread_ut")
    insert = await session.prepare(
        f"INSERT INTO {ks}.thread_msgs (gid, thread_id, rfc_key, sent_at) VALUES (?, ?, ?, 0)"
    )
    state: bytes | None = None
    while True:
        rows, state = await session.run_page(select, (), fetch_size=500, paging_state=state)
        await asyncio.gather(*(session.run(insert, [r["gid"], r["thread_id"], b""]) for r in rows))
        if state is None:
            return


THREADS: Final[CassandraLayout] = Layout(
    store="threads", current=2, steps=(Step(to=2, does=THREADS_V2, run=_threads_v2),)
)


async def _tables_only(session: CassandraSession) -> None:
    """A version change whose new tables the schema's DDL already created."""
    del session


INBOX: Final[CassandraLayout] = Layout(
    store="inbox",
    current=3,
    steps=(
        Step(
            to=2,
            does="deleted-thread markers, pending sweeps and operations tables created",
            run=_tables_only,
        ),
        Step(
            to=3,
            does="the change log (inbox_change, inbox_change_feed) created, empty: watching "
            "starts from now",
            run=_tables_only,
        ),
    ),
)


def table_names(ddl: Sequence[str]) -> list[str]:
    """The tables `ddl` (CQL with ``{ks}``) creates."""
    return [m.group(1) for d in ddl if (m := re.search(r"\{ks\}\.(\w+)", d))]


async def _recorded(session: CassandraSession, store: str) -> int | None:
    if not session.tables_present([META_TABLE]):
        return None
    stmt = await session.prepare(
        f"SELECT version FROM {session.keyspace}.{META_TABLE} WHERE store = ?"
    )
    rows = await session.run(stmt, [store])
    return None if not rows or rows[0]["version"] is None else int(rows[0]["version"])


async def inspect(
    session: CassandraSession, tables: Sequence[str], layout: CassandraLayout
) -> Plan[CassandraStep]:
    """What opening the store would do, read-only."""
    return plan(
        layout,
        f"cassandra keyspace {session.keyspace} ({layout.store})",
        recorded=await _recorded(session, layout.store),
        has_data=bool(session.tables_present(table_names(tables))),
    )


async def _record(session: CassandraSession, store: str, version: int) -> None:
    stmt = await session.prepare(
        f"INSERT INTO {session.keyspace}.{META_TABLE} (store, version, updated_at_ms) "
        "VALUES (?, ?, ?)"
    )
    await session.run(stmt, [store, version, now_ms()])


async def upgrade(
    session: CassandraSession, tables: Sequence[str], layout: CassandraLayout
) -> Plan[CassandraStep]:
    """Brings the store whose schema is `tables` (CQL with ``{ks}``) to `layout.current`.

    Raises `storage.versions.StoreTooNew` before any DDL or write.
    """

    async def create() -> None:
        await session.ensure_schema([*tables, _META_DDL])  # no-op unless create_schema

    async def recordable() -> bool:
        return bool(session.tables_present([META_TABLE]))

    async def run_step(step: CassandraStep) -> None:
        await step(session)

    async def record(version: int) -> None:
        await _record(session, layout.store, version)

    found = await inspect(session, tables, layout)
    return await apply(
        found, create=create, recordable=recordable, run_step=run_step, record=record
    )
