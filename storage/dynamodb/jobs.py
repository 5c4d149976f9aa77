"""JobStore on DynamoDB: one table, one partition per job, transactions for steps.

Table ``<table_prefix>iterator`` (hash ``pk``, range ``sk``)::

    pk = j#<job>  sk = job         the job: state, spec, rate, version, tat_ms (the pace)
                  sk = counters#k  one numeric attribute per counter (ADD), k < 16:
                                   steps add to their task's shard, reads sum them
                  sk = t#<task>    a task: level, parents, bounds, marker, seq, done, spawned
                  sk = c#<chunk>   a ledger chunk's state: count, state, lease, sends, acks
                  sk = k#<chunk>   its objects' keys (binary), written once

GSI ``available`` (``avail_job``, ``avail_at``) is sparse: a chunk carries the two attributes
while it can be leased (``avail_at`` = 0 when ready, the lease end while leased) and loses
them when settled, so a stream's lease is one Query of what is due, never a scan. GSI
``jobs`` (``jobs_all``, ``created_key``) lists jobs newest first.

A step is one TransactWriteItems: the task update conditioned on ``seq``, the new tasks,
the chunk and the counters' ADD, so a lost race writes nothing and counters never count a
duplicate (the seed's Redis counters, made exact). Leases and settlements batch many chunks
per transaction (`storage.dynamodb.chunk_ledger`). Conditional failures are outcomes;
every other driver error becomes StorageUnavailable (`storage.dynamodb.client`).
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Mapping, Sequence
from typing import Any

from storage.dynamodb import versions
from storage.dynamodb.chunk_ledger import ChunkLedger
from storage.dynamodb.client import DRIVER_ERRORS, DynamoDBClient, errors
from storage.dynamodb.job_items import (
    CHUNK_STATE_ATTRIBUTES,
    COUNTER_SHARDS,
    chunk_from_item,
    chunk_items,
    counter_shard,
    counter_update,
    job_from_item,
    job_item,
    task_from_item,
    task_item,
    transaction_conflict,
    transaction_lost,
)
from storage.errors import StorageUnavailable
from storage.ports import ChunkRecord, ChunkState, JobRecord, LedgerSummary, Step, TaskRecord
from storage.settings import DynamoDBSettings

__all__ = ["TABLE_SUFFIX", "DynamoDBJobStore"]

TABLE_SUFFIX = "iterator"
_CONFLICT_RETRIES = 6
_UNSETTLED = ("ready", "leased")
_DELETE_BATCHES = 8
"""BatchWriteItem calls of one deletion in flight at once (25 deletes each)."""


class DynamoDBJobStore:
    """`storage.ports.JobStore` on one DynamoDB table."""

    def __init__(self, client: DynamoDBClient) -> None:
        self._client = client
        self._db = client.raw
        self._table = client.table_name(TABLE_SUFFIX)
        self._chunks = ChunkLedger(self._db, self._table)

    @classmethod
    async def open(cls, settings: DynamoDBSettings) -> DynamoDBJobStore:
        """Opens the client; creates the table and its indexes when ``create_tables``."""
        client = await DynamoDBClient.open(settings)
        try:
            table = client.table_name(TABLE_SUFFIX)

            async def create() -> None:
                if settings.create_tables:
                    await client.create_table(table, **_TABLE_SPEC)

            await versions.upgrade(client, table, versions.JOBS, create)
        except BaseException:
            await client.close()
            raise
        return cls(client)

    async def _call(self, what: str, **kwargs: Any) -> Any:
        with errors(what):
            return await getattr(self._db, what)(TableName=self._table, **kwargs)

    async def _transact(self, items: list[dict[str, Any]]) -> bool:
        """True when applied, False when a condition failed (a lost race). A transaction
        cancelled only by a concurrent one on the same items (every step of a job adds to
        its counters item) wrote nothing and is tried again, a few times, jittered."""
        for item in items:
            next(iter(item.values()))["TableName"] = self._table
        for attempt in range(_CONFLICT_RETRIES + 1):
            with errors("transact_write_items"):
                try:
                    await self._db.transact_write_items(TransactItems=items)
                except DRIVER_ERRORS as exc:
                    if transaction_lost(exc):
                        return False
                    if not (transaction_conflict(exc) and attempt < _CONFLICT_RETRIES):
                        raise
                else:
                    return True
            await asyncio.sleep(random.uniform(0.002, 0.01) * (attempt + 1))
        return False  # unreachable: the last attempt returns or raises

    async def create_job(
        self, job: JobRecord, root: TaskRecord, counters: Mapping[str, int]
    ) -> None:
        await self._transact(
            [
                {"Put": {"Item": job_item(job)}},
                {"Put": {"Item": task_item(job.job_id, root)}},
                {"Update": counter_update(job.job_id, counters)},
            ]
        )

    async def get_job(self, job_id: str) -> JobRecord | None:
        reply = await self._call(
            "get_item", Key={"pk": {"S": f"j#{job_id}"}, "sk": {"S": "job"}}, ConsistentRead=True
        )
        item = reply.get("Item")
        return None if item is None else job_from_item(item)

    async def list_jobs(self, limit: int, before: tuple[int, str] | None) -> list[JobRecord]:
        cond = "jobs_all = :a"
        values: dict[str, Any] = {":a": {"S": "jobs"}}
        if before is not None:
            cond += " AND created_key < :k"
            values[":k"] = {"S": f"{before[0]:015d}:{before[1]}"}
        reply = await self._call(
            "query",
            IndexName="jobs",
            KeyConditionExpression=cond,
            ExpressionAttributeValues=values,
            ScanIndexForward=False,
            Limit=limit,
        )
        found = [job_from_item(i) for i in reply.get("Items", [])]
        # The index is eventually consistent: read the records themselves.
        fresh = [await self.get_job(j.job_id) for j in found]
        return [j for j in fresh if j is not None]

    async def active_jobs(self) -> list[JobRecord]:
        jobs: list[JobRecord] = []
        kwargs: dict[str, Any] = {
            "IndexName": "jobs",
            "KeyConditionExpression": "jobs_all = :a",
            "FilterExpression": "#s IN (:r, :p)",
            "ExpressionAttributeNames": {"#s": "state"},
            "ExpressionAttributeValues": {
                ":a": {"S": "jobs"},
                ":r": {"S": "running"},
                ":p": {"S": "paused"},
            },
        }
        while True:
            reply = await self._call("query", **kwargs)
            jobs.extend(job_from_item(i) for i in reply.get("Items", []))
            if "LastEvaluatedKey" not in reply:
                return jobs
            kwargs["ExclusiveStartKey"] = reply["LastEvaluatedKey"]

    async def update_job(self, job: JobRecord, expected_version: int) -> bool:
        item = job_item(job)
        names = {"#s": "state", "#e": "error"}
        values = {
            ":spec": item["spec"],
            ":s": item["state"],
            ":rate": item["rate"],
            ":pb": item["paused_by"],
            ":e": item["error"],
            ":f": item["finished_ms"],
            ":nv": {"N": str(expected_version + 1)},
            ":v": {"N": str(expected_version)},
        }
        return await self._transact(
            [
                {
                    "Update": {
                        "Key": {"pk": {"S": f"j#{job.job_id}"}, "sk": {"S": "job"}},
                        "UpdateExpression": "SET spec = :spec, #s = :s, rate = :rate, "
                        "paused_by = :pb, #e = :e, finished_ms = :f, version = :nv",
                        "ConditionExpression": "version = :v",
                        "ExpressionAttributeNames": names,
                        "ExpressionAttributeValues": values,
                    }
                }
            ]
        )

    async def get_task(self, job_id: str, task_id: str) -> TaskRecord | None:
        reply = await self._call(
            "get_item",
            Key={"pk": {"S": f"j#{job_id}"}, "sk": {"S": f"t#{task_id}"}},
            ConsistentRead=True,
        )
        item = reply.get("Item")
        return None if item is None else task_from_item(item)

    async def open_tasks(self, job_id: str) -> list[TaskRecord]:
        items = await self._partition(job_id, "t#")
        return [task_from_item(i) for i in items if not i["done"]["BOOL"]]

    async def commit_step(self, job_id: str, step: Step, expected_seq: int) -> bool:
        t = step.task
        new = task_item(job_id, t)
        items: list[dict[str, Any]] = [
            {
                "Update": {
                    "Key": {"pk": new["pk"], "sk": new["sk"]},
                    "UpdateExpression": "SET #a = :a, upto = :u, seq = :s, done = :d, #r = :r, "
                    "started_ms = :st, spawned = :sp",
                    "ConditionExpression": "seq = :expected",
                    "ExpressionAttributeNames": {"#a": "after", "#r": "rows"},
                    "ExpressionAttributeValues": {
                        ":a": new["after"],
                        ":u": new["upto"],
                        ":s": new["seq"],
                        ":d": new["done"],
                        ":r": new["rows"],
                        ":st": new["started_ms"],
                        ":sp": new["spawned"],
                        ":expected": {"N": str(expected_seq)},
                    },
                }
            }
        ]
        items += [{"Put": {"Item": task_item(job_id, n)}} for n in step.new_tasks]
        if step.chunk is not None:
            state, keys = chunk_items(job_id, step.chunk)
            items += [{"Put": {"Item": state}}, {"Put": {"Item": keys}}]
        if step.counters:
            shard = counter_shard(t.task_id)
            items.append({"Update": counter_update(job_id, step.counters, shard)})
        return await self._transact(items)

    async def counters(self, job_id: str) -> dict[str, int]:
        totals: dict[str, int] = {}
        for item in await self._partition(job_id, "counters"):
            for k, v in item.items():
                if k.startswith("c_"):
                    totals[k[2:]] = totals.get(k[2:], 0) + int(v["N"])
        return totals

    async def add_counters(self, job_id: str, deltas: Mapping[str, int]) -> None:
        if any(deltas.values()):
            shard = random.randrange(COUNTER_SHARDS)
            await self._call("update_item", **counter_update(job_id, deltas, shard))

    async def lease_chunks(
        self, job_id: str, *, now_ms: int, lease_ms: int, max_objects: int, max_chunks: int
    ) -> list[ChunkRecord]:
        return await self._chunks.lease(
            job_id, now_ms=now_ms, lease_ms=lease_ms, max_objects=max_objects, max_chunks=max_chunks
        )

    async def settle_chunks(
        self,
        job_id: str,
        chunk_ids: Sequence[str],
        state: ChunkState,
        counts: Mapping[str, int] | None = None,
    ) -> tuple[int, int]:
        return await self._chunks.settle(job_id, chunk_ids, state, counts)

    async def _partition(self, job_id: str, prefix: str, **extra: Any) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = []
        kwargs: dict[str, Any] = {
            "KeyConditionExpression": "pk = :pk AND begins_with(sk, :p)",
            "ExpressionAttributeValues": {":pk": {"S": f"j#{job_id}"}, ":p": {"S": prefix}},
            "ConsistentRead": True,
            **extra,
        }
        while True:
            reply = await self._call("query", **kwargs)
            items.extend(reply.get("Items", []))
            if "LastEvaluatedKey" not in reply:
                return items
            kwargs["ExclusiveStartKey"] = reply["LastEvaluatedKey"]

    async def leased_chunks(self, job_id: str, limit: int) -> list[ChunkRecord]:
        items = await self._partition(job_id, "c#")
        leased = [i for i in items if i["state"]["S"] == "leased"][:limit]
        keys = await self._chunks.keys(job_id, [i["chunk_id"]["S"] for i in leased])
        return [chunk_from_item(i, keys[i["chunk_id"]["S"]]) for i in leased]

    async def save_chunk_acks(self, job_id: str, chunk: ChunkRecord, expected_version: int) -> bool:
        with errors("update_item"):
            try:
                await self._db.update_item(
                    TableName=self._table,
                    Key={"pk": {"S": f"j#{job_id}"}, "sk": {"S": f"c#{chunk.chunk_id}"}},
                    UpdateExpression="SET acked_keys = :a, version = version + :one",
                    ConditionExpression="version = :v",
                    ExpressionAttributeValues={
                        ":a": {"B": chunk.acked_keys},
                        ":one": {"N": "1"},
                        ":v": {"N": str(expected_version)},
                    },
                )
            except DRIVER_ERRORS as exc:
                if transaction_lost(exc):
                    return False
                raise
        return True

    async def ledger(self, job_id: str, *, settled: ChunkState) -> LedgerSummary:
        tasks = await self._partition(job_id, "t#", ProjectionExpression="done")
        chunks = await self._partition(
            job_id, "c#", ProjectionExpression="#s, #c", ExpressionAttributeNames=_LEDGER_NAMES
        )
        return LedgerSummary(
            tasks=len(tasks),
            tasks_open=sum(1 for t in tasks if not t["done"]["BOOL"]),
            chunks=len(chunks),
            chunks_unsettled=sum(1 for c in chunks if c["state"]["S"] != settled),
            objects=sum(int(c["count"]["N"]) for c in chunks),
        )

    async def get_pace(self, job_id: str) -> float | None:
        reply = await self._call(
            "get_item",
            Key={"pk": {"S": f"j#{job_id}"}, "sk": {"S": "job"}},
            ConsistentRead=True,
            ProjectionExpression="pk, tat_ms",
        )
        item = reply.get("Item")
        if item is None:
            return None
        return float(item["tat_ms"]["N"]) if "tat_ms" in item else 0.0

    async def set_pace(self, job_id: str, pace_ms: float, *, expected_ms: float) -> bool:
        # A job never paced has no attribute yet: that is the pace 0.0.
        condition = "tat_ms = :old"
        if expected_ms == 0.0:
            condition = "attribute_exists(pk) AND (attribute_not_exists(tat_ms) OR tat_ms = :old)"
        with errors("update_item"):
            try:
                await self._db.update_item(
                    TableName=self._table,
                    Key={"pk": {"S": f"j#{job_id}"}, "sk": {"S": "job"}},
                    UpdateExpression="SET tat_ms = :new",
                    ConditionExpression=condition,
                    ExpressionAttributeValues={
                        ":new": {"N": repr(pace_ms)},
                        ":old": {"N": repr(expected_ms)},
                    },
                )
            except DRIVER_ERRORS as exc:
                if transaction_lost(exc) or transaction_conflict(exc):
                    return False  # another booking swapped first
                raise
        return True

    async def delete_job(self, job_id: str) -> int:
        # The job is one partition: one Query of its keys (pages of up to 1 MB), deletes in
        # batches of 25 (eight batches at a time), the job item last so an interrupted call leaves it for a retry. The
        # GSIs lose each item's entries with it.
        pk = {"S": f"j#{job_id}"}
        items: list[dict[str, Any]] = []
        kwargs: dict[str, Any] = {
            "KeyConditionExpression": "pk = :pk",
            "ExpressionAttributeValues": {":pk": pk},
            "ProjectionExpression": "pk, sk",
            "ConsistentRead": True,
        }
        while True:
            reply = await self._call("query", **kwargs)
            items.extend(reply.get("Items", []))
            if "LastEvaluatedKey" not in reply:
                break
            kwargs["ExclusiveStartKey"] = reply["LastEvaluatedKey"]
        rest = [{"pk": pk, "sk": i["sk"]} for i in items if i["sk"]["S"] != "job"]
        batches = [rest[start : start + 25] for start in range(0, len(rest), 25)]
        for first in range(0, len(batches), _DELETE_BATCHES):
            await asyncio.gather(
                *(self._batch_delete(b) for b in batches[first : first + _DELETE_BATCHES])
            )
        if len(rest) < len(items):
            await self._batch_delete([{"pk": pk, "sk": {"S": "job"}}])
        return len(items)

    async def _batch_delete(self, keys: list[dict[str, Any]]) -> None:
        """Deletes the items (at most 25), again for any DynamoDB left unprocessed."""
        requests = [{"DeleteRequest": {"Key": k}} for k in keys]
        for attempt in range(_CONFLICT_RETRIES * 4):
            with errors("batch_write_item"):
                reply = await self._db.batch_write_item(RequestItems={self._table: requests})
            requests = reply.get("UnprocessedItems", {}).get(self._table, [])
            if not requests:
                return
            await asyncio.sleep(min(1.0, 0.01 * 2**attempt))
        raise StorageUnavailable(f"dynamodb {self._table}: deletes left unprocessed")

    async def close(self) -> None:
        await self._client.close()


_LEDGER_NAMES = {"#s": "state", "#c": "count"}

_TABLE_SPEC: dict[str, Any] = {
    "AttributeDefinitions": [
        {"AttributeName": "pk", "AttributeType": "S"},
        {"AttributeName": "sk", "AttributeType": "S"},
        {"AttributeName": "avail_job", "AttributeType": "S"},
        {"AttributeName": "avail_at", "AttributeType": "N"},
        {"AttributeName": "jobs_all", "AttributeType": "S"},
        {"AttributeName": "created_key", "AttributeType": "S"},
    ],
    "KeySchema": [
        {"AttributeName": "pk", "KeyType": "HASH"},
        {"AttributeName": "sk", "KeyType": "RANGE"},
    ],
    "GlobalSecondaryIndexes": [
        {
            "IndexName": "available",
            "KeySchema": [
                {"AttributeName": "avail_job", "KeyType": "HASH"},
                {"AttributeName": "avail_at", "KeyType": "RANGE"},
            ],
            "Projection": {
                "ProjectionType": "INCLUDE",
                "NonKeyAttributes": list(CHUNK_STATE_ATTRIBUTES),
            },
        },
        {
            "IndexName": "jobs",
            "KeySchema": [
                {"AttributeName": "jobs_all", "KeyType": "HASH"},
                {"AttributeName": "created_key", "KeyType": "RANGE"},
            ],
            "Projection": {"ProjectionType": "ALL"},
        },
    ],
}
