"""Dump, load and migrate rates per engine, against each engine's raw write rate in the same
run, and the longest write stall during an online backup.

``source .engines/env && python -m loadtest.benches.portable inbox --rows 1000000``
``source .engines/env && python -m loadtest.benches.portable threadweaver --discussions 3``
``source .engines/env && python -m loadtest.benches.portable summary --summaries 20000``
``python -m loadtest.benches.portable backup --gigabytes 1``

* ``inbox``: an embedded (SQLite) inbox store of ``--rows`` rows (announcement-shaped: 1,000
  recipients per message) is dumped, loaded into a fresh SQLite store and into Cassandra, and
  migrated SQLite -> Cassandra with verification. Baselines, same rows, same run: SQLite's
  plain ``executemany`` of the rows in 1,000-row transactions, and Cassandra's plain
  concurrent single-row INSERTs (`loadtest.baselines.cassandra_raw`).
* ``threadweaver``: the ThreadWeaver corpus (3 discussions: ~130K message copies) woven into
  SQLite in-process, then dumped, loaded into Cassandra and Bigtable, and migrated SQLite ->
  Cassandra with verification. Baseline: the engine's bare insert-if-absent calls for as many
  records (`loadtest.baselines.conditional_writes`), the write a load of a mapping makes.
* ``backup``: a SQLite inbox store grown to ``--gigabytes``, then single-row posts in a loop,
  timed one by one, before and during ``loom backup``'s snapshot: the longest write while the
  backup ran, against the longest before it.

Figures are printed and written as JSON (``--json``); ratios are Loom's rate over the
baseline's.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sqlite3
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from loadtest.baselines.cassandra_raw import drop_keyspace, raw_insert_rows
from loadtest.baselines.conditional_writes import insert_if_absent, measure_raw_rate, raw_keys
from loadtest.corpora.threadweaver import CorpusParams, generate
from server.config import Settings, load_settings
from server.portable import transfer
from server.portable.backup import backup
from server.threadweaver.model import Message
from server.threadweaver.service import ThreadWeaverService
from storage import factory
from storage.ports import ThreadKey

__all__ = ["main"]


def _settings(data_dir: Path, **stores: str) -> Settings:
    """Settings on `stores`' engines in a fresh namespace (keyspace, table prefix)."""
    ns = f"pb{uuid.uuid4().hex[:8]}"
    overrides: dict[str, dict[str, Any]] = {
        "sqlite": {"data_dir": str(data_dir), "synchronous": "NORMAL"},
        "storage": stores,
    }
    if "cassandra" in stores.values():
        overrides["cassandra"] = {
            "contact_points": os.environ["LOOM_TEST_CASSANDRA_CONTACT_POINTS"],
            "port": int(os.environ["LOOM_TEST_CASSANDRA_PORT"]),
            "keyspace": f"loom_{ns}",
            "create_schema": True,
        }
    if "bigtable" in stores.values():
        overrides["bigtable"] = {
            "project": "loom-bench", "instance": "loom-bench", "table_prefix": f"{ns}-",
            "create_tables": True,
        }  # fmt: skip
    return load_settings(env={}, overrides=overrides)


async def _timed(work: Any) -> tuple[Any, float]:
    started = time.perf_counter()
    result = await work
    return result, time.perf_counter() - started


def _sqlite_raw(rows: list[tuple[str, str, int]]) -> float:
    """Rows/s of the plainest SQLite loop: executemany in 1,000-row transactions (WAL,
    synchronous NORMAL, as the loaded store), inbox row and unread row per entry."""
    with tempfile.TemporaryDirectory(prefix="loom-raw-") as tmp:
        conn = sqlite3.connect(Path(tmp) / "raw.sqlite3", isolation_level=None)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.execute(
            "CREATE TABLE e (inbox_id TEXT, thread_id TEXT, last_message_id INTEGER, "
            "is_read INTEGER, PRIMARY KEY (inbox_id, thread_id)) WITHOUT ROWID"
        )
        conn.execute(
            "CREATE TABLE u (inbox_id TEXT, thread_id TEXT, PRIMARY KEY (inbox_id, thread_id))"
            " WITHOUT ROWID"
        )
        started = time.perf_counter()
        for i in range(0, len(rows), 1000):
            part = rows[i : i + 1000]
            conn.execute("BEGIN")
            conn.executemany("INSERT INTO e VALUES (?, ?, ?, 0)", part)
            conn.executemany("INSERT INTO u VALUES (?, ?)", [(a, b) for a, b, _ in part])
            conn.execute("COMMIT")
        seconds = time.perf_counter() - started
        conn.close()
    return len(rows) / seconds


