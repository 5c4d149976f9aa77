"""The Iterator's engine set-ups for `loom serve` processes in reliability tests.

``sqlite``: source, queues and job state embedded. ``postgres-sqs-dynamodb``: what a real
deployment runs — a PostgreSQL source (a private database on the test server), SQS queues
(ElasticMQ) and job state on DynamoDB (DynamoDB Local), each in a fresh namespace that
survives the server's restarts (so a restarted or second replica finds the same work).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine

from loadtest.corpora.iterator import expected_ids
from tests.conftest import selected_engines
from tests.engines import require, unique

SETUPS: dict[str, tuple[str, ...]] = {
    "sqlite": ("sqlite",),
    "postgres-sqs-dynamodb": ("postgres", "sqs", "dynamodb"),
}


def parametrize_setups(metafunc: pytest.Metafunc, *, distributed_only: bool = False) -> None:
    """Parametrizes `setup` over the set-ups whose engines this run covers."""
    if "setup" not in metafunc.fixturenames:
        return
    wanted = [
        name
        for name, engines in SETUPS.items()
        if set(selected_engines(metafunc.config, engines)) == set(engines)
        and not (distributed_only and name == "sqlite")
    ]
    metafunc.parametrize("setup", wanted, ids=wanted)


def base_source_url(setup: str, tmp: Path) -> str:
    """Where the corpus goes: a SQLite file, or the test PostgreSQL server."""
    if setup == "sqlite":
        return f"sqlite+aiosqlite:///{tmp / 'source.sqlite3'}"
    require("postgres")
    return os.environ["LOOM_TEST_POSTGRES_URL"]


def serve_env(setup: str, source_url: str, namespace: str, **iterator: object) -> dict[str, str]:
    """Environment of a `loom serve` on `setup` (queues and state named by `namespace`)."""
    env = {
        "LOOM_ITERATOR__SOURCE_URL": source_url,
        "LOOM_SERVER__USE_UVLOOP": "false",
        **{f"LOOM_ITERATOR__{k.upper()}": str(v) for k, v in iterator.items()},
    }
    if setup != "sqlite":
        for engine in SETUPS[setup]:
            require(engine)
        env |= {
            "LOOM_STORAGE__ITERATOR_QUEUE": "sqs",
            "LOOM_STORAGE__ITERATOR_STATE": "dynamodb",
            "LOOM_SQS__ENDPOINT_URL": os.environ["LOOM_TEST_SQS_ENDPOINT"],
            "LOOM_SQS__QUEUE_PREFIX": f"{namespace}-",
            "LOOM_SQS__CREATE_QUEUES": "true",
            "LOOM_DYNAMODB__ENDPOINT_URL": os.environ["LOOM_TEST_DYNAMODB_ENDPOINT"],
            "LOOM_DYNAMODB__TABLE_PREFIX": f"{namespace}-",
            "LOOM_DYNAMODB__CREATE_TABLES": "true",
        }
    return env


def namespace() -> str:
    """A fresh queue/table prefix."""
    return unique("rel")


async def truth(url: str, scope_level: int, emit_level: int, first: int, last: int) -> list[int]:
    """The ids a plain SQL join gives for the scope (sorted)."""
    engine = create_async_engine(url)
    try:
        async with engine.connect() as conn:
            rows = await conn.execute(
                text(expected_ids(scope_level, emit_level)), {"first": first, "last": last}
            )
            return sorted(r[0] for r in rows)
    finally:
        await engine.dispose()
