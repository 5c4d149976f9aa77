"""Erasing one recipient from Summary and from TemplateInduction, per engine: time to
acknowledge, time until the operation is DONE, rows it read, against a bare walk of the
same store in the same run.

``source .engines/env && python -m loadtest.benches.erase_recipient --messages 20000
--recipients 20 --rows 2000 --users 6``

Summary: `--messages` summaries of `--recipients` exact recipients each; the erased
recipient is in every 10th. The erasure is `SummaryService.erase_recipients` on the real
store (SQLite, DynamoDB Local); its baseline is a bare `page_after` walk of the same store
(what the erasure must read anyway), so the ratio is what decoding and rewriting add.

TemplateInduction: `--rows` cluster rows of `--users` recipients' emails each (a
receipt layout, real parse), every row formed; the erased recipient has an email in every
20th row, half of which hold exactly k = 5 recipients (so the erasure drops their
templates) and half k + 1 (so it forms them again from the rest). The erasure is
`TemplateInductionService`'s `Erasure` on the real store (SQLite, the Bigtable emulator);
its baseline is a bare `scan_users` walk. Each run checks the erased recipient is gone.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import random
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from server.summary.model import DeliveryEvent, DeliveryStatus, MessageSummary
from server.summary.operations import OperationRecord
from server.summary.service import SummaryService
from server.templates.fingerprint import minhash, parse_structure
from server.templates.model import ClusterEmail, encode_cluster_email, recipient_hash
from server.templates.pipeline import Pipeline
from server.templates.schemes import SchemeParams, keys_for
from server.templates.service import TemplateInductionService
from server.templates.settings import TemplatesSettings
from server.templates.work import form_row, warm_up
from storage.bigtable.templates import BigtableTemplateStore
from storage.dynamodb.summaries import DynamoDBSummaryStore
from storage.ports import ClusterWrite, PortableTemplateStore, SummaryStore
from storage.settings import BigtableSettings, DynamoDBSettings
from storage.sqlite.summaries import SqliteSummaryStore
from storage.sqlite.templates import SqliteTemplateStore

__all__ = ["main"]

ERASED = "erase-me@example.com"
K = 5
_HTML = (
    "<html><body><table><tr><td><h1>Acme Shop</h1><p>Hi {name},</p>"
    "<p>Thanks for your order #{order}.</p><p>Total: ${total}</p>"
    "<p>Acme Shop, 1 Market Street</p></td></tr></table></body></html>"
)


async def _timed(fn: Callable[[], Awaitable[Any]]) -> tuple[float, Any]:
    started = time.perf_counter()
    result = await fn()
    return time.perf_counter() - started, result


# ---- Summary -------------------------------------------------------------------------------


async def _summary_store(engine: str, data: Path) -> SummaryStore:
    if engine == "sqlite":
        return await SqliteSummaryStore.open(data / "summary.sqlite3", synchronous="NORMAL")
    endpoint = os.environ["LOOM_TEST_DYNAMODB_ENDPOINT"]
    prefix = f"erase-{uuid.uuid4().hex[:8]}-"
    return await DynamoDBSummaryStore.open(
        DynamoDBSettings(endpoint_url=endpoint, table_prefix=prefix, create_tables=True)
    )


async def summary_run(engine: str, data: Path, messages: int, recipients: int) -> dict[str, Any]:
    """Fills the store, walks it bare, erases ERASED; the figures of one engine."""
    store = await _summary_store(engine, data)
    rng = random.Random(7)
    try:

        async def put(i: int) -> None:
            ids = [f"user-{rng.randrange(10**9)}@example.com" for _ in range(recipients - 1)]
            if i % 10 == 0:
                ids.append(ERASED)
            events = [DeliveryEvent(r, DeliveryStatus.READ) for r in ids]
            data = MessageSummary.from_events(events).encode()
            await store.put_if_version(f"msg-{i:07d}", data, None)

        for start in range(0, messages, 200):
            await asyncio.gather(*(put(i) for i in range(start, min(messages, start + 200))))

        async def walk() -> int:
            seen, cursor = 0, None
            while True:
                rows, cursor = await store.page_after(cursor, 100)
                seen += len(rows)
                if cursor is None:
                    return seen

        walk_s, walked = await _timed(walk)
        service = SummaryService(store)
        ack_s, op = await _timed(lambda: service.erase_recipients([ERASED]))
        done_s, _ = await _timed(lambda: service.operations.wait(op.operation_id))
        left = 0
        cursor = None
        while True:
            rows, cursor = await store.page_after(cursor, 500)
            left += sum(ERASED in MessageSummary.decode(s.data).view().statuses[
                DeliveryStatus.DELIVERED].recipient_ids for _, s in rows)  # fmt: skip
            if cursor is None:
                break
        return _figures(engine, walked, walk_s, ack_s, ack_s + done_s, op, left, messages // 10)
    finally:
        await store.close()


def _figures(
    engine: str,
    walked: int,
    walk_s: float,
    ack_s: float,
    total_s: float,
    op: OperationRecord,
    left: int,
    touched: int,
) -> dict[str, Any]:
    return {
        "engine": engine,
        "state": op.state.value,
        "ack_ms": round(ack_s * 1000, 2),
        "done_s": round(total_s, 3),
        "rows_read": op.done,
        "rows_touched": touched,
        "bare_walk_rows": walked,
        "bare_walk_s": round(walk_s, 3),
        "ratio_to_bare_walk": round(total_s / walk_s, 2) if walk_s else None,
        "traces_left": left,
    }


# ---- TemplateInduction ---------------------------------------------------------------------


async def _template_store(engine: str, data: Path, ttl_s: float) -> PortableTemplateStore:
    if engine == "sqlite":
        path = data / "templates.sqlite3"
        return await SqliteTemplateStore.open(path, email_ttl_s=ttl_s, synchronous="NORMAL")
    prefix = f"erase-{uuid.uuid4().hex[:8]}-"
    settings = BigtableSettings(
        project="loom-test", instance="loom-test", table_prefix=prefix, create_tables=True
    )
    return await BigtableTemplateStore.open(settings, email_ttl_s=ttl_s)


def _row_emails(row: int, users: list[str], key: bytes) -> list[bytes]:
    """The payloads of one row's emails (one per user), as the pipeline stores them."""
    rng = random.Random(row)
    out = []
    for user in users:
        html = _HTML.format(
            name=f"Name{rng.randrange(10**6)}",
            order=rng.randrange(10**6),
            total=f"{rng.randrange(10**4)}.{rng.randrange(100):02d}",
        )
        texts = parse_structure(html).texts
        stored = ClusterEmail(user, f"shop{row}@acme.example", "Your order", texts, 1)
        out.append(encode_cluster_email(stored))
    return out


