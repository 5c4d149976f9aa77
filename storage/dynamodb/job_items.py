"""Iterator records <-> DynamoDB items (attribute-value maps), and the one test for a lost
conditional write or transaction."""

from __future__ import annotations

import json
import zlib
from collections.abc import Mapping
from typing import Any

from botocore.exceptions import ClientError

from storage.errors import StorageCorrupt
from storage.ports import ChunkRecord, JobRecord, TaskRecord

__all__ = [
    "CHUNK_STATE_ATTRIBUTES",
    "COUNTER_SHARDS",
    "cancellation_codes",
    "chunk_from_item",
    "chunk_items",
    "counter_shard",
    "counter_update",
    "job_from_item",
    "job_item",
    "keys_key",
    "task_from_item",
    "task_item",
    "transaction_conflict",
    "transaction_lost",
]

Item = dict[str, Any]


def transaction_lost(exc: BaseException) -> bool:
    """True when DynamoDB refused a write because a condition did not hold."""
    if not isinstance(exc, ClientError):
        return False
    code = exc.response.get("Error", {}).get("Code")
    if code == "ConditionalCheckFailedException":
        return True
    if code == "TransactionCanceledException":
        reasons = exc.response.get("CancellationReasons") or []
        text = str(exc)
        return any(r.get("Code") == "ConditionalCheckFailed" for r in reasons) or (
            "ConditionalCheckFailed" in text
        )
    return False


def transaction_conflict(exc: BaseException) -> bool:
    """True when a write was refused only because a concurrent transaction held an item it
    touches (DynamoDB's optimistic concurrency): nothing was written, trying again is safe."""
    if not isinstance(exc, ClientError):
        return False
    if exc.response.get("Error", {}).get("Code") == "TransactionConflictException":
        return True
    codes = cancellation_codes(exc)
    return codes is not None and "TransactionConflict" in codes and not transaction_lost(exc)


def cancellation_codes(exc: BaseException) -> list[str] | None:
    """Per-item reasons of a cancelled transaction ("None", "ConditionalCheckFailed",
    "TransactionConflict", ...), or None when `exc` is not a cancelled transaction that
    names them."""
    if not isinstance(exc, ClientError):
        return None
    if exc.response.get("Error", {}).get("Code") != "TransactionCanceledException":
        return None
    reasons = exc.response.get("CancellationReasons")
    if not reasons:
        return None
    return [str(r.get("Code", "None")) for r in reasons]


def _n(value: int | float) -> dict[str, str]:
    return {"N": str(value)}


def _s(value: str) -> dict[str, str]:
    return {"S": value}


def job_item(job: JobRecord) -> Item:
    """The job's item (with the keys of the ``jobs`` index)."""
    return {
        "pk": _s(f"j#{job.job_id}"),
        "sk": _s("job"),
        "job_id": _s(job.job_id),
        "created_ms": _n(job.created_ms),
        "spec": _s(job.spec),
        "state": _s(job.state),
        "rate": _n(job.rate),
        "paused_by": _s(job.paused_by),
        "error": _s(job.error),
        "finished_ms": _n(job.finished_ms),
        "version": _n(job.version),
        "jobs_all": _s("jobs"),
        "created_key": _s(f"{job.created_ms:015d}:{job.job_id}"),
    }


def job_from_item(item: Item) -> JobRecord:
    """The job of an item."""
    try:
        return JobRecord(
            job_id=item["job_id"]["S"],
            created_ms=int(item["created_ms"]["N"]),
            spec=item["spec"]["S"],
            state=item["state"]["S"],
            rate=int(item["rate"]["N"]),
            paused_by=item["paused_by"]["S"],
            error=item["error"]["S"],
            finished_ms=int(item["finished_ms"]["N"]),
            version=int(item["version"]["N"]),
        )
    except (KeyError, ValueError) as exc:
        raise StorageCorrupt(f"dynamodb job item malformed: {exc}") from exc


def task_item(job_id: str, t: TaskRecord) -> Item:
    """A task's item."""
    return {
        "pk": _s(f"j#{job_id}"),
        "sk": _s(f"t#{t.task_id}"),
        "task_id": _s(t.task_id),
        "level": _n(t.level),
        "parents": _s(json.dumps(t.parents, separators=(",", ":"))),
        "first": _s(json.dumps(t.first)),
        "last": _s(json.dumps(t.last)),
        "after": _s(json.dumps(t.after)),
        "upto": _s(json.dumps(t.upto)),
        "seq": _n(t.seq),
        "done": {"BOOL": t.done},
        "rows": _n(t.rows),
        "started_ms": _n(t.started_ms),
        "spawned": _s(json.dumps(t.spawned)),
    }


