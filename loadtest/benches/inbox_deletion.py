"""Inbox deletions on a real engine, measured in-process through `InboxService` (the code
the gRPC handler calls, without the RPC hop).

``big``: a thread delivered to N inboxes (each also holding one live thread) is deleted:
time to acknowledge, time until the operation reports DONE and every row is physically gone
(checked by a scan of the whole store), and unread counts and listings of random recipients
sampled throughout the cleanup (each must be exactly 1, the live thread).

``tombstones``: one inbox receives D + L threads of which D are deleted (and swept, so on
Cassandra their rows are tombstones inside its partition); a second inbox receives the same
L threads and never loses one. ListInbox (first page of 50) and GetUnreadCount are then
called alternately on both, same run, and their p50/p99 compared.

    source .engines/env
    .venv/bin/python -m loadtest.benches.inbox_deletion big --store sqlite --recipients 300000
    .venv/bin/python -m loadtest.benches.inbox_deletion big --store cassandra --recipients 100000
    .venv/bin/python -m loadtest.benches.inbox_deletion tombstones --store cassandra
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from loadtest.baselines.cassandra_raw import drop_keyspace
from server.config import Settings, load_settings
from server.inbox.model import InboxFilter
from server.inbox.service import InboxService
from storage import factory
from storage.ports import PortableInboxStore
from storage.slices import slices

__all__ = ["main"]


def _settings(data_dir: Path, store: str) -> Settings:
    overrides: dict[str, dict[str, Any]] = {
        "sqlite": {"data_dir": str(data_dir), "synchronous": "NORMAL"},
        "storage": {"inbox_store": store},
    }
    if store == "cassandra":
        overrides["cassandra"] = {
            "contact_points": os.environ["LOOM_TEST_CASSANDRA_CONTACT_POINTS"],
            "port": int(os.environ["LOOM_TEST_CASSANDRA_PORT"]),
            "keyspace": f"loom_del{uuid.uuid4().hex[:8]}",
            "create_schema": True,
        }
    return load_settings(env={}, overrides=overrides)


async def _bounded(calls: Sequence[Callable[[], Awaitable[Any]]], width: int) -> None:
    sem = asyncio.Semaphore(width)

    async def one(call: Callable[[], Awaitable[Any]]) -> None:
        async with sem:
            await call()

    await asyncio.gather(*(one(c) for c in calls))


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000


async def _rows_of(store: PortableInboxStore, thread: str) -> int:
    found = 0
    async for page in store.scan_entries(5000):
        found += sum(1 for _, e in page if e.thread_id == thread)
    return found


async def _big(service: InboxService, store: PortableInboxStore, args: Any) -> dict[str, Any]:
    inboxes = [f"r{i:07}" for i in range(args.recipients)]
    width = 1 if args.store == "sqlite" else 8
    started = time.perf_counter()
    for thread, message in (("live", 1), ("big", 2)):
        await _bounded(
            [
                lambda c=chunk, t=thread, m=message: store.deliver_unread(t, m, c)  # type: ignore[misc]
                for chunk in slices(inboxes, 500)
            ],
            width,
        )
    fill_s = time.perf_counter() - started
    rows_before = await _rows_of(store, "big")
    rng = random.Random(7)
    before = [await service.unread_count(i) for i in rng.sample(inboxes, 20)]
    assert before == [2] * 20, before

    t0 = time.perf_counter()
    op = await service.delete_threads(["big"])
    ack_s = time.perf_counter() - t0
    samples = wrong = 0
    progress: list[tuple[float, int, int]] = []
    while True:
        for inbox in rng.sample(inboxes, 10):
            samples += 1
            wrong += await service.unread_count(inbox) != 1
        page = await service.list_inbox(rng.choice(inboxes), InboxFilter.ALL, 50, None)
        samples += 1
        wrong += [e.thread_id for e in page.entries] != ["live"]
        op = await service.get_operation(op.operation_id)
        progress.append((round(time.perf_counter() - t0, 3), op.done, op.total))
        if op.state == "done":
            break
        await asyncio.sleep(0.1)
    done_s = time.perf_counter() - t0
    left = await _rows_of(store, "big")
    return {
        "recipients": args.recipients,
        "fill_s": round(fill_s, 2),
        "ack_ms": round(ack_s * 1000, 2),
        "done_s": round(done_s, 2),
        "settle_s": service.sweeper.settle_s,
        "rows_before": rows_before,
        "rows_left_after_done": left,
        "unread_and_listing_samples": samples,
        "samples_not_exact": wrong,
        "phantoms_cleaned": service.counts.phantoms_cleaned,
        "progress": [f"{t:.1f}s {d}/{n}" for t, d, n in progress[:: max(1, len(progress) // 20)]],
    }


async def _tombstones(
    service: InboxService, store: PortableInboxStore, args: Any
) -> dict[str, Any]:
    deleted = [f"d{i:05}" for i in range(args.deleted)]
    live = [f"l{i:05}" for i in range(args.live)]
    a, b = "inbox-deleted-from", "inbox-never-deleted"
    width = 1 if args.store == "sqlite" else 32
    calls: list[Callable[[], Awaitable[Any]]] = []
    for m, thread in enumerate(deleted + live, start=1):
        calls.append(lambda t=thread, m=m: store.deliver(t, m, unread=[a]))  # type: ignore[misc]
    for m, thread in enumerate(live, start=1 + len(deleted)):
        calls.append(lambda t=thread, m=m: store.deliver(t, m, unread=[b]))  # type: ignore[misc]
    await _bounded(calls, width)
    for inbox in (a, b):
        await store.set_read(inbox, live[::2], read=True)
    started = time.perf_counter()
    ops = [await service.delete_threads(chunk) for chunk in slices(deleted, 1000)]
    for op in ops:
        await service.wait_operation(op.operation_id)
    delete_s = time.perf_counter() - started
    counts = (await service.unread_count(a), await service.unread_count(b))
    assert counts == (len(live) - len(live[::2]),) * 2, counts
    timings: dict[str, list[float]] = {k: [] for k in ("list_a", "list_b", "unread_a", "unread_b")}
    for _ in range(args.calls):
        for key, call in (
            ("list_a", lambda: service.list_inbox(a, InboxFilter.ALL, 50, None)),
            ("list_b", lambda: service.list_inbox(b, InboxFilter.ALL, 50, None)),
            ("unread_a", lambda: service.unread_count(a)),
            ("unread_b", lambda: service.unread_count(b)),
        ):
            t = time.perf_counter()
            await call()
            timings[key].append(time.perf_counter() - t)
    out: dict[str, Any] = {
        "deleted": args.deleted,
        "live": args.live,
        "calls": args.calls,
        "delete_and_sweep_s": round(delete_s, 2),
    }
    for key, values in timings.items():
        out[key] = {
            "p50_ms": round(_pct(values, 0.5), 3),
            "p99_ms": round(_pct(values, 0.99), 3),
            "mean_ms": round(statistics.fmean(values) * 1000, 3),
        }
    for what in ("list", "unread"):
        out[f"{what}_p99_ratio"] = round(
            out[f"{what}_a"]["p99_ms"] / max(1e-6, out[f"{what}_b"]["p99_ms"]), 2
        )
    return out


async def _run(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="inbox-del-") as tmp:
        settings = _settings(Path(tmp), args.store)
        store = await factory.open_inbox_store(settings)
        inbox = replace(settings.inbox, delete_settle_s=args.settle_s, sweep_page=args.sweep_page)
        service = InboxService(store, inbox)
        service.start()
        try:
            work = _big if args.what == "big" else _tombstones
            result = await work(service, store, args)
        finally:
            await service.stop()
            await store.close()
            if args.store == "cassandra":
                c = settings.cassandra
                await asyncio.to_thread(drop_keyspace, c.contact_points, c.port, c.keyspace)
    return {"what": args.what, "store": args.store, **result}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("what", choices=("big", "tombstones"))
    parser.add_argument("--store", choices=("sqlite", "cassandra"), default="sqlite")
    parser.add_argument("--recipients", type=int, default=300_000)
    parser.add_argument("--deleted", type=int, default=10_000)
    parser.add_argument("--live", type=int, default=1_000)
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--settle-s", type=float, default=1.0)
    parser.add_argument("--sweep-page", type=int, default=5000)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    result = asyncio.run(_run(args))
    text = json.dumps(result, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
