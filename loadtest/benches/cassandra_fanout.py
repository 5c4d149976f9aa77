"""Request shapes for writing a fan-out's rows to Cassandra from Python, side by side.

``source .engines/env && python -m loadtest.benches.cassandra_fanout --inboxes 60000 --rounds 3
--node-pid $(pgrep -f CassandraDaemon)``

Each recipient of a delivery needs two rows (its inbox entry and its unread marker). Written
blind (no read) through Loom's ``CassandraSession`` into a fresh keyspace, same rows each:

* ``per-partition``: one single-partition unlogged batch per inbox (its two rows) — what
  "never batch across partitions" means when every inbox is its own partition;
* ``batch-50``: one unlogged batch of 100 statements per 50 inboxes of one replica set (the
  shape Loom used first; Cassandra warns about each such batch);
* ``in-50``: two ``UPDATE … WHERE inbox_id IN ?`` per 50 inboxes of one replica set, into
  an entry table and an unread table (the shape and layout Loom used next);
* ``one-table-in-50``: one ``UPDATE … WHERE inbox_id IN ? AND kind IN (0, 1)`` per 50
  inboxes into one table holding both rows in the inbox's partition, so each inbox is one
  mutation (what ``storage/cassandra/inbox.py`` does now).

Printed per shape: wall time, inboxes/s, CPU of this process per inbox (what the server's
one core would spend) and, given ``--node-pid``, the node's CPU per inbox (from
``/proc/PID/stat``), with the machine's load average — shared machines are noisy: compare
shapes within one run.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import time
import uuid
from collections.abc import Awaitable, Callable

from cassandra.query import BatchStatement, BatchType

from storage.cassandra.session import CassandraSession, gather
from storage.settings import CassandraSettings

__all__ = ["main"]

_GROUP = 50
_TABLES = (
    "CREATE TABLE IF NOT EXISTS {ks}.e (inbox_id text, thread_id text, last_message_id bigint, "
    "is_read boolean, PRIMARY KEY ((inbox_id), thread_id))",
    "CREATE TABLE IF NOT EXISTS {ks}.u (inbox_id text, thread_id text, message_id bigint, "
    "PRIMARY KEY ((inbox_id), thread_id))",
    "CREATE TABLE IF NOT EXISTS {ks}.w (inbox_id text, kind tinyint, thread_id text, "
    "last_message_id bigint, is_read boolean, PRIMARY KEY ((inbox_id), kind, thread_id))",
)


def _node_cpu(pid: int | None) -> float:
    """CPU seconds the node process has used (0 without its pid): /proc/PID/stat utime+stime."""
    if pid is None:
        return 0.0
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


async def _shapes(
    s: CassandraSession, ks: str
) -> dict[str, Callable[[list[str]], Awaitable[None]]]:
    ie = await s.prepare(
        f"INSERT INTO {ks}.e (inbox_id, thread_id, last_message_id, is_read) "
        "VALUES (?, ?, ?, ?) USING TIMESTAMP ?"
    )
    iu = await s.prepare(
        f"INSERT INTO {ks}.u (inbox_id, thread_id, message_id) VALUES (?, ?, ?) USING TIMESTAMP ?"
    )
    ue = await s.prepare(
        f"UPDATE {ks}.e USING TIMESTAMP ? SET last_message_id = ?, is_read = ? "
        "WHERE inbox_id IN ? AND thread_id = ?"
    )
    uu = await s.prepare(
        f"UPDATE {ks}.u USING TIMESTAMP ? SET message_id = ? WHERE inbox_id IN ? AND thread_id = ?"
    )

    uw = await s.prepare(
        f"UPDATE {ks}.w USING TIMESTAMP ? SET last_message_id = ?, is_read = ? "
        "WHERE inbox_id IN ? AND kind IN (0, 1) AND thread_id = ?"
    )

    async def per_partition(group: list[str]) -> None:
        async def one(k: str) -> None:
            b = BatchStatement(batch_type=BatchType.UNLOGGED)
            b.add(ie, (k, "t", 7, False, 7168))
            b.add(iu, (k, "t", 7, 7168))
            await s.run(b)

        await gather(one(k) for k in group)

    async def batch(group: list[str]) -> None:
        b = BatchStatement(batch_type=BatchType.UNLOGGED)
        for k in group:
            b.add(ie, (k, "t", 7, False, 7168))
            b.add(iu, (k, "t", 7, 7168))
        await s.run(b)

    async def in_updates(group: list[str]) -> None:
        await s.run(uu, (7168, 7, group, "t"), routing_key=group[0])
        await s.run(ue, (7168, 7, False, group, "t"), routing_key=group[0])

    async def one_table(group: list[str]) -> None:
        await s.run(uw, (7168, 7, False, group, "t"), routing_key=group[0])

    return {
        "per-partition": per_partition,
        "batch-50": batch,
        "in-50": in_updates,
        "one-table-in-50": one_table,
    }


async def _drain(
    groups: list[list[str]], write: Callable[[list[str]], Awaitable[None]], in_flight: int
) -> None:
    pending = iter(groups)

    async def worker() -> None:
        for g in pending:
            await write(g)

    await asyncio.gather(*(worker() for _ in range(in_flight)))


async def _main(args: argparse.Namespace) -> None:
    ks = f"loom_bench_{uuid.uuid4().hex[:10]}"
    settings = CassandraSettings(
        contact_points=tuple(os.environ["LOOM_TEST_CASSANDRA_CONTACT_POINTS"].split(",")),
        port=int(os.environ["LOOM_TEST_CASSANDRA_PORT"]),
        keyspace=ks,
        create_schema=True,
        request_timeout_s=30.0,
    )
    s = await CassandraSession.open(settings)
    try:
        await s.ensure_schema(_TABLES)
        shapes = await _shapes(s, ks)
        print(
            "| shape | seconds | inboxes/s | client CPU µs/inbox | node CPU µs/inbox | load avg |"
        )
        print("|---|---|---|---|---|---|")
        for _ in range(args.rounds):
            for name, write in shapes.items():
                tag = uuid.uuid4().hex[:6]
                inboxes = [f"{tag}{i:07d}" for i in range(args.inboxes)]
                groups = [
                    g
                    for rg in s.replica_groups(inboxes)
                    for g in (rg[i : i + _GROUP] for i in range(0, len(rg), _GROUP))
                ]
                c0, n0, t0 = _cpu(), _node_cpu(args.node_pid), time.perf_counter()
                await _drain(groups, write, args.groups_in_flight)
                wall = time.perf_counter() - t0
                print(
                    f"| {name} | {wall:.2f} | {args.inboxes / wall:,.0f} "
                    f"| {1e6 * (_cpu() - c0) / args.inboxes:.1f} "
                    f"| {1e6 * (_node_cpu(args.node_pid) - n0) / args.inboxes:.1f} "
                    f"| {os.getloadavg()[0]:.1f} |",
                    flush=True,
                )
    finally:
        await s.execute_ddl(f"DROP KEYSPACE {ks}")
        await s.close()


def main(argv: list[str] | None = None) -> None:
    """Parse options and run every shape `--rounds` times."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--inboxes", type=int, default=60_000)
    parser.add_argument("--groups-in-flight", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument(
        "--node-pid", type=int, default=None, help="the Cassandra node's pid, to report its CPU"
    )
    asyncio.run(_main(parser.parse_args(argv)))


if __name__ == "__main__":
    main()