def task_from_item(item: Item) -> TaskRecord:
    """The task of an item."""
    try:
        return TaskRecord(
            task_id=item["task_id"]["S"],
            level=int(item["level"]["N"]),
            parents=tuple(json.loads(item["parents"]["S"])),
            first=tuple(json.loads(item["first"]["S"])),
            last=tuple(json.loads(item["last"]["S"])),
            after=tuple(json.loads(item["after"]["S"])),
            upto=tuple(json.loads(item["upto"]["S"])),
            seq=int(item["seq"]["N"]),
            done=bool(item["done"]["BOOL"]),
            rows=int(item["rows"]["N"]),
            started_ms=int(item["started_ms"]["N"]),
            spawned=tuple(json.loads(item["spawned"]["S"])),
        )
    except (KeyError, ValueError) as exc:
        raise StorageCorrupt(f"dynamodb task item malformed: {exc}") from exc


CHUNK_STATE_ATTRIBUTES = (
    "chunk_id",
    "width",
    "count",
    "state",
    "lease_until_ms",
    "sends",
    "acked_keys",
    "version",
)
"""What a chunk's state item holds besides its keys (and what the ``available`` index
projects): everything but the objects' keys, which live in an item of their own."""


def chunk_items(job_id: str, c: ChunkRecord) -> tuple[Item, Item]:
    """A new chunk as two items: its state (``c#<id>``, available to lease at once, rewritten
    by leases and settlements) and its keys (``k#<id>``, written once). Kept apart so the
    tens of kilobytes of keys are not rewritten, nor copied into the index, on every lease."""
    state = {
        "pk": _s(f"j#{job_id}"),
        "sk": _s(f"c#{c.chunk_id}"),
        "chunk_id": _s(c.chunk_id),
        "width": _n(c.width),
        "count": _n(c.count),
        "state": _s(c.state),
        "lease_until_ms": _n(c.lease_until_ms),
        "sends": _n(c.sends),
        "acked_keys": {"B": c.acked_keys},
        "version": _n(c.version),
        "avail_job": _s(job_id),
        "avail_at": _n(c.lease_until_ms),
    }
    keys = {"pk": _s(f"j#{job_id}"), "sk": _s(f"k#{c.chunk_id}"), "keys": {"B": c.keys}}
    return state, keys


def keys_key(job_id: str, chunk_id: str) -> Item:
    """The primary key of a chunk's keys item."""
    return {"pk": _s(f"j#{job_id}"), "sk": _s(f"k#{chunk_id}")}


def chunk_from_item(item: Item, keys: bytes) -> ChunkRecord:
    """The chunk of a state item and its keys."""
    try:
        return ChunkRecord(
            chunk_id=item["chunk_id"]["S"],
            width=int(item["width"]["N"]),
            keys=keys,
            count=int(item["count"]["N"]),
            state=item["state"]["S"],
            lease_until_ms=int(item["lease_until_ms"]["N"]),
            sends=int(item["sends"]["N"]),
            acked_keys=bytes(item["acked_keys"]["B"]),
            version=int(item["version"]["N"]),
        )
    except (KeyError, ValueError) as exc:
        raise StorageCorrupt(f"dynamodb chunk item malformed: {exc}") from exc


COUNTER_SHARDS = 16
"""Counter items per job: concurrent steps of one job add to different items, so real
DynamoDB does not cancel their transactions for touching the same one (TransactionConflict);
reading the counters sums the shards (one Query)."""


def counter_shard(name: str) -> int:
    """The counters item a task's steps add to (stable: a task's steps are sequential)."""
    return zlib.crc32(name.encode()) % COUNTER_SHARDS


def counter_update(job_id: str, deltas: Mapping[str, int], shard: int = 0) -> Item:
    """An UpdateItem (or transaction Update) adding `deltas` to one of the job's counters
    items (``counters#<shard>``)."""
    names: dict[str, str] = {}
    values: dict[str, Any] = {}
    parts = []
    for i, (name, delta) in enumerate(sorted(deltas.items())):
        names[f"#c{i}"] = f"c_{name}"
        values[f":c{i}"] = _n(delta)
        parts.append(f"#c{i} :c{i}")
    update: Item = {
        "Key": {"pk": _s(f"j#{job_id}"), "sk": _s(f"counters#{shard}")},
        "UpdateExpression": "ADD " + ", ".join(parts),
        "ExpressionAttributeNames": names,
        "ExpressionAttributeValues": values,
    }
    if not parts:
        update["UpdateExpression"] = "SET #c0 = if_not_exists(#c0, :z)"
        update["ExpressionAttributeNames"] = {"#c0": "c_tasks.0"}
        update["ExpressionAttributeValues"] = {":z": _n(0)}
    return update