async def _inbox(args: argparse.Namespace) -> dict[str, Any]:
    root = Path(tempfile.mkdtemp(prefix="loom-portable-"))
    source = _settings(root / "source")
    store = await factory.open_inbox_store(source)
    inboxes = [f"in{k}" for k in range(max(1000, args.rows // 100))]
    rows: list[tuple[str, str, int]] = []
    started = time.perf_counter()
    for m in range(args.rows // 1000):
        recipients = [inboxes[(m * 1000 + j) % len(inboxes)] for j in range(1000)]
        await store.deliver_unread(f"t{m}", 100 + m, recipients)
        rows += [(i, f"t{m}", 100 + m) for i in recipients]
    filled_s = time.perf_counter() - started
    await store.close()
    out: dict[str, Any] = {"rows": len(rows), "fill_sqlite_s": round(filled_s, 1)}
    out["raw_sqlite_rows_per_s"] = round(await asyncio.to_thread(_sqlite_raw, rows))
    opened, dump_s = await _timed(transfer.dump("inbox", source, root / "dump"))
    out["dump_sqlite_records_per_s"] = round(opened.total / dump_s)
    _, load_s = await _timed(
        transfer.load(transfer.check(root / "dump"), _settings(root / "fresh"))
    )
    out["load_sqlite_records_per_s"] = round(opened.total / load_s)
    out["load_sqlite_ratio"] = round(
        out["load_sqlite_records_per_s"] / out["raw_sqlite_rows_per_s"], 3
    )
    cassandra = _settings(root / "c", inbox_store="cassandra")
    _, load_c_s = await _timed(transfer.load(transfer.check(root / "dump"), cassandra))
    out["load_cassandra_records_per_s"] = round(opened.total / load_c_s)
    points = os.environ["LOOM_TEST_CASSANDRA_CONTACT_POINTS"].split(",")
    port = int(os.environ["LOOM_TEST_CASSANDRA_PORT"])
    keyspace = cassandra.cassandra.keyspace
    raw = await asyncio.to_thread(
        raw_insert_rows, points, port, keyspace, [r[0] + "-raw" for r in rows], "raw-thread", 7
    )
    out["raw_cassandra_records_per_s"] = round(raw.rows_per_s / 2)  # two rows per entry
    out["load_cassandra_ratio"] = round(
        out["load_cassandra_records_per_s"] / out["raw_cassandra_records_per_s"], 3
    )
    migrated = _settings(root / "m", inbox_store="cassandra")
    moved = await transfer.migrate("inbox", source, migrated)
    out["migrate_sqlite_to_cassandra_s"] = round(moved.seconds, 1)
    out["migrate_records"] = moved.records
    for ks in (keyspace, migrated.cassandra.keyspace):
        await asyncio.to_thread(drop_keyspace, points, port, ks)
    return out


async def _threadweaver(args: argparse.Namespace) -> dict[str, Any]:
    root = Path(tempfile.mkdtemp(prefix="loom-portable-"))
    corpus = generate(CorpusParams(discussions=args.discussions))
    source = _settings(root / "source")
    store = await factory.open_thread_store(source)
    weaver = ThreadWeaverService(store)
    messages = [
        Message(ThreadKey(m.gid, m.thread_id), m.rfc_message_id, m.sent_at_ms)
        for m in corpus.messages
    ]
    for i in range(0, len(messages), 1000):
        await weaver.weave(messages[i : i + 1000])
    await store.close()
    out: dict[str, Any] = {"message_copies": len(messages)}
    opened, dump_s = await _timed(transfer.dump("threadweaver", source, root / "dump"))
    out["records"] = opened.total
    out["dump_sqlite_records_per_s"] = round(opened.total / dump_s)
    items = raw_keys([f"r{k}" for k in range(opened.total)], ["v"] * opened.total)
    for engine in args.engines:
        target = _settings(root / engine, threadweaver_store=engine)
        _, load_s = await _timed(transfer.load(transfer.check(root / "dump"), target))
        async with insert_if_absent(engine, uuid.uuid4().hex[:8], os.environ) as insert:
            calls, raw_s = await measure_raw_rate(insert, items, batch=1000, callers=4)
        out[f"load_{engine}_records_per_s"] = round(opened.total / load_s)
        out[f"raw_{engine}_inserts_per_s"] = round(calls / raw_s)
        out[f"load_{engine}_ratio"] = round((opened.total / load_s) / (calls / raw_s), 3)
    migrated = _settings(root / "m", threadweaver_store="cassandra")
    moved = await transfer.migrate("threadweaver", source, migrated)
    out["migrate_sqlite_to_cassandra_s"] = round(moved.seconds, 1)
    return out


async def _summary(args: argparse.Namespace) -> dict[str, Any]:
    """Summaries of 300 recipients each in SQLite, dumped and loaded into DynamoDB, against a
    plain loop of unconditional PutItem calls of the same items (16 in flight, as the load's
    batch gathers them) on the same table shape."""
    from server.summary.model import DeliveryEvent, DeliveryStatus, MessageSummary

    root = Path(tempfile.mkdtemp(prefix="loom-portable-"))
    source = _settings(root / "source")
    store = await factory.open_summary_store(source)
    encoded = []
    for k in range(args.summaries):
        summary = MessageSummary()
        summary.record(DeliveryEvent(f"r{k}-{i}", DeliveryStatus.DELIVERED) for i in range(300))
        encoded.append((f"m{k}", summary.encode()))
    for i in range(0, len(encoded), 100):
        await asyncio.gather(*(store.put_if_version(m, d, None) for m, d in encoded[i : i + 100]))
    await store.close()
    out: dict[str, Any] = {"summaries": len(encoded), "bytes_each": len(encoded[0][1])}
    opened, dump_s = await _timed(transfer.dump("summary", source, root / "dump"))
    out["dump_sqlite_records_per_s"] = round(opened.total / dump_s)
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "bench")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "bench")
    target = _dynamodb(root / "t")
    _, load_s = await _timed(transfer.load(transfer.check(root / "dump"), target))
    out["load_dynamodb_records_per_s"] = round(opened.total / load_s)
    raw = _dynamodb(root / "raw")
    from storage.dynamodb.client import DynamoDBClient
    from storage.dynamodb.summaries import DynamoDBSummaryStore

    await (await DynamoDBSummaryStore.open(raw.dynamodb)).close()  # creates the table
    client = await DynamoDBClient.open(raw.dynamodb)
    table = client.table_name("summaries")
    started = time.perf_counter()
    for i in range(0, len(encoded), 16):
        await asyncio.gather(
            *(
                client.raw.put_item(
                    TableName=table,
                    Item={"message_id": {"S": m}, "version": {"N": "1"}, "data": {"B": d}},
                )
                for m, d in encoded[i : i + 16]
            )
        )
    raw_s = time.perf_counter() - started
    await client.close()
    out["raw_dynamodb_puts_per_s"] = round(len(encoded) / raw_s)
    out["load_dynamodb_ratio"] = round((opened.total / load_s) / (len(encoded) / raw_s), 3)
    return out


def _dynamodb(data_dir: Path) -> Settings:
    ns = f"pb{uuid.uuid4().hex[:8]}"
    return load_settings(
        env={},
        overrides={
            "sqlite": {"data_dir": str(data_dir)},
            "storage": {"summary_store": "dynamodb"},
            "dynamodb": {
                "endpoint_url": os.environ["LOOM_TEST_DYNAMODB_ENDPOINT"],
                "table_prefix": f"{ns}-",
                "create_tables": True,
            },
        },
    )


async def _backup(args: argparse.Namespace) -> dict[str, Any]:
    root = Path(tempfile.mkdtemp(prefix="loom-portable-"))
    settings = _settings(root / "data")
    store = await factory.open_inbox_store(settings)
    path = root / "data" / "inbox.sqlite3"
    target = int(args.gigabytes * (1 << 30))
    m = 0
    padding = "x" * 60
    while path.stat().st_size + _wal(path) < target:
        for _ in range(50):
            m += 1
            inboxes = [f"box{m % 5000}-{k}-{padding}" for k in range(1000)]
            await store.deliver_unread(f"thread-{m}-{padding}", m, inboxes)
    size = path.stat().st_size
    stop = asyncio.Event()
    latencies: list[tuple[float, float]] = []

    async def write() -> None:
        n = 10_000_000
        while not stop.is_set():
            n += 1
            started = time.perf_counter()
            await store.deliver(f"live{n % 100}", n, unread=[f"live-box{n % 37}"])
            latencies.append((started, time.perf_counter() - started))

    writer = asyncio.ensure_future(write())
    await asyncio.sleep(5)
    began = time.perf_counter()
    copied = await asyncio.to_thread(backup, root / "data", root / "backup")
    ended = time.perf_counter()
    await asyncio.sleep(2)
    stop.set()
    await writer
    await store.close()
    before = [s for at, s in latencies if at < began]
    during = [s for at, s in latencies if began <= at < ended]
    return {
        "store_bytes": size,
        "backup_s": round(ended - began, 2),
        "snapshot_s": round(sum(c.seconds for c in copied), 2),
        "writes_before": len(before),
        "writes_during": len(during),
        "longest_write_before_ms": round(max(before) * 1000, 1),
        "longest_write_during_ms": round(max(during, default=0.0) * 1000, 1),
        "writes_per_s_before": round(len(before) / 5, 1),
        "writes_per_s_during": round(len(during) / max(ended - began, 1e-9), 1),
    }


def _wal(path: Path) -> int:
    wal = path.with_name(path.name + "-wal")
    return wal.stat().st_size if wal.exists() else 0


def main() -> None:
    """Runs one measurement and prints (and optionally writes) its figures."""
    parser = argparse.ArgumentParser(prog="python -m loadtest.benches.portable")
    parser.add_argument("what", choices=["inbox", "threadweaver", "summary", "backup"])
    parser.add_argument("--summaries", type=int, default=20_000)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--discussions", type=int, default=3)
    parser.add_argument("--engines", default="cassandra,bigtable")
    parser.add_argument("--gigabytes", type=float, default=1.0)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    args.engines = [e for e in args.engines.split(",") if e]
    runs = {"inbox": _inbox, "threadweaver": _threadweaver, "summary": _summary, "backup": _backup}
    run = runs[args.what]
    figures = asyncio.run(run(args))
    figures["command"] = "python -m loadtest.benches.portable " + " ".join(sys.argv[1:])
    print(json.dumps(figures, indent=2))
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")


if __name__ == "__main__":
    main()
