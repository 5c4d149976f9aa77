"""WorkQueue on the embedded SQLite engine: durable at-least-once queues with visibility.

    queue_message (id INTEGER PRIMARY KEY, queue, body, visible_at_ms, receives, token)

Receiving is one write transaction: pick visible messages, push their ``visible_at`` out by
the visibility timeout and give each a fresh random token. The receipt is ``id.token``, so
a worker whose message already reappeared and went to someone else cannot delete or hide
the new delivery with its stale receipt (SQS receipt-handle semantics). Messages live in
the file, so a SIGKILLed server finds them again after the timeout.

Waiting receivers in this process are woken by `send` (no polling latency within one
server); other processes sharing the file are found by polling every `poll_s`.
"""

from __future__ import annotations

import asyncio
import secrets
import sqlite3
import time
from collections.abc import Sequence
from pathlib import Path

from storage.clock import now_ms
from storage.ports import QueuedMessage
from storage.sqlite import versions
from storage.sqlite.database import SqliteDatabase

__all__ = ["SqliteWorkQueue"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS queue_message (
    id INTEGER PRIMARY KEY,
    queue TEXT NOT NULL,
    body TEXT NOT NULL,
    visible_at_ms INTEGER NOT NULL,
    receives INTEGER NOT NULL DEFAULT 0,
    token INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS queue_message_visible ON queue_message (queue, visible_at_ms);
"""


def _parse(receipt: str) -> tuple[int, int] | None:
    head, _, tail = receipt.partition(".")
    if not (head.isdigit() and tail.isdigit()):
        return None
    return int(head), int(tail)


class SqliteWorkQueue:
    """`storage.ports.WorkQueue` on one SQLite file."""

    def __init__(self, db: SqliteDatabase, poll_s: float = 0.05) -> None:
        self._db = db
        self._poll_s = poll_s
        self._events: dict[str, asyncio.Event] = {}

    @classmethod
    async def open(
        cls, path: Path, *, synchronous: str = "FULL", readers: int = 2, poll_s: float = 0.05
    ) -> SqliteWorkQueue:
        """Opens (creating when missing) the queue file at `path`."""
        db = SqliteDatabase(path, synchronous=synchronous, readers=readers)
        await db.migrate(_SCHEMA, versions.QUEUE)
        return cls(db, poll_s)

    def _event(self, queue: str) -> asyncio.Event:
        event = self._events.get(queue)
        if event is None:
            event = self._events[queue] = asyncio.Event()
        return event

    async def send(self, queue: str, bodies: Sequence[str]) -> None:
        if not bodies:
            return
        now = now_ms()
        rows = [(queue, body, now) for body in bodies]

        def run(conn: sqlite3.Connection) -> None:
            conn.executemany(
                "INSERT INTO queue_message (queue, body, visible_at_ms) VALUES (?, ?, ?)", rows
            )

        await self._db.write(run)
        self._event(queue).set()

    async def receive(
        self, queue: str, *, max_messages: int, visibility_s: float, wait_s: float
    ) -> list[QueuedMessage]:
        deadline = time.monotonic() + max(0.0, wait_s)
        event = self._event(queue)
        while True:
            event.clear()
            found = await self._take(queue, max_messages, visibility_s)
            remaining = deadline - time.monotonic()
            if found or remaining <= 0:
                return found
            try:
                async with asyncio.timeout(min(remaining, self._poll_s)):
                    await event.wait()
            except TimeoutError:
                pass

    async def _take(self, queue: str, limit: int, visibility_s: float) -> list[QueuedMessage]:
        now = now_ms()
        until = now + int(visibility_s * 1000)

        def run(conn: sqlite3.Connection) -> list[QueuedMessage]:
            rows = conn.execute(
                "SELECT id, body, receives FROM queue_message "
                "WHERE queue = ? AND visible_at_ms <= ? ORDER BY visible_at_ms LIMIT ?",
                (queue, now, limit),
            ).fetchall()
            taken = []
            for ident, body, receives in rows:
                token = secrets.randbits(48)
                conn.execute(
                    "UPDATE queue_message SET visible_at_ms = ?, receives = receives + 1, "
                    "token = ? WHERE id = ?",
                    (until, token, ident),
                )
                taken.append(
                    QueuedMessage(body=body, receipt=f"{ident}.{token}", receive_count=receives + 1)
                )
            return taken

        return await self._db.write(run)

    async def delete(self, queue: str, receipts: Sequence[str]) -> None:
        pairs = [p for p in map(_parse, receipts) if p is not None]
        if not pairs:
            return

        def run(conn: sqlite3.Connection) -> None:
            conn.executemany(
                "DELETE FROM queue_message WHERE id = ? AND token = ? AND queue = ?",
                [(i, t, queue) for i, t in pairs],
            )

        await self._db.write(run)

    async def set_visibility(self, queue: str, receipt: str, visibility_s: float) -> None:
        pair = _parse(receipt)
        if pair is None:
            return
        until = now_ms() + int(visibility_s * 1000)

        def run(conn: sqlite3.Connection) -> None:
            conn.execute(
                "UPDATE queue_message SET visible_at_ms = ? WHERE id = ? AND token = ? "
                "AND queue = ?",
                (until, pair[0], pair[1], queue),
            )

        await self._db.write(run)
        if visibility_s <= 0:
            self._event(queue).set()

    async def discard(self, queue: str, body_prefix: str) -> int:
        # Every message of the queue, visible or held, is looked at (the queue index narrows
        # it to this queue; a queue holds the work in flight, not history).
        # Then the WAL is truncated, so no byte of the job's messages, sent or deleted
        # before, stays in either file (`secure_delete` zeroes them in the database).
        def run(conn: sqlite3.Connection) -> int:
            return conn.execute(
                "DELETE FROM queue_message WHERE queue = ? AND substr(body, 1, ?) = ?",
                (queue, len(body_prefix), body_prefix),
            ).rowcount

        removed = await self._db.write(run)
        await self._db.scrub()
        return removed

    async def depth(self, queue: str) -> int:
        def run(conn: sqlite3.Connection) -> int:
            row = conn.execute(
                "SELECT count(*) FROM queue_message WHERE queue = ?", (queue,)
            ).fetchone()
            return int(row[0])

        return await self._db.read(run)

    async def close(self) -> None:
        await self._db.close()
