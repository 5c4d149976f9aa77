"""UnweaveMailbox of a mailbox inside a big unified thread: time and rows read, per engine.

``python -m loadtest.benches.threadweaver_unweave [--stores sqlite,bigtable] [--sizes
1000,10000] [--erased 10]``

For each store and size N, in-process (the domain over a fresh ThreadStore namespace; engine
addresses from ``.engines/env``, as ``loadtest.stores``): weaves one unified thread of N
threads over 50 mailboxes, as a chain (thread i holds Message-IDs i and i+1), with
``--erased`` of its threads, spread along the chain, in the mailbox ``erased``; then
reads the unified thread once (GetUnifiedThread's domain call: the same-run baseline), and
erases the mailbox. Prints, per run: the time to acknowledge (reads exact), the time until
the operation is DONE (retired ids forgotten with no grace period, file scrubbed), the rows
the rebuild read, its round trips, the components the chain split into, and the ratio of
the acknowledgement to the baseline read. Timings are wall clock on a shared machine.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
import uuid
from pathlib import Path

from loadtest.stores import parse_stores, store_env
from server.config import load_settings
from server.threadweaver.model import Message
from server.threadweaver.service import ThreadWeaverService
from storage import factory
from storage.ports import ThreadKey

__all__ = ["main", "run_one"]

_MAILBOXES = 50
_BATCH = 1000


def _threads(size: int, erased: int) -> list[ThreadKey]:
    every = max(1, size // (erased + 1))
    marked = {every * (k + 1) for k in range(erased)}
    return [
        ThreadKey("erased" if i in marked else f"p{i % _MAILBOXES}", f"t{i}") for i in range(size)
    ]


async def run_one(store_name: str, size: int, erased: int) -> dict[str, object]:
    """One measurement (see the module doc)."""
    run_id = uuid.uuid4().hex[:8]
    data = Path(tempfile.mkdtemp(prefix="unweave-bench-"))
    env = {k: v for k, v in store_env(store_name, run_id, os.environ).items()}
    env["LOOM_STORAGE__THREADWEAVER_STORE"] = store_name
    env["LOOM_SQLITE__DATA_DIR"] = str(data)
    settings = load_settings(env=env)
    store = await factory.open_thread_store(settings)
    try:
        weaver = ThreadWeaverService(
            store, max_closure=100_000, max_threads=100_000, retire_grace_s=0
        )
        threads = _threads(size, erased)
        messages = [
            Message(t, f"<{run_id}-{i + j}@bench>", 1_700_000_000_000 + i + j)
            for i, t in enumerate(threads)
            for j in (0, 1)
        ]
        started = time.perf_counter()
        for at in range(0, len(messages), _BATCH):
            await weaver.weave(messages[at : at + _BATCH])
        weave_s = time.perf_counter() - started
        started = time.perf_counter()
        view = await weaver.unified_thread(threads[0], team_gids=None, max_threads=100_000)
        read_s = time.perf_counter() - started
        assert view.thread_count == size, view.thread_count
        started = time.perf_counter()
        op = await weaver.unweave_mailbox("erased")
        ack_s = time.perf_counter() - started
        done = await weaver.wait_operation(op.operation_id)
        done_s = time.perf_counter() - started
        kept = [t for t in threads if t.gid != "erased"]
        resolved = await weaver.resolve(kept[:100]) if len(kept) <= 100 else None
        parts = len({ut for ut in resolved if ut}) if resolved is not None else None
        if parts is None:
            found = await store.get_thread_uts(kept)
            parts = len(set(found.values()))
        return {
            "store": store_name,
            "threads": size,
            "erased_threads": erased,
            "weave_s": round(weave_s, 2),
            "read_s": round(read_s, 3),
            "ack_s": round(ack_s, 3),
            "done_s": round(done_s, 3),
            "state": done.state,
            "rows_read": done.rows_read,
            "round_trips": done.round_trips,
            "components_after": parts,
            "ack_over_read": round(ack_s / read_s, 1) if read_s else None,
        }
    finally:
        await store.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stores", type=parse_stores, default=["sqlite", "bigtable"])
    parser.add_argument("--sizes", default="1000,10000")
    parser.add_argument("--erased", type=int, default=10)
    args = parser.parse_args()
    for store_name in args.stores:
        for size in (int(s) for s in args.sizes.split(",")):
            print(asyncio.run(run_one(store_name, size, args.erased)), flush=True)


if __name__ == "__main__":
    main()