async def templates_run(engine: str, data: Path, rows: int, users: int) -> dict[str, Any]:
    """Fills the store with formed rows, walks its user cells bare, erases ERASED."""
    settings = TemplatesSettings(k_anonymity=K, cpu_workers=1)
    store = await _template_store(engine, data, settings.email_ttl_s)
    executor = ProcessPoolExecutor(
        max_workers=1, mp_context=multiprocessing.get_context("forkserver")
    )
    params = SchemeParams()
    hash_key = settings.recipient_hash_key.encode()
    try:
        structure = parse_structure(_HTML.format(name="x", order=1, total="1.00"))
        touched = 0
        for row in range(rows):
            key = keys_for(f"shop{row}@acme.example", structure, minhash(structure.xpaths), params)[
                0
            ]
            mine = row % 20 == 0
            count = (K if row % 40 == 0 else K + 1) if mine else users
            names = [f"r{row}-{u}" for u in range(count - (1 if mine else 0))]
            if mine:
                names.append(ERASED)
                touched += 1
            hashed = [recipient_hash(n, hash_key) for n in names]
            payloads = _row_emails(row, hashed, key)
            writes = [
                ClusterWrite(key=key, email_id=f"e{row}-{i}", user=h.encode(), payload=p)
                for i, (h, p) in enumerate(zip(hashed, payloads, strict=True))
            ]
            await store.add_emails(writes, counted=[])
            formed = form_row(key, payloads, K, 1, params)
            if formed.templates:
                await store.put_templates(key, formed.encoded, formed.templates[0].sender, 1)

        async def walk() -> int:
            return sum([len(page) async for page in store.scan_users(1000)])

        walk_s, walked = await _timed(walk)
        # The worker process starts and imports outside the measure, as a serving one has.
        await asyncio.get_running_loop().run_in_executor(executor, warm_up)
        pipeline = Pipeline(store, settings, executor, params)
        service = TemplateInductionService(store, pipeline, scans=store)
        ack_s, op = await _timed(lambda: service.erase_recipients([ERASED]))
        done_s, _ = await _timed(lambda: service.operations.wait(op.operation_id))
        digest = recipient_hash(ERASED, hash_key).encode()
        left = sum([sum(u.user == digest for u in page) async for page in store.scan_users(1000)])
        formed_left = sum([len(page) async for page in store.scan_templates(1000)])
        out = _figures(engine, walked, walk_s, ack_s, ack_s + done_s, op, left, touched)
        out["rows_with_templates_after"] = formed_left
        return out
    finally:
        executor.shutdown()
        await store.close()


# ---- main ----------------------------------------------------------------------------------


def main() -> None:
    """Runs both services on the chosen engines; prints one JSON line per (service, engine)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--recipients", type=int, default=20)
    parser.add_argument("--rows", type=int, default=2_000)
    parser.add_argument("--users", type=int, default=6)
    parser.add_argument("--summary-engines", default="sqlite,dynamodb")
    parser.add_argument("--templates-engines", default="sqlite,bigtable")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()
    # DynamoDB Local accepts any credentials, but botocore insists on having some.
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "bench")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "bench")
    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")

    async def run() -> list[dict[str, Any]]:
        results = []
        with tempfile.TemporaryDirectory() as tmp:
            for engine in filter(None, args.summary_engines.split(",")):
                data = Path(tmp) / f"s-{engine}"
                data.mkdir()
                got = await summary_run(engine, data, args.messages, args.recipients)
                results.append({"service": "summary", **got})
                print(json.dumps(results[-1]), flush=True)
            for engine in filter(None, args.templates_engines.split(",")):
                data = Path(tmp) / f"t-{engine}"
                data.mkdir()
                got = await templates_run(engine, data, args.rows, args.users)
                results.append({"service": "templates", **got})
                print(json.dumps(results[-1]), flush=True)
        return results

    results = asyncio.run(run())
    if args.json:
        args.json.write_text(json.dumps({"command": sys.argv, "results": results}, indent=1))


if __name__ == "__main__":
    main()
