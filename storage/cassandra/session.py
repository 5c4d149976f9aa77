"""One Cassandra connection that every Cassandra-backed store of a process shares.

Why a class of its own: the ThreadStore and (later) the InboxStore talk to the same cluster,
and a driver `Cluster` is expensive (control connection, pools, an I/O thread). Stores take a
`CassandraSession` and only close it when they opened it themselves.

The driver is thread-based: `execute_async` returns a `ResponseFuture` completed on the
driver's I/O thread. `CassandraSession.run` bridges it to an asyncio future with
`add_callbacks` + `loop.call_soon_threadsafe`, so the event loop never blocks, and follows
result pages on the loop without blocking either. Driver exceptions become
`storage.errors` here, exactly once (`errors`).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Iterable, Sequence
from typing import Any, TypeVar

from cassandra import (
    CoordinationFailure,
    OperationTimedOut,
    ProtocolVersion,
    Timeout,
    Unavailable,
)
from cassandra.cluster import (
    EXEC_PROFILE_DEFAULT,
    Cluster,
    NoHostAvailable,
    Session,
)
from cassandra.connection import ConnectionException
from cassandra.protocol import (
    IsBootstrappingErrorMessage,
    OverloadedErrorMessage,
    ReadTimeoutErrorMessage,
    UnavailableErrorMessage,
    WriteTimeoutErrorMessage,
)
from cassandra.query import BatchStatement, BoundStatement, PreparedStatement

from storage.cassandra import speculation
from storage.cassandra.cluster import (
    CONDITIONAL,
    READ,
    READS,
    SCHEMA_AGREEMENT_S,
    build_cluster,
    check_datacentres,
    idempotent,
    live_hosts,
    other_coordinator,
    refused_setting,
    replication_clause,
    tls_context,
)
from storage.errors import (
    DriverErrors,
    StorageError,
    StorageMisconfigured,
    StorageUnavailable,
)
from storage.settings import CassandraSettings

__all__ = ["MAX_IN_FLIGHT", "CassandraSession", "Row", "errors", "gather"]

Row = dict[str, Any]

MAX_IN_FLIGHT = 128
"""Concurrent statements per session: enough to hide a round trip, few enough for one node."""

# Faults where the cluster is unreachable, overloaded or too slow: the caller may retry later
# (every Loom write is idempotent or an LWT whose retry learns the winner).
_UNAVAILABLE: tuple[type[BaseException], ...] = (
    NoHostAvailable,
    OperationTimedOut,
    Unavailable,
    Timeout,  # ReadTimeout, WriteTimeout (incl. an LWT's CAS timeout: outcome unknown)
    CoordinationFailure,  # ReadFailure, WriteFailure
    ConnectionException,
    UnavailableErrorMessage,
    ReadTimeoutErrorMessage,
    WriteTimeoutErrorMessage,
    OverloadedErrorMessage,
    IsBootstrappingErrorMessage,
)


def _kind(exc: BaseException) -> type[StorageError]:
    return StorageUnavailable if isinstance(exc, _UNAVAILABLE) else StorageError


errors = DriverErrors("cassandra", (Exception,), classify=_kind)
"""The one translation of the driver's exceptions (any of them: the driver raises plain
`Exception` subclasses from its I/O thread too)."""


class _PageCollector:
    """Collects every page of one `ResponseFuture` into an asyncio future.

    The driver keeps registered callbacks across `start_fetching_next_page`, so one
    collector sees each page arrive; the next page is requested from the loop thread.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, rf: Any, all_pages: bool) -> None:
        self._loop = loop
        self._rf = rf
        self._all_pages = all_pages
        self._rows: list[Row] = []
        self.future: asyncio.Future[list[Row]] = loop.create_future()
        rf.add_callbacks(self._on_rows, self._on_error)

    def _on_rows(self, rows: Sequence[Row] | None) -> None:  # driver I/O thread
        self._loop.call_soon_threadsafe(self._page, list(rows or ()))

    def _on_error(self, exc: BaseException) -> None:  # driver I/O thread
        self._loop.call_soon_threadsafe(self._fail, exc)

    def _page(self, rows: list[Row]) -> None:
        if self.future.done():
            return
        self._rows.extend(rows)
        if self._all_pages and self._rf.has_more_pages:
            try:
                self._rf.start_fetching_next_page()
            except Exception as exc:  # any driver fault ends this request
                self._fail(exc)
            return
        self.future.set_result(self._rows)

    def _fail(self, exc: BaseException) -> None:
        if not self.future.done():
            self.future.set_exception(errors.error(exc, "query"))


