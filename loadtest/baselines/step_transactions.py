"""The Iterator's job-state baseline: DynamoDB Local committing step-shaped transactions.

Transactions shaped like a pipeline step — a conditional task update, a chunk item of
``objects`` packed keys and the counters' ADD — at the pipeline's concurrency. A chunk costs
the pipeline its commit and a share of one settlement, so this rate times the objects per
chunk bounds what any pipeline on that engine can emit.
"""

from __future__ import annotations

import asyncio
import os
import time
import uuid

import aioboto3

__all__ = ["dynamodb_transactions_per_s"]


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
