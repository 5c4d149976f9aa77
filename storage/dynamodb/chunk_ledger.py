"""The Iterator's chunk ledger on DynamoDB: leasing chunks to streams and settling them.

Round trips, not items, are what a stream pays for: a lease is one Query of the sparse
``available`` index (which projects a chunk's state, never its keys) plus **one**
TransactWriteItems that leases every chosen chunk (each
update conditioned on the ``avail_at`` it was seen with, so two streams never lease one
chunk); settling is one TransactWriteItems per 99 chunks with the counters' ADD, each
update conditioned on the chunk being unsettled and on its object count, so a count the
caller passed from its lease is checked rather than trusted — and a chunk whose count is
not known is read first (one BatchGetItem per 100). When a transaction is cancelled, its
per-item reasons say which chunks lost a race (another stream, another ack): those are
dropped and the rest is tried again; conflicts with a concurrent transaction are retried.
The leased chunks' keys, written once in their own items, come back in one BatchGetItem.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

from storage.dynamodb.client import DRIVER_ERRORS, errors
from storage.dynamodb.job_items import (
    cancellation_codes,
    chunk_from_item,
    counter_shard,
    counter_update,
    keys_key,
    transaction_lost,
)
from storage.errors import StorageCorrupt, StorageUnavailable
from storage.ports import ChunkRecord, ChunkState

__all__ = ["ChunkLedger"]

_BATCH = 99
"""Chunk updates per transaction (DynamoDB allows 100 items; one is the counters)."""
_RETRIES = 8


def _key(job_id: str, chunk_id: str) -> dict[str, Any]:
    return {"pk": {"S": f"j#{job_id}"}, "sk": {"S": f"c#{chunk_id}"}}


class ChunkLedger:
    """Lease and settle operations of one job table."""

    def __init__(self, db: Any, table: str) -> None:
        self._db = db
        self._table = table

    async def _transact(self, items: list[dict[str, Any]]) -> list[str] | None:
        """Runs the transaction; None when it applied, else each item's reason code."""
        for item in items:
            next(iter(item.values()))["TableName"] = self._table
        with errors("transact_write_items"):
            try:
                await self._db.transact_write_items(TransactItems=items)
            except DRIVER_ERRORS as exc:
                codes = cancellation_codes(exc)
                if codes is not None:
                    return codes
                if transaction_lost(exc):  # an engine that names no reasons: all lost
                    return ["ConditionalCheckFailed"] * len(items)
                raise
        return None

    async def lease(
        self, job_id: str, *, now_ms: int, lease_ms: int, max_objects: int, max_chunks: int
    ) -> list[ChunkRecord]:
        """`JobStore.lease_chunks`: one Query, then one transaction for every chosen chunk."""
        with errors("query"):
            reply = await self._db.query(
                TableName=self._table,
                IndexName="available",
                KeyConditionExpression="avail_job = :j AND avail_at <= :now",
                ExpressionAttributeValues={":j": {"S": job_id}, ":now": {"N": str(now_ms)}},
                Limit=max(1, min(max_chunks, _BATCH)),
            )
        chosen: list[dict[str, Any]] = []
        total = 0
        for item in reply.get("Items", []):
            count = int(item["count"]["N"])
            if chosen and total + count > max_objects:
                break
            chosen.append(item)
            total += count
        until = now_ms + lease_ms
        for _ in range(_RETRIES):
            if not chosen:
                return []
            codes = await self._transact([_lease_update(item, until) for item in chosen])
            if codes is None:
                keys = await self.keys(job_id, [item["chunk_id"]["S"] for item in chosen])
                return [
                    _leased(chunk_from_item(item, keys.get(item["chunk_id"]["S"], b"")), until)
                    for item in chosen
                ]
            # Chunks another stream leased first are dropped; conflicts are tried again.
            chosen = [
                i for i, code in zip(chosen, codes, strict=True) if code != "ConditionalCheckFailed"
            ]
            await asyncio.sleep(0.005)
        raise StorageUnavailable("dynamodb lease: transactions kept conflicting")

    async def settle(
        self,
        job_id: str,
        chunk_ids: Sequence[str],
        state: ChunkState,
        counts: Mapping[str, int] | None,
    ) -> tuple[int, int]:
        """`JobStore.settle_chunks`: known counts are checked in the write, others read."""
        ids = list(dict.fromkeys(chunk_ids))
        known = {i: counts[i] for i in ids if counts and i in counts}
        chunks = objects = 0
        unknown = [i for i in ids if i not in known]
        for _ in range(_RETRIES):
            if unknown:
                known |= await self._unsettled_counts(job_id, unknown)
            unknown = []
            pending = [(i, known.pop(i)) for i in list(known)]
            while pending:
                batch, pending = pending[:_BATCH], pending[_BATCH:]
                done, retry, reread = await self._settle_batch(job_id, batch, state)
                chunks += done[0]
                objects += done[1]
                pending = retry + pending
                unknown += reread
            if not unknown:
                return chunks, objects
        raise StorageUnavailable("dynamodb settle: chunk counts kept changing")

    async def _settle_batch(
        self, job_id: str, batch: list[tuple[str, int]], state: ChunkState
    ) -> tuple[tuple[int, int], list[tuple[str, int]], list[str]]:
        """((chunks, objects) settled, (id, count) to try again, ids to read again)."""
        for _ in range(_RETRIES):
            if not batch:
                return (0, 0), [], []
            total = sum(n for _, n in batch)
            items = [_settle_update(job_id, cid, n, state) for cid, n in batch]
            items.append(
                {
                    "Update": counter_update(
                        job_id,
                        {f"{state}_chunks": len(batch), f"{state}_objects": total},
                        counter_shard(batch[0][0]),
                    )
                }
            )
            codes = await self._transact(items)
            if codes is None:
                return (len(batch), total), [], []
            if "ConditionalCheckFailed" in codes[:-1]:
                # Settled meanwhile, or a count that was not the chunk's: re-read those.
                failed = [c for c, code in zip(batch, codes, strict=False) if code != "None"]
                kept = [c for c, code in zip(batch, codes, strict=False) if code == "None"]
                return (0, 0), kept, [cid for cid, _ in failed]
            await asyncio.sleep(0.005)  # a conflict with another transaction: again
        raise StorageUnavailable("dynamodb settle: transactions kept conflicting")

    async def keys(self, job_id: str, chunk_ids: Sequence[str]) -> dict[str, bytes]:
        """The packed keys of these chunks (BatchGetItem of their keys items)."""
        found: dict[str, bytes] = {}
        for start in range(0, len(chunk_ids), 100):
            request: dict[str, Any] = {
                self._table: {
                    "Keys": [keys_key(job_id, c) for c in chunk_ids[start : start + 100]],
                    "ConsistentRead": True,
                }
            }
            while request:
                with errors("batch_get_item"):
                    reply = await self._db.batch_get_item(RequestItems=request)
                for item in reply.get("Responses", {}).get(self._table, []):
                    found[item["sk"]["S"][2:]] = bytes(item["keys"]["B"])
                request = reply.get("UnprocessedKeys") or {}
        missing = [c for c in chunk_ids if c not in found]
        if missing:
            raise StorageCorrupt(f"dynamodb chunk keys missing: {missing[:3]}")
        return found

    async def _unsettled_counts(self, job_id: str, chunk_ids: Sequence[str]) -> dict[str, int]:
        """Object counts of the chunks that exist and are not settled (BatchGetItem)."""
        found: dict[str, int] = {}
        for start in range(0, len(chunk_ids), 100):
            keys = [_key(job_id, c) for c in chunk_ids[start : start + 100]]
            request: dict[str, Any] = {
                self._table: {
                    "Keys": keys,
                    "ConsistentRead": True,
                    "ProjectionExpression": "chunk_id, #s, #c",
                    "ExpressionAttributeNames": {"#s": "state", "#c": "count"},
                }
            }
            while request:
                with errors("batch_get_item"):
                    reply = await self._db.batch_get_item(RequestItems=request)
                for item in reply.get("Responses", {}).get(self._table, []):
                    if item["state"]["S"] in ("ready", "leased"):
                        found[item["chunk_id"]["S"]] = int(item["count"]["N"])
                request = reply.get("UnprocessedKeys") or {}
        return found


