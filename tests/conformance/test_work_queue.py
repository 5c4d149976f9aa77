"""The WorkQueue contract, run unchanged on the SQLite queue and on SQS (ElasticMQ)."""

from __future__ import annotations

import asyncio

from storage.ports import QueuedMessage, WorkQueue
from tests.serving import eventually


async def test_sent_messages_are_received_and_hidden(work_queue: WorkQueue) -> None:
    """Each message is received once while hidden; queues do not mix."""
    await work_queue.send("a", [f"m{i}" for i in range(15)])
    await work_queue.send("b", ["other"])
    got: list[str] = []
    while len(got) < 15:
        batch = await work_queue.receive("a", max_messages=10, visibility_s=30, wait_s=1)
        assert batch, f"only {len(got)} of 15 received"
        got += [m.body for m in batch]
        assert all(m.receive_count == 1 for m in batch)
    assert sorted(got) == sorted(f"m{i}" for i in range(15))
    assert await work_queue.receive("a", max_messages=10, visibility_s=30, wait_s=0) == []
    other = await work_queue.receive("b", max_messages=10, visibility_s=30, wait_s=1)
    assert [m.body for m in other] == ["other"]


async def test_undeleted_message_reappears_and_counts_receives(work_queue: WorkQueue) -> None:
    """A message not deleted within its visibility comes back with a higher receive count."""
    await work_queue.send("a", ["again"])
    first = await work_queue.receive("a", max_messages=1, visibility_s=1, wait_s=1)
    assert [m.body for m in first] == ["again"]

    async def receive() -> list[QueuedMessage]:
        return await work_queue.receive("a", max_messages=1, visibility_s=30, wait_s=0)

    second = await eventually(receive, bool, timeout_s=15, interval_s=0.2)
    assert second[0].body == "again"
    assert second[0].receive_count == 2


async def test_deleted_message_never_reappears(work_queue: WorkQueue) -> None:
    """Deleting by receipt removes the message for good."""
    await work_queue.send("a", ["gone"])
    (m,) = await work_queue.receive("a", max_messages=1, visibility_s=1, wait_s=1)
    await work_queue.delete("a", [m.receipt])
    await asyncio.sleep(1.5)
    assert await work_queue.receive("a", max_messages=1, visibility_s=1, wait_s=0) == []


async def test_stale_receipt_cannot_delete_a_redelivery(work_queue: WorkQueue) -> None:
    """The receipt of an earlier delivery does not delete the message once redelivered."""
    await work_queue.send("a", ["twice"])
    (old,) = await work_queue.receive("a", max_messages=1, visibility_s=1, wait_s=1)

    async def receive() -> list[QueuedMessage]:
        return await work_queue.receive("a", max_messages=1, visibility_s=1, wait_s=0)

    await eventually(receive, bool, timeout_s=15, interval_s=0.2)
    await work_queue.delete("a", [old.receipt])
    again = await eventually(receive, bool, timeout_s=15, interval_s=0.2)
    assert again[0].body == "twice"
    await work_queue.delete("a", [again[0].receipt])


async def test_visibility_can_be_changed(work_queue: WorkQueue) -> None:
    """set_visibility(0) makes a received message visible again at once."""
    await work_queue.send("a", ["peek"])
    (m,) = await work_queue.receive("a", max_messages=1, visibility_s=60, wait_s=1)
    await work_queue.set_visibility("a", m.receipt, 0)

    async def receive() -> list[QueuedMessage]:
        return await work_queue.receive("a", max_messages=1, visibility_s=60, wait_s=0)

    again = await eventually(receive, bool, timeout_s=10, interval_s=0.1)
    assert again[0].body == "peek"
    assert await work_queue.depth("a") == 1


async def test_discard_deletes_the_messages_of_one_prefix(work_queue: WorkQueue) -> None:
    """discard removes every visible message whose body starts with the prefix, in that
    queue only; the others stay receivable at once (not left hidden), and again is 0."""
    await work_queue.send("a", [f'["job1","t{i}",0]' for i in range(12)])
    await work_queue.send("a", ['["job2","t0",0]', '["job10","t0",0]'])
    await work_queue.send("b", ['["job1","t0",0]'])
    assert await work_queue.discard("a", '["job1",') == 12
    assert await work_queue.discard("a", '["job1",') == 0
    got: list[str] = []
    for _ in range(3):
        batch = await work_queue.receive("a", max_messages=10, visibility_s=30, wait_s=1)
        got += [m.body for m in batch]
        if len(got) >= 2:
            break
    assert sorted(got) == ['["job10","t0",0]', '["job2","t0",0]']
    other = await work_queue.receive("b", max_messages=10, visibility_s=30, wait_s=1)
    assert [m.body for m in other] == ['["job1","t0",0]']


async def test_discard_of_an_empty_queue_is_nothing(work_queue: WorkQueue) -> None:
    """Discarding from an empty queue removes nothing and fails nothing."""
    assert await work_queue.discard("a", '["nojob",') == 0
    assert await work_queue.depth("a") == 0
