"""Bigtable plumbing shared by every Bigtable-backed store (ThreadStore, TemplateStore, ...).

Why one module: clients, table creation and error translation are the same for every store,
and `storage.ports` promises that driver exceptions are translated exactly once, here
(`errors`, the engine's one `DriverErrors`).

- Data path: `BigtableDataClientAsync` (native asyncio, supports check-and-mutate and
  read-modify-write). It finds the emulator through BIGTABLE_EMULATOR_HOST by itself.
- Admin path: the sync `google.cloud.bigtable.Client(admin=True)`, run in a worker thread at
  start-up only, so the event loop never blocks on it.
- Emulator quirk: GC rules are enforced only after a ModifyColumnFamilies call, so
  `ensure_tables` always re-applies each family's rule once (start-up only, when asked to
  create tables).
- Emulator quirk: its channel has a 4 MiB receive limit; `read_row_cells` pages through a
  row's cells by qualifier so no single response approaches it.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import warnings
from collections.abc import (
    AsyncIterator,
    Awaitable,
    Callable,
    Iterable,
    Iterator,
    Mapping,
    Sequence,
)
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from google.api_core import exceptions as gexc
from google.cloud import bigtable
from google.cloud.bigtable import column_family as cf
from google.cloud.bigtable.data import BigtableDataClientAsync, RowMutationEntry, SetCell
from google.cloud.bigtable.data import exceptions as bt_exc
from google.cloud.bigtable.data import row_filters as rf

from storage.errors import DriverErrors, StorageError, StorageUnavailable
from storage.settings import BigtableSettings
from storage.slices import slices

__all__ = [
    "BigtableHandle",
    "admin_client",
    "bounded_gather",
    "bulk_set_cells",
    "ensure_tables",
    "errors",
    "escape_family",
    "family_has_cells",
    "gc_rule",
    "read_row_cells",
    "regex_literal",
]

_TRANSIENT: tuple[type[Exception], ...] = (
    gexc.ServiceUnavailable,
    gexc.DeadlineExceeded,
    gexc.ResourceExhausted,
    gexc.Aborted,
    gexc.InternalServerError,
    gexc.Unknown,
    gexc.RetryError,
    gexc.Cancelled,
    TimeoutError,
    ConnectionError,
)

_RESPONSE_BUDGET = 3_000_000
"""Bytes one page of a row may carry: well under the emulator's 4 MiB receive limit."""
_CONCURRENCY = 64
"""Per-key operations in flight per call: enough to hide latency, bounded to spare the engine."""
_MUTATIONS = 10_000
"""Mutations per MutateRows request (the API allows 100,000)."""

T = TypeVar("T")
R = TypeVar("R")
_Untyped = Any  # google-cloud-bigtable's admin layer ships no annotations
_AdminClient: _Untyped = bigtable.Client
_MaxVersions: _Untyped = cf.MaxVersionsGCRule
_MaxAge: _Untyped = cf.MaxAgeGCRule
_Union: _Untyped = cf.GCRuleUnion


def gc_rule(*, max_versions: int | None = None, max_age_s: float | None = None) -> Any:
    """A column family GC rule; both limits given means a cell goes when either is hit."""
    rules = []
    if max_versions is not None:
        rules.append(_MaxVersions(max_versions))
    if max_age_s is not None:
        rules.append(_MaxAge(timedelta(seconds=max_age_s)))
    if not rules:
        raise ValueError("a GC rule needs max_versions or max_age_s")
    return rules[0] if len(rules) == 1 else _Union(rules=rules)


async def bounded_gather(fn: Callable[[T], Awaitable[R]], items: Sequence[T]) -> list[R]:
    """`fn` over `items` concurrently, at most `_CONCURRENCY` at once, results in order."""
    gate = asyncio.Semaphore(_CONCURRENCY)

    async def one(item: T) -> R:
        async with gate:
            return await fn(item)

    return await asyncio.gather(*(one(item) for item in items))


async def bulk_set_cells(
    table: Any, cells: Iterable[tuple[bytes, str, bytes, bytes]], *, timestamp_micros: int
) -> None:
    """Writes (row, family, qualifier, value) cells with MutateRows, batched and concurrent.

    With a fixed timestamp a repeated write overwrites the same cell version, which makes
    these writes idempotent (safe to retry, safe to repeat on every call).
    """
    by_row: dict[bytes, dict[tuple[str, bytes], bytes]] = {}
    for row_key, family, qualifier, value in cells:
        by_row.setdefault(row_key, {})[(family, qualifier)] = value
    batches: list[list[RowMutationEntry]] = [[]]
    size = 0
    for row_key, row_cells in by_row.items():
        mutations = [
            SetCell(f, q, v, timestamp_micros=timestamp_micros) for (f, q), v in row_cells.items()
        ]
        for part in slices(mutations, _MUTATIONS):
            if size + len(part) > _MUTATIONS and batches[-1]:
                batches.append([])
                size = 0
            batches[-1].append(RowMutationEntry(row_key, list(part)))
            size += len(part)

    async def send(batch: list[RowMutationEntry]) -> None:
        with errors("bulk write"):
            await table.bulk_mutate_rows(batch)

    await bounded_gather(send, [batch for batch in batches if batch])


