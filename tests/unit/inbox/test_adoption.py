"""Adopter over the embedded engine: what it takes over, what it leaves, and that of two
servers looking at one stalled delivery exactly one takes it.

The fan-out stages here are never started, so an adopted job stays queued where the test
can see it (`FanoutStage.live`) and no inbox is written.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace

from server.inbox.adoption import Adopter
from server.inbox.fanout import RELEASED_MS, FanoutStage
from storage.ports import DeliveryRecord
from storage.sqlite.inbox import SqliteInboxStore
from tests.unit.inbox.stages import quiet_trimmer

NOW_MS = 1_000_000_000
STALL_S = 30.0
RECIPIENTS = ["a", "b", "c", "d"]


def stage(store: SqliteInboxStore, *, queue_size: int = 8) -> FanoutStage:
    return FanoutStage(
        store,
        quiet_trimmer(store),
        workers=1,
        queue_size=queue_size,
        chunk_size=2,
        progress_interval_s=0.0,
    )


def adopter(store: SqliteInboxStore, fanout: FanoutStage, now_ms: int = NOW_MS) -> Adopter:
    return Adopter(store, fanout, stall_after_s=STALL_S, interval_s=3600.0, now_ms=lambda: now_ms)


async def stored_delivery(
    store: SqliteInboxStore,
    delivery_id: str,
    *,
    updated_at_ms: int,
    state: str = "running",
    error: str = "",
    recipients: list[str] | None = RECIPIENTS,
) -> DeliveryRecord:
    """A delivery as a server left it: 1 of 4 recipients done, its recipients stored."""
    record = DeliveryRecord(
        delivery_id=delivery_id,
        thread_id="t",
        message_id=7,
        sender_inbox_id="boss",
        total=len(RECIPIENTS),
        done=1,
        state="running",
        error=error,
        updated_at_ms=updated_at_ms,
    )
    record = replace(record, state="failed") if state == "failed" else record
    await store.save_delivery(record)
    if recipients is not None:
        await store.save_recipients(delivery_id, recipients)
    return record


class TestWhatIsAdopted:
    async def test_a_released_delivery_is_claimed_and_resumed_at_its_progress(
        self, store: SqliteInboxStore
    ) -> None:
        """Released at shutdown: adopted at once, claimed in the store with this server's
        time, and queued with its stored recipients from its stored `done`."""
        fanout = stage(store)
        await stored_delivery(store, "d1", updated_at_ms=RELEASED_MS)
        adopting = adopter(store, fanout)
        assert await adopting.adopt_once() == 1
        assert adopting.adopted == 1
        live = fanout.live("d1")
        assert live is not None
        assert (live.state, live.done, live.error, live.updated_at_ms) == ("running", 1, "", NOW_MS)
        assert await store.get_delivery("d1") == live

    async def test_a_delivery_is_adopted_only_once_it_has_stalled(
        self, store: SqliteInboxStore
    ) -> None:
        """Progress younger than stall_after_s means its server is alive: left alone; as old
        as stall_after_s, adopted."""
        fanout = stage(store)
        stall_ms = int(STALL_S * 1000)
        await stored_delivery(store, "alive", updated_at_ms=NOW_MS - stall_ms + 1)
        await stored_delivery(store, "dead", updated_at_ms=NOW_MS - stall_ms)
        assert await adopter(store, fanout).adopt_once() == 1
        assert fanout.live("alive") is None
        assert fanout.live("dead") is not None

    async def test_a_delivery_failed_by_the_engine_is_adopted_again(
        self, store: SqliteInboxStore
    ) -> None:
        """A fan-out stopped as FAILED by a storage failure is taken up once it has stalled."""
        fanout = stage(store)
        await stored_delivery(
            store, "d1", updated_at_ms=RELEASED_MS, state="failed", error="storage failure: x"
        )
        assert await adopter(store, fanout).adopt_once() == 1
        live = fanout.live("d1")
        assert live is not None
        assert (live.state, live.error) == ("running", "")

    async def test_what_this_server_runs_or_finished_is_left_alone(
        self, store: SqliteInboxStore
    ) -> None:
        """A delivery already live in this stage, and a DONE one, are not adopted."""
        fanout = stage(store)
        await stored_delivery(store, "queued", updated_at_ms=RELEASED_MS)
        await stored_delivery(store, "done", updated_at_ms=RELEASED_MS)
        done = await store.get_delivery("done")
        assert done is not None
        await store.save_delivery(replace(done, state="done", done=4))
        first = adopter(store, fanout)
        assert await first.adopt_once() == 1  # "queued"
        assert await first.adopt_once() == 0
        assert fanout.live("done") is None


class TestClaims:
    async def test_of_two_servers_exactly_one_adopts_a_stalled_delivery(
        self, store: SqliteInboxStore
    ) -> None:
        """Two servers look at once and both may read the released record; the claim is a
        compare-and-set on its claim time, so exactly one queues it."""
        one, two = stage(store), stage(store)
        await stored_delivery(store, "d1", updated_at_ms=RELEASED_MS)
        counts = await asyncio.gather(
            adopter(store, one, NOW_MS).adopt_once(), adopter(store, two, NOW_MS + 1).adopt_once()
        )
        assert sorted(counts) == [0, 1]
        owners = [s for s in (one, two) if s.live("d1") is not None]
        assert len(owners) == 1
        assert await store.get_delivery("d1") == owners[0].live("d1")

    async def test_a_fresh_claim_is_not_taken_over(self, store: SqliteInboxStore) -> None:
        """Once one server has claimed a delivery, another looking later leaves it: the
        claim time is its fresh progress."""
        one, two = stage(store), stage(store)
        await stored_delivery(store, "d1", updated_at_ms=RELEASED_MS)
        assert await adopter(store, one, NOW_MS).adopt_once() == 1
        assert await adopter(store, two, NOW_MS + 1).adopt_once() == 0
        assert two.live("d1") is None

    async def test_a_delivery_without_stored_recipients_fails_for_good(
        self, store: SqliteInboxStore
    ) -> None:
        """Accepted by a server that stored no recipients: nothing to resume from, so it is
        stored FAILED asking for a retry, and never claimed again."""
        fanout = stage(store)
        await stored_delivery(store, "old", updated_at_ms=RELEASED_MS, recipients=None)
        assert await adopter(store, fanout).adopt_once() == 0
        stored = await store.get_delivery("old")
        assert stored is not None
        assert stored.state == "failed"
        assert "retry PostMessage" in stored.error
        later = adopter(store, fanout, NOW_MS + 10 * int(STALL_S * 1000))
        assert await later.adopt_once() == 0
        assert await store.get_delivery("old") == stored


class TestRoom:
    async def test_adoption_stops_at_the_room_left_in_the_queue(
        self, store: SqliteInboxStore
    ) -> None:
        """Three released deliveries, room for two: two adopted, the third left stored and
        released for the next look."""
        fanout = stage(store, queue_size=2)
        for name in ("d1", "d2", "d3"):
            await stored_delivery(store, name, updated_at_ms=RELEASED_MS)
        assert await adopter(store, fanout).adopt_once() == 2
        assert fanout.room() == 0
        left = [
            r for r in await store.unfinished_deliveries(10) if fanout.live(r.delivery_id) is None
        ]
        assert [(r.updated_at_ms, r.state) for r in left] == [(RELEASED_MS, "running")]
        assert await adopter(store, fanout).adopt_once() == 0  # a full queue: no look at all