class _Routed(BoundStatement):  # type: ignore[misc]
    """A bound statement with an explicit routing key.

    The driver computes no routing key for ``WHERE key IN ?`` (the prepared metadata names no
    partition-key index), so token-aware routing would fall back to any node; callers that
    know every key of the list shares one replica set pass one of them instead.
    """

    def __init__(self, stmt: PreparedStatement, params: Sequence[Any], key: bytes) -> None:
        super().__init__(stmt)
        self.bind(params)
        self._explicit_routing_key = key

    @property
    def routing_key(self) -> bytes:
        return self._explicit_routing_key


_CONNECT_ATTEMPTS = 3
"""Connections tried per protocol version when the driver reports a CRC mismatch at connect."""


class CassandraSession:
    """A connected driver session plus a prepared-statement cache, shared by stores."""

    def __init__(self, cluster: Cluster, session: Session, settings: CassandraSettings) -> None:
        self._cluster = cluster
        self._session = session
        self.settings = settings
        self.keyspace = settings.keyspace
        self._prepared: dict[str, PreparedStatement] = {}
        self._preparing: dict[str, asyncio.Lock] = {}
        self._conditional: set[bytes] = set()
        self._reads: set[bytes] = set()
        self._in_flight = asyncio.Semaphore(MAX_IN_FLIGHT)

    @classmethod
    async def open(cls, settings: CassandraSettings) -> CassandraSession:
        """Connects (protocol v5, falling back to v4 for older clusters) without blocking.

        Raises `StorageMisconfigured`, naming the setting, when the cluster refuses the
        login or the certificates, or lacks the data centre `local_dc` or `replication`
        names: no retry can fix those, so the server must not start.
        """
        tls = tls_context(settings)
        last: BaseException | None = None
        for version in (ProtocolVersion.V5, ProtocolVersion.V4):
            for attempt in range(1, _CONNECT_ATTEMPTS + 1):
                cluster = build_cluster(settings, version, tls)
                try:
                    session = await asyncio.to_thread(cluster.connect)
                except Exception as exc:  # translated below
                    last = exc
                    try:
                        refused_setting(settings, exc)
                        # Reached the cluster, yet no node to use: a local_dc it lacks?
                        check_datacentres(settings, cluster)
                    finally:
                        await asyncio.to_thread(cluster.shutdown)
                    # The driver's v5 framing can lose a race with the handshake on a loaded
                    # machine ("CRC mismatch on header"): a new connection is the cure.
                    if "crc mismatch" in str(exc).lower() and attempt < _CONNECT_ATTEMPTS:
                        continue
                    if "protocol" in str(exc).lower():
                        break
                    raise errors.error(exc, "connect") from exc
                try:
                    check_datacentres(settings, cluster)
                except StorageMisconfigured:
                    await asyncio.to_thread(cluster.shutdown)
                    raise
                return cls(cluster, session, settings)
        assert last is not None
        raise errors.error(last, "connect") from last

    async def prepare(self, cql: str) -> PreparedStatement:
        """The prepared statement for `cql`, prepared once per session (in a thread)."""
        stmt = self._prepared.get(cql)
        if stmt is not None:
            return stmt
        lock = self._preparing.setdefault(cql, asyncio.Lock())
        async with lock:
            stmt = self._prepared.get(cql)
            if stmt is None:
                with errors("prepare"):
                    stmt = await asyncio.to_thread(self._session.prepare, cql)
                assert stmt is not None
                # Speculation and the driver's retries are for statements that may run twice.
                stmt.is_idempotent = idempotent(cql)
                if CONDITIONAL.search(cql):
                    self._conditional.add(stmt.query_id)
                if READ.match(cql):
                    self._reads.add(stmt.query_id)
                self._prepared[cql] = stmt
        return stmt

    async def run(
        self,
        stmt: Any,
        params: Sequence[Any] = (),
        *,
        all_pages: bool = False,
        routing_key: str | None = None,
    ) -> list[Row]:
        """Executes `stmt` on the driver's I/O thread; the rows of every page when asked.

        At most `MAX_IN_FLIGHT` statements of this session run at once, whichever store or
        call issued them: a 1,000-item batch fans out without flooding the cluster, and
        many concurrent batches queue here instead of timing out inside the driver.
        `routing_key` (a text partition key) routes a statement the driver cannot route
        itself — one whose partition key is an ``IN ?`` list — to a replica of that key.
        """
        if routing_key is not None and isinstance(stmt, PreparedStatement):
            bound: Any = _Routed(stmt, params, routing_key.encode("utf-8"))
        else:
            bound = stmt.bind(params) if isinstance(stmt, PreparedStatement) else stmt
        if isinstance(stmt, BatchStatement):
            # Loom batches plain upserts only; one holding a conditional write is not one.
            stmt.is_idempotent = not any(
                inner[1] in self._conditional for inner in stmt._statements_and_parameters
            )
        query_id = stmt.query_id if isinstance(stmt, PreparedStatement) else None
        if query_id in self._conditional:
            return await self._conditional_write(bound, all_pages)
        profile = READS if query_id in self._reads else EXEC_PROFILE_DEFAULT
        try:
            return await self._execute(bound, profile, all_pages)
        except StorageUnavailable as exc:
            # A connection that died under it (the driver's heartbeat gave up on a frozen
            # node) while its speculative executions had used the rest of the query plan:
            # no node answered "no", so an idempotent statement goes once more, through the
            # nodes the driver still thinks up.
            lost = isinstance(exc.__cause__, (NoHostAvailable, ConnectionException))
            if not (lost and getattr(bound, "is_idempotent", False)):
                raise
            return await self._execute(bound, profile, all_pages)

    async def run_page(
        self,
        stmt: PreparedStatement,
        params: Sequence[Any],
        *,
        fetch_size: int,
        paging_state: bytes | None = None,
    ) -> tuple[list[Row], bytes | None]:
        """One page of at most `fetch_size` rows of a read, resumed at `paging_state`.

        Returns the rows and the paging state of the next page (None after the last one), so
        a caller can walk a whole table holding one page at a time: each page is a request
        of its own, to any coordinator (Cassandra's paging state is not tied to the node that
        issued it). A page may hold no rows while more follow (a filtered scan).
        """
        bound = stmt.bind(params)
        bound.fetch_size = fetch_size
        profile = READS if stmt.query_id in self._reads else EXEC_PROFILE_DEFAULT
        try:
            return await self._fetch_page(bound, profile, paging_state)
        except StorageUnavailable as exc:
            # As in `run`: a connection lost under an idempotent read goes once more.
            lost = isinstance(exc.__cause__, (NoHostAvailable, ConnectionException))
            if not (lost and stmt.is_idempotent):
                raise
            return await self._fetch_page(bound, profile, paging_state)

    async def _fetch_page(
        self, bound: Any, profile: str, paging_state: bytes | None
    ) -> tuple[list[Row], bytes | None]:
        loop = asyncio.get_running_loop()
        async with self._in_flight:
            with errors("query"):
                rf = self._session.execute_async(
                    bound, execution_profile=profile, paging_state=paging_state
                )
            rows = await _PageCollector(loop, rf, all_pages=False).future
        # What the driver's own ResultSet.paging_state reads; the future has no public name.
        state = rf._paging_state
        return rows, bytes(state) if state else None

    async def _conditional_write(self, bound: Any, all_pages: bool) -> list[Row]:
        """A conditional write: never speculated (two Paxos rounds of one statement would
        contend with each other), but a coordinator that stays silent for half the request
        timeout (`conditional_redirect_s` when the data centre has another live node) —
        frozen, not dead, so the driver still thinks it up — is given up, and the statement
        sent once more through another. Sending it again is safe: of two rounds
        one applies, and the other reads back what was applied (the stores read `[applied]`
        and the current value, never assume their own write won)."""
        half = self.settings.request_timeout_s / 2
        # Giving up early only helps when there is another coordinator to ask.
        live = live_hosts(self._cluster.metadata, self.settings.local_dc)
        first = min(self.settings.conditional_redirect_s, half) if live > 1 else half
        try:
            return await self._execute(
                bound, EXEC_PROFILE_DEFAULT, all_pages, driver_timeout_s=first
            )
        except StorageUnavailable as exc:
            silent = exc.__cause__
            if not isinstance(silent, OperationTimedOut):
                raise
            other = other_coordinator(
                self._cluster.metadata,
                self.settings.local_dc,
                self.keyspace,
                bound,
                getattr(silent, "last_host", None),
            )
            return await self._execute(
                bound, EXEC_PROFILE_DEFAULT, all_pages, driver_timeout_s=half, host=other
            )

    async def _execute(
        self,
        bound: Any,
        profile: str,
        all_pages: bool,
        *,
        driver_timeout_s: float | None = None,
        host: Any = None,
    ) -> list[Row]:
        options: dict[str, Any] = {"execution_profile": profile}
        if driver_timeout_s is not None:
            options["timeout"] = driver_timeout_s
        if host is not None:
            options["host"] = host
        loop = asyncio.get_running_loop()
        async with self._in_flight:
            with errors("query"):  # e.g. no connection at all
                rf = self._session.execute_async(bound, **options)
            return await _PageCollector(loop, rf, all_pages).future

    async def execute_ddl(self, cql: str) -> None:
        """Runs one schema change and waits until every node agrees on the new schema
        (bounded by `SCHEMA_AGREEMENT_S`, not by a statement's `request_timeout_s`)."""
        bound = SCHEMA_AGREEMENT_S + self.settings.request_timeout_s
        with errors("schema change"):
            rs = await asyncio.to_thread(self._session.execute, cql, timeout=bound)
        # The driver's own wait inside the statement, up to `SCHEMA_AGREEMENT_S`: False only
        # once that ran out (waiting again would double the bound the message states).
        if not rs.response_future.is_schema_agreed:
            raise StorageUnavailable(
                f"cassandra: the nodes did not agree on the schema within "
                f"{SCHEMA_AGREEMENT_S:.0f} s after {cql[:60]!r} (nodetool describecluster "
                "names the nodes whose schema version differs)"
            )

    async def ensure_schema(self, tables: Sequence[str]) -> None:
        """Creates the keyspace and `tables` (CQL with a ``{ks}`` placeholder) when asked.

        Every Cassandra store calls this from `on_session`; it does nothing unless the
        settings say ``create_schema``. The keyspace name is validated because CQL cannot
        bind identifiers.
        """
        settings = self.settings
        if not re.fullmatch(r"[A-Za-z][A-Za-z0-9_]{0,47}", settings.keyspace):
            raise ValueError(f"invalid Cassandra keyspace name {settings.keyspace!r}")
        if not settings.create_schema:
            return
        policy = speculation.checked(settings.speculative_retry)
        await self.execute_ddl(
            f"CREATE KEYSPACE IF NOT EXISTS {settings.keyspace} WITH replication = "
            f"{replication_clause(settings)}"
        )
        for ddl in tables:
            with speculation.refusals(policy):
                made = speculation.with_policy(ddl, policy).replace("{ks}", settings.keyspace)
                await self.execute_ddl(made)
        keyspace = self._cluster.metadata.keyspaces.get(self.keyspace)
        await speculation.apply(policy, keyspace, tables, self.execute_ddl)

    def tables_present(self, names: Sequence[str]) -> list[str]:
        """Which of `names` exist as tables of this keyspace (from the driver's schema metadata,
        which it keeps current across DDL): how a store finds tables of an earlier layout."""
        meta = self._cluster.metadata.keyspaces.get(self.keyspace)
        if meta is None:
            return []
        return [n for n in names if n in meta.tables]

    def replica_groups(self, keys: Sequence[str]) -> list[list[str]]:
        """`keys` (single text partition keys of this keyspace) grouped by replica set.

        A batch or an IN query over one group is served by a coordinator that owns every
        key in it (token-aware routing picks it), so fan-out writes cost one request per
        group slice instead of one per key, with no extra hop between nodes.
        """
        metadata = self._cluster.metadata
        groups: dict[tuple[str, ...], list[str]] = {}
        for key in keys:
            hosts = metadata.get_replicas(self.keyspace, key.encode("utf-8"))
            groups.setdefault(tuple(sorted(str(h.endpoint) for h in hosts)), []).append(key)
        return list(groups.values())

    async def close(self) -> None:
        """Shuts the cluster down in a thread (it joins the driver's threads)."""
        await asyncio.to_thread(self._cluster.shutdown)


T = TypeVar("T")


async def gather(aws: Iterable[Awaitable[T]]) -> list[T]:
    """Runs every awaitable concurrently (the session bounds how many reach the cluster).

    On a failure the siblings are cancelled, so a dead cluster fails a batch once, fast.
    """
    tasks = [asyncio.ensure_future(a) for a in aws]
    try:
        return list(await asyncio.gather(*tasks))
    except BaseException:
        for t in tasks:
            t.cancel()
        raise