def _is_transient(exc: BaseException) -> bool:
    if isinstance(exc, BaseExceptionGroup):
        return any(_is_transient(e) for e in exc.exceptions)
    if isinstance(exc, bt_exc.FailedMutationEntryError) and exc.__cause__ is not None:
        return _is_transient(exc.__cause__)
    return isinstance(exc, _TRANSIENT)


def _kind(exc: BaseException) -> type[StorageError]:
    return StorageUnavailable if _is_transient(exc) else StorageError


errors = DriverErrors(
    "bigtable",
    (
        gexc.GoogleAPIError,
        bt_exc.MutationsExceptionGroup,
        bt_exc.RetryExceptionGroup,
        bt_exc.ShardedReadRowsExceptionGroup,
        TimeoutError,
        ConnectionError,
    ),
    classify=_kind,
)
"""The one translation of the google/grpc exceptions: ``with errors("read rows"): ...``;
transient ones (unavailable, deadline, exhausted, ...) become StorageUnavailable."""


@contextlib.contextmanager
def _quiet_emulator_notice() -> Iterator[None]:
    """The clients warn (RuntimeWarning) on every emulator connection: expected, not news."""
    with warnings.catch_warnings():
        warnings.filterwarnings(
            "ignore", message="Connecting to Bigtable emulator", category=RuntimeWarning
        )
        yield


def escape_family(name: str) -> str:
    """Family filters are RE2 regexes matched against the whole name: quote it."""
    return re.escape(name)


def regex_literal(data: bytes) -> bytes:
    """RE2 pattern matching exactly `data`: ASCII punctuation and controls as \\xHH.

    Non-ASCII bytes are kept literal so the pattern works whether the server matches in
    UTF-8 or Latin-1 mode (a literal byte sequence matches itself in both).
    """
    out = bytearray()
    for byte in data:
        char = bytes((byte,))
        if byte >= 0x80 or char.isalnum():
            out += char
        else:
            out += b"\\x%02x" % byte
    return bytes(out)


def family_has_cells(family: str) -> rf.RowFilter:
    """Predicate of insert-if-absent (the seed's): any cell with a non-empty qualifier."""
    return rf.RowFilterChain(
        [rf.FamilyNameRegexFilter(escape_family(family)), rf.ColumnQualifierRegexFilter(b"(?s).+")]
    )


class BigtableHandle:
    """One async data client and the tables opened on it; `close` releases both."""

    def __init__(self, settings: BigtableSettings, client: BigtableDataClientAsync) -> None:
        self._settings = settings
        self._client = client

    @classmethod
    async def open(
        cls,
        settings: BigtableSettings,
        tables: Mapping[str, Mapping[str, Any]],
        migrate: Callable[[], Awaitable[object]] | None = None,
    ) -> BigtableHandle:
        """Connects; with `create_tables` first creates `tables` ({name: {family: rule}}).
        With `migrate` (the store's `storage.bigtable.versions.upgrade`), that creates them
        instead, after checking and migrating the store's schema version."""
        if migrate is not None:
            await migrate()
        elif settings.create_tables:
            await ensure_tables(settings, tables)
        with errors("connect"), _quiet_emulator_notice():
            client = BigtableDataClientAsync(project=settings.project)
        return cls(settings, client)

    def table(self, name: str) -> Any:
        """The async table `table_prefix + name` (untyped: the library ships no stubs).

        Every operation is bounded by `request_timeout_s` (the client's defaults are 20-60 s):
        a hung Bigtable must fail calls as engine faults, which open the breaker, before the
        RPC's own deadline cancels them (a cancelled call tells the breaker nothing).
        """
        t = self._settings.request_timeout_s
        return self._client.get_table(
            self._settings.instance,
            self._settings.table_prefix + name,
            default_operation_timeout=t,
            default_attempt_timeout=t,
            default_read_rows_operation_timeout=t,
            default_read_rows_attempt_timeout=t,
            default_mutate_rows_operation_timeout=t,
            default_mutate_rows_attempt_timeout=t,
        )

    async def close(self) -> None:
        """Closes the data client's channels and background refresh task."""
        with errors("close"):
            await self._client.close()


