"""Shared DynamoDB plumbing: one long-lived aioboto3 client, table creation, error translation.

Every DynamoDB-backed store (summaries now, the Iterator's job state later) opens a
`DynamoDBClient` in its ``open()`` and closes it in ``close()``. Opening a client per call would
pay a fresh HTTP connection pool and credential resolution on every request; one client per
store keeps its connection pool warm for the life of the server.

Errors are translated by one `DriverErrors` declared here (`errors`), which every DynamoDB
module wraps its calls in: a lost conditional write is a normal outcome (callers ask for it
with `is_conditional_failure` inside the block), anything else botocore or aiobotocore raises
becomes `storage.errors.StorageUnavailable`.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Sequence
from typing import Any

import aioboto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from storage.errors import DriverErrors, StorageUnavailable
from storage.settings import DynamoDBSettings

__all__ = ["DRIVER_ERRORS", "DynamoDBClient", "KeyAttribute", "errors", "is_conditional_failure"]

KeyAttribute = tuple[str, str]
"""(attribute name, DynamoDB scalar type ``S`` | ``N`` | ``B``) of a hash key."""

_CONFIG = Config(
    connect_timeout=2.0,
    read_timeout=5.0,
    retries={"max_attempts": 3, "mode": "standard"},
    max_pool_connections=64,
)
_TABLE_ACTIVE_TIMEOUT_S = 60.0


def is_conditional_failure(exc: BaseException) -> bool:
    """True when `exc` is DynamoDB refusing a write because its ConditionExpression failed."""
    return (
        isinstance(exc, ClientError)
        and exc.response.get("Error", {}).get("Code") == "ConditionalCheckFailedException"
    )


DRIVER_ERRORS: tuple[type[BaseException], ...] = (BotoCoreError, ClientError, OSError)
"""What a DynamoDB call can raise besides a conditional failure (aiohttp errors are OSErrors or
are wrapped by aiobotocore into BotoCoreError subclasses)."""

errors = DriverErrors("dynamodb", DRIVER_ERRORS)
"""The one translation of DynamoDB's driver errors: ``with errors("get_item"): ...``. A
ClientError's message names its code ("An error occurred (ThrottlingException) when …")."""


class DynamoDBClient:
    """An open aioboto3 DynamoDB client plus the settings that name Loom's tables."""

    def __init__(
        self, settings: DynamoDBSettings, client: Any, stack: contextlib.AsyncExitStack
    ) -> None:
        self.settings = settings
        self.raw = client
        """The low-level aiobotocore client (``put_item``, ``get_item``, ...)."""
        self._stack = stack

    @classmethod
    async def open(cls, settings: DynamoDBSettings) -> DynamoDBClient:
        """Opens one client for `settings` (endpoint_url empty = AWS itself)."""
        stack = contextlib.AsyncExitStack()
        session = aioboto3.Session()
        kwargs: dict[str, Any] = {"region_name": settings.region, "config": _CONFIG}
        if settings.endpoint_url:
            kwargs["endpoint_url"] = settings.endpoint_url
        try:
            with errors("connect"):
                client = await stack.enter_async_context(session.client("dynamodb", **kwargs))
        except BaseException:
            await stack.aclose()
            raise
        return cls(settings, client, stack)

    def table_name(self, suffix: str) -> str:
        """The full name of one of Loom's tables (``<table_prefix><suffix>``)."""
        return f"{self.settings.table_prefix}{suffix}"

    async def ensure_table(self, name: str, hash_key: KeyAttribute) -> None:
        """Creates `name` (PAY_PER_REQUEST) unless it exists, then waits until it is ACTIVE.

        Safe to race: a concurrent creator's ResourceInUseException counts as success.
        """
        attr, kind = hash_key
        await self.create_table(
            name,
            AttributeDefinitions=[{"AttributeName": attr, "AttributeType": kind}],
            KeySchema=[{"AttributeName": attr, "KeyType": "HASH"}],
        )

    async def create_table(self, name: str, **spec: Any) -> None:
        """Creates `name` with a full CreateTable `spec` (composite keys, indexes) unless it
        exists, then waits until it is ACTIVE. Safe to race, like `ensure_table`."""
        with errors(f"create_table {name}"):
            try:
                await self.raw.create_table(TableName=name, BillingMode="PAY_PER_REQUEST", **spec)
            except ClientError as exc:
                if exc.response.get("Error", {}).get("Code") != "ResourceInUseException":
                    raise
        await self._wait_active(name)

    async def _wait_active(self, name: str) -> None:
        deadline = time.monotonic() + _TABLE_ACTIVE_TIMEOUT_S
        while True:
            with errors(f"describe_table {name}"):
                described = await self.raw.describe_table(TableName=name)
            if described["Table"]["TableStatus"] == "ACTIVE":
                return
            if time.monotonic() > deadline:
                raise StorageUnavailable(f"dynamodb table {name} not ACTIVE after 60 s")
            await asyncio.sleep(0.2)

    async def ensure_tables(self, tables: Sequence[tuple[str, KeyAttribute]]) -> None:
        """`ensure_table` for each (name, hash key) when settings.create_tables is on."""
        if self.settings.create_tables:
            for name, key in tables:
                await self.ensure_table(name, key)

    async def close(self) -> None:
        """Closes the client and its connection pool (idempotent)."""
        await self._stack.aclose()
