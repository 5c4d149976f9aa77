"""Schema versions of the DynamoDB stores: each store's layout, and the runner.

Versions are recorded in a table of their own, ``<table_prefix>loom_schema`` (hash key
``store``), one item per store, beside the stores' tables: a store's own table holds only
its records, which `loom dump` scans whole. The sequence is `storage.versions`': read the
record and whether the store's table exists (DescribeTable, GetItem: no write), refuse a
newer version, create the tables, run the pending steps, recording each.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Final

from botocore.exceptions import ClientError

from storage.clock import now_ms
from storage.dynamodb.client import DynamoDBClient, errors
from storage.versions import Layout, Plan, apply, inspected, plan

__all__ = ["JOBS", "META_SUFFIX", "SUMMARIES", "DynamoDBLayout", "inspect", "upgrade"]

DynamoDBStep = Callable[[DynamoDBClient], Awaitable[None]]
DynamoDBLayout = Layout[DynamoDBStep]

META_SUFFIX: Final = "loom_schema"
_CHECK_TIMEOUT_S: Final = 10.0
"""How long start-up waits to read a version it may go without (the client retries)."""

SUMMARIES: Final[DynamoDBLayout] = Layout(store="summaries", current=1)
JOBS: Final[DynamoDBLayout] = Layout(store="jobs", current=1)


def _missing(exc: ClientError) -> bool:
    return bool(exc.response.get("Error", {}).get("Code") == "ResourceNotFoundException")


async def _exists(client: DynamoDBClient, name: str) -> bool:
    with errors(f"describe_table {name}"):
        try:
            await client.raw.describe_table(TableName=name)
        except ClientError as exc:
            if _missing(exc):
                return False
            raise
    return True


async def _recorded(client: DynamoDBClient, store: str) -> int | None:
    with errors("get_item loom_schema"):
        try:
            reply = await client.raw.get_item(
                TableName=client.table_name(META_SUFFIX),
                Key={"store": {"S": store}},
                ConsistentRead=True,
            )
        except ClientError as exc:
            if _missing(exc):
                return None
            raise
    item = reply.get("Item")
    return None if item is None else int(item["version"]["N"])


async def inspect(client: DynamoDBClient, table: str, layout: DynamoDBLayout) -> Plan[DynamoDBStep]:
    """What opening the store whose table is `table` would do, read-only."""
    return plan(
        layout,
        f"dynamodb table {table} ({layout.store})",
        recorded=await _recorded(client, layout.store),
        has_data=await _exists(client, table),
    )


async def upgrade(
    client: DynamoDBClient,
    table: str,
    layout: DynamoDBLayout,
    create: Callable[[], Awaitable[None]],
) -> Plan[DynamoDBStep] | None:
    """Brings the store whose table is `table` to `layout.current`; `create` makes its
    tables (when the settings allow). Raises `storage.versions.StoreTooNew` before any
    write. None: not checked (`storage.versions.inspected`)."""
    meta = client.table_name(META_SUFFIX)

    async def create_all() -> None:
        await create()
        await client.ensure_tables([(meta, ("store", "S"))])

    async def recordable() -> bool:
        return await _exists(client, meta)

    async def run_step(step: DynamoDBStep) -> None:
        await step(client)

    async def record(version: int) -> None:
        with errors("put_item loom_schema"):
            await client.raw.put_item(
                TableName=meta,
                Item={
                    "store": {"S": layout.store},
                    "version": {"N": str(version)},
                    "updated_at_ms": {"N": str(now_ms())},
                },
            )

    found = await inspected(
        table,
        inspect(client, table, layout),
        timeout_s=_CHECK_TIMEOUT_S,
        required=client.settings.create_tables,
    )
    if found is None:
        return None
    return await apply(
        found, create=create_all, recordable=recordable, run_step=run_step, record=record
    )
