"""Baselines of the Iterator workload, measured in the same run as the pipeline.

- The raw keyset scan of the source: one loop of ``WHERE user_id = ? AND id > ? ORDER BY id
  LIMIT n`` per user, no pipeline (what "≥ 40 % of raw" is measured against).
- The raw TransactWriteItems rate of the job-state engine (DynamoDB Local in tests), with
  transactions shaped like a pipeline step — a conditional task update, a chunk item of
  `objects` packed keys and the counters' ADD — at the pipeline's concurrency. A chunk
  costs the pipeline its commit and a share of one settlement, so this rate times the
  objects per chunk bounds what any pipeline on that engine can emit.
"""

from __future__ import annotations

import asyncio
import os
import time
import uuid

import aioboto3
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine

__all__ = ["dynamodb_transactions_per_s", "raw_scan"]


async def raw_scan(url: str, users: list[int], chunk: int) -> tuple[int, float]:
    """The baseline: one keyset loop per user, no pipeline. (rows, seconds)"""
    engine = create_async_engine(url)
    sql = text(
        "SELECT id FROM file WHERE user_id = :u AND id > :m AND deleted = 0 ORDER BY id LIMIT :n"
    )
    rows = 0
    started = time.perf_counter()
    async with engine.connect() as conn:
        for user in users:
            marker = -1
            while True:
                got = (await conn.execute(sql, {"u": user, "m": marker, "n": chunk})).all()
                rows += len(got)
                if len(got) < chunk:
                    break
                marker = got[-1][0]
    seconds = time.perf_counter() - started
    await engine.dispose()
    return rows, seconds


async def dynamodb_transactions_per_s(
    *, objects: int, width: int, concurrency: int, seconds: float
) -> float:
    """Step-shaped TransactWriteItems per second on LOOM_TEST_DYNAMODB_ENDPOINT."""
    table = f"ltraw{uuid.uuid4().hex[:8]}"
    session = aioboto3.Session()
    async with session.client(
        "dynamodb",
        endpoint_url=os.environ["LOOM_TEST_DYNAMODB_ENDPOINT"],
        region_name=os.environ.get("AWS_DEFAULT_REGION", "us-east-1"),
    ) as db:
        await db.create_table(
            TableName=table,
            AttributeDefinitions=[
                {"AttributeName": "pk", "AttributeType": "S"},
                {"AttributeName": "sk", "AttributeType": "S"},
            ],
            KeySchema=[
                {"AttributeName": "pk", "KeyType": "HASH"},
                {"AttributeName": "sk", "KeyType": "RANGE"},
            ],
            BillingMode="PAY_PER_REQUEST",
        )
        keys = os.urandom(8 * width * objects)
        done = 0
        stop = time.perf_counter() + seconds

        async def writer(index: int) -> None:
            nonlocal done
            task = {"pk": {"S": "j#raw"}, "sk": {"S": f"t#{index}"}}
            await db.put_item(TableName=table, Item={**task, "seq": {"N": "0"}})
            seq = 0
            while time.perf_counter() < stop:
                await db.transact_write_items(
                    TransactItems=[
                        {
                            "Update": {
                                "TableName": table,
                                "Key": task,
                                "UpdateExpression": "SET seq = :n",
                                "ConditionExpression": "seq = :s",
                                "ExpressionAttributeValues": {
                                    ":n": {"N": str(seq + 1)},
                                    ":s": {"N": str(seq)},
                                },
                            }
                        },
                        {
                            "Put": {
                                "TableName": table,
                                "Item": {
                                    "pk": {"S": "j#raw"},
                                    "sk": {"S": f"c#{index}/{seq}"},
                                    "keys": {"B": keys},
                                    "count": {"N": str(objects)},
                                },
                            }
                        },
                        {
                            "Update": {
                                "TableName": table,
                                "Key": {"pk": {"S": "j#raw"}, "sk": {"S": f"counters{index}"}},
                                "UpdateExpression": "ADD c_found :n",
                                "ExpressionAttributeValues": {":n": {"N": str(objects)}},
                            }
                        },
                    ]
                )
                seq += 1
                done += 1

        started = time.perf_counter()
        await asyncio.gather(*(writer(i) for i in range(concurrency)))
        elapsed = time.perf_counter() - started
        await db.delete_table(TableName=table)
    return done / elapsed