@contextlib.contextmanager
def admin_client(settings: BigtableSettings) -> Iterator[Any]:
    """The synchronous admin client's instance of `settings`, closed on exit (start-up work,
    in a thread: table creation, `storage.bigtable.versions`)."""
    with _quiet_emulator_notice():  # the admin client opens data clients lazily
        client = _AdminClient(project=settings.project, admin=True)
        try:
            yield client.instance(settings.instance)
        finally:
            with contextlib.suppress(Exception):
                client.close()


async def ensure_tables(
    settings: BigtableSettings, tables: Mapping[str, Mapping[str, Any]]
) -> None:
    """Creates missing tables/families and (re)applies every family's GC rule.

    `tables` maps a table name (without prefix) to {family: GC rule}. Runs the sync admin
    client in a thread: this is start-up work, never on a request path.
    """

    def run() -> None:
        with admin_client(settings) as instance:
            for name, families in tables.items():
                table = instance.table(settings.table_prefix + name)
                if not table.exists():
                    with contextlib.suppress(gexc.AlreadyExists):
                        table.create(column_families=dict(families))
                existing = table.list_column_families()
                for family, rule in families.items():
                    column_family = table.column_family(family, gc_rule=rule)
                    if family in existing:
                        column_family.update()  # also wakes the emulator's GC sweeper
                    else:
                        column_family.create()

    with errors("create tables"):
        await asyncio.to_thread(run)


async def read_row_cells(
    table: Any,
    row_key: bytes,
    family: str,
    *,
    limit: int | None = None,
    qualifier_prefix: bytes | None = None,
    qualifier_regex: bytes | None = None,
    strip_values: bool = False,
    min_timestamp_micros: int | None = None,
    max_cell_bytes: int | None = None,
) -> AsyncIterator[tuple[bytes, bytes]]:
    """Yields (qualifier, value) of one row's family in qualifier order, page by page.

    Keyset paging: each page starts just after the last qualifier seen and is capped by a
    cells-per-row limit sized from the cells seen so far, so one response stays well under
    the emulator's 4 MiB limit even for a row with 100K cells; stops after `limit` cells.
    `qualifier_prefix` is a column range (the server seeks to it); `qualifier_regex` is a
    full-match RE2 filter the server evaluates on every cell; `min_timestamp_micros` hides
    older cells (a TTL that GC has not applied yet). `max_cell_bytes` (qualifier + value, as
    far as the caller knows a bound) sizes the first page, before any cell has been seen.
    """
    remaining = limit
    start, inclusive = qualifier_prefix, True
    end = None if qualifier_prefix is None else _prefix_end(qualifier_prefix)
    page = 1000
    if max_cell_bytes is not None:
        page = max(1, min(page, _RESPONSE_BUDGET // (max_cell_bytes + len(row_key) + 64)))
    while remaining is None or remaining > 0:
        size = page if remaining is None else min(page, remaining)
        chain: list[rf.RowFilter] = [rf.FamilyNameRegexFilter(escape_family(family))]
        if start is not None or end is not None:
            chain.append(
                rf.ColumnRangeFilter(
                    family,
                    start_qualifier=start,
                    end_qualifier=end,
                    inclusive_start=inclusive if start is not None else None,
                    inclusive_end=False if end is not None else None,
                )
            )
        if qualifier_regex is not None:
            chain.append(rf.ColumnQualifierRegexFilter(qualifier_regex))
        if min_timestamp_micros is not None:
            chain.append(rf.TimestampRangeFilter(start=_micros_time(min_timestamp_micros)))
        chain.append(rf.CellsColumnLimitFilter(1))
        if strip_values:
            chain.append(rf.StripValueTransformerFilter(True))
        chain.append(rf.CellsRowLimitFilter(size))
        with errors("read row"):
            row = await table.read_row(row_key, row_filter=rf.RowFilterChain(chain))
        cells = [] if row is None else list(row.cells)
        widest = 0
        for cell in cells:
            widest = max(widest, len(cell.qualifier) + len(cell.value))
            yield cell.qualifier, cell.value
        if len(cells) < size:
            return
        start, inclusive = cells[-1].qualifier, False
        if remaining is not None:
            remaining -= len(cells)
        page = max(256, min(50_000, _RESPONSE_BUDGET // (widest + len(row_key) + 64)))


def _micros_time(micros: int) -> datetime:
    return datetime.fromtimestamp(micros / 1_000_000, tz=UTC)


def _prefix_end(prefix: bytes) -> bytes | None:
    """The smallest qualifier above every qualifier starting with `prefix` (None: unbounded)."""
    stripped = prefix.rstrip(b"\xff")
    return stripped[:-1] + bytes((stripped[-1] + 1,)) if stripped else None
