"""Schema versions of the Bigtable stores: each store's layout, and the runner.

Versions are recorded in a table of their own, ``<table_prefix>loom_schema`` (family ``v``,
one row per store, its version in the ``version`` cell), beside the stores' tables. Like
table creation, this is start-up work done with the synchronous admin client in a thread.
The sequence is `storage.versions`': read the record and whether the store's tables exist
(no write), refuse a newer version, create the tables, run the pending steps, recording each.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final

from storage.bigtable.client import (
    admin_client,
    ensure_tables,
    errors,
    gc_rule,
)
from storage.clock import now_ms
from storage.settings import BigtableSettings
from storage.versions import TEMPLATES_V2, THREADS_V2, Layout, Plan, Step, apply, inspected, plan

__all__ = ["META_TABLE", "TEMPLATES", "THREADS", "BigtableLayout", "inspect", "upgrade"]

BigtableStep = Callable[[BigtableSettings], Awaitable[None]]
BigtableLayout = Layout[BigtableStep]

META_TABLE: Final = "loom_schema"
_FAMILY = "v"
_CELL = b"version"


async def _nothing_to_rewrite(settings: BigtableSettings) -> None:
    """A version change with no rewrite: the store reads both encodings."""
    del settings


THREADS: Final[BigtableLayout] = Layout(
    store="threads", current=2, steps=(Step(to=2, does=THREADS_V2, run=_nothing_to_rewrite),)
)
TEMPLATES: Final[BigtableLayout] = Layout(
    store="templates",
    current=2,
    steps=(
        Step(
            to=2,
            does=TEMPLATES_V2,
            run=_nothing_to_rewrite,
        ),
    ),
)


def _read(settings: BigtableSettings, store: str, tables: list[str]) -> tuple[int | None, bool]:
    """(recorded version, whether any of `tables` exists), read with the admin client."""
    with admin_client(settings) as instance:
        has_data = any(instance.table(settings.table_prefix + t).exists() for t in tables)
        meta = instance.table(settings.table_prefix + META_TABLE)
        if not meta.exists():
            return None, has_data
        row = meta.read_row(store.encode())
        if row is None:
            return None, has_data
        cells = row.cells.get(_FAMILY, {}).get(_CELL, [])
        return (int(cells[0].value.decode()) if cells else None), has_data


def _meta_exists(settings: BigtableSettings) -> bool:
    with admin_client(settings) as instance:
        return bool(instance.table(settings.table_prefix + META_TABLE).exists())


def _write(settings: BigtableSettings, store: str, version: int) -> None:
    with admin_client(settings) as instance:
        row = instance.table(settings.table_prefix + META_TABLE).direct_row(store.encode())
        row.set_cell(_FAMILY, _CELL, str(version).encode())
        row.set_cell(_FAMILY, b"updated_at_ms", str(now_ms()).encode())
        row.commit()


async def inspect(
    settings: BigtableSettings, tables: Mapping[str, Any], layout: BigtableLayout
) -> Plan[BigtableStep]:
    """What opening the store whose tables are `tables` would do, read-only."""
    with errors("read schema version"):
        recorded, has_data = await asyncio.to_thread(_read, settings, layout.store, list(tables))
    return plan(
        layout,
        f"bigtable tables {settings.table_prefix}{{{','.join(tables)}}} ({layout.store})",
        recorded=recorded,
        has_data=has_data,
    )


async def upgrade(
    settings: BigtableSettings, tables: Mapping[str, Mapping[str, Any]], layout: BigtableLayout
) -> Plan[BigtableStep] | None:
    """Brings the store whose tables are `tables` to `layout.current` (creating tables when
    ``create_tables``). Raises `storage.versions.StoreTooNew` before any write. None: not
    checked (`storage.versions.inspected`)."""

    async def create() -> None:
        if settings.create_tables:
            await ensure_tables(
                settings, {**tables, META_TABLE: {_FAMILY: gc_rule(max_versions=1)}}
            )

    async def recordable() -> bool:
        with errors("read schema version"):
            return await asyncio.to_thread(_meta_exists, settings)

    async def run_step(step: BigtableStep) -> None:
        await step(settings)

    async def record(version: int) -> None:
        with errors("record schema version"):
            await asyncio.to_thread(_write, settings, layout.store, version)

    found = await inspected(
        layout.store,
        inspect(settings, tables, layout),
        timeout_s=settings.request_timeout_s,
        required=settings.create_tables,
    )
    if found is None:
        return None
    return await apply(
        found, create=create, recordable=recordable, run_step=run_step, record=record
    )
