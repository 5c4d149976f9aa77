"""The Cassandra node's raw write rate for an announcement's rows: no Loom logic at all.

What a fan-out of ``n`` recipients must write is ``n`` inbox rows and ``n`` unread rows. This
baseline writes exactly those rows (same table, same shapes, same write timestamp, a thread
id of its own so it never touches the fan-out's cells) as single-row prepared INSERTs through
the driver's own concurrent loop (``cassandra.concurrent.execute_concurrent_with_args``,
token-aware, ``concurrency`` requests in flight) from the load-test process: the plain loop an
engineer would write first. It reads nothing, batches nothing and keeps no progress, so the
announcement's time as a fraction of this one says what Loom's fan-out costs over the bare
writes on the same node, driver and machine, measured in the same run.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["RawWrites", "drop_keyspace", "raw_insert_rows"]


@dataclass(frozen=True, slots=True)
class RawWrites:
    """How long the plain loop took for ``rows`` rows (two per recipient)."""

    rows: int
    seconds: float

    @property
    def rows_per_s(self) -> float:
        """Rows written per second."""
        return self.rows / self.seconds


def raw_insert_rows(
    contact_points: Sequence[str],
    port: int,
    keyspace: str,
    inboxes: Sequence[str],
    thread_id: str,
    message_id: int,
    *,
    concurrency: int = 128,
) -> RawWrites:
    """Writes an inbox row and an unread row per inbox; blocking (run it in a thread)."""
    from cassandra.cluster import EXEC_PROFILE_DEFAULT, Cluster, ExecutionProfile
    from cassandra.concurrent import execute_concurrent_with_args
    from cassandra.policies import DCAwareRoundRobinPolicy, TokenAwarePolicy

    profile = ExecutionProfile(
        load_balancing_policy=TokenAwarePolicy(DCAwareRoundRobinPolicy()), request_timeout=30.0
    )
    cluster = Cluster(
        list(contact_points), port=port, execution_profiles={EXEC_PROFILE_DEFAULT: profile}
    )
    try:
        session = cluster.connect(keyspace)
        insert = session.prepare(
            "INSERT INTO inbox (inbox_id, kind, thread_id, last_message_id, is_read) "
            "VALUES (?, ?, ?, ?, ?) USING TIMESTAMP ?"
        )
        ts = message_id * 1024  # the delivery timestamp Loom writes (inbox_clock.delivery_ts)
        # kind 1 is the inbox entry, kind 0 the unread marker (storage.cassandra.inbox_rows)
        entries = [(i, 1, thread_id, message_id, False, ts) for i in inboxes]
        unreads = [(i, 0, thread_id, message_id, False, ts) for i in inboxes]
        t0 = time.perf_counter()
        for stmt, params in ((insert, entries), (insert, unreads)):
            execute_concurrent_with_args(
                session, stmt, params, concurrency=concurrency, raise_on_first_error=True
            )
        return RawWrites(rows=2 * len(inboxes), seconds=time.perf_counter() - t0)
    finally:
        cluster.shutdown()


def drop_keyspace(contact_points: Sequence[str], port: int, keyspace: str) -> None:
    """Drops a run's keyspace: a shared node's 1 GB heap carries every table ever created
    (memtables, metadata), so a load test removes what it made."""
    from cassandra.cluster import Cluster

    cluster = Cluster(list(contact_points), port=port)
    try:
        cluster.connect().execute(f"DROP KEYSPACE IF EXISTS {keyspace}", timeout=120.0)
    finally:
        cluster.shutdown()