def _lease_update(item: dict[str, Any], until: int) -> dict[str, Any]:
    return {
        "Update": {
            "Key": {"pk": item["pk"], "sk": item["sk"]},
            "UpdateExpression": "SET #s = :l, lease_until_ms = :u, avail_at = :u, "
            "sends = sends + :one, version = version + :one",
            "ConditionExpression": "avail_at = :seen AND #s IN (:ready, :leased)",
            "ExpressionAttributeNames": {"#s": "state"},
            "ExpressionAttributeValues": {
                ":l": {"S": "leased"},
                ":u": {"N": str(until)},
                ":one": {"N": "1"},
                ":seen": item["avail_at"],
                ":ready": {"S": "ready"},
                ":leased": {"S": "leased"},
            },
        }
    }


def _leased(seen: ChunkRecord, until: int) -> ChunkRecord:
    return ChunkRecord(
        chunk_id=seen.chunk_id,
        width=seen.width,
        keys=seen.keys,
        count=seen.count,
        state="leased",
        lease_until_ms=until,
        sends=seen.sends + 1,
        acked_keys=seen.acked_keys,
        version=seen.version + 1,
    )


def _settle_update(job_id: str, chunk_id: str, count: int, state: ChunkState) -> dict[str, Any]:
    return {
        "Update": {
            "Key": _key(job_id, chunk_id),
            "UpdateExpression": "SET #s = :s, version = version + :one REMOVE avail_job, avail_at",
            "ConditionExpression": "#s IN (:ready, :leased) AND #c = :count",
            "ExpressionAttributeNames": {"#s": "state", "#c": "count"},
            "ExpressionAttributeValues": {
                ":s": {"S": state},
                ":one": {"N": "1"},
                ":ready": {"S": "ready"},
                ":leased": {"S": "leased"},
                ":count": {"N": str(count)},
            },
        }
    }
