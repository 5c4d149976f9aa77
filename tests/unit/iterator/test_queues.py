"""The levels' queues as a server sends to them: work by level, and quiet levels skipped."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest_asyncio

from server.iterator import model
from server.iterator.queues import LevelQueues
from server.iterator.stepping import fresh_task
from storage.ports import WorkQueue
from storage.sqlite.queue import SqliteWorkQueue

NAMES = ["user", "file"]


@pytest_asyncio.fixture
async def queue(tmp_path: Path) -> AsyncIterator[WorkQueue]:
    """A real embedded queue file (never a stand-in for an engine)."""
    opened = await SqliteWorkQueue.open(tmp_path / "queue.sqlite3", synchronous="NORMAL")
    try:
        yield opened
    finally:
        await opened.close()


class TestLevelQueues:
    async def test_announce_sends_each_task_to_its_levels_queue(self, queue: WorkQueue) -> None:
        """Step `seq` of each task goes to the queue named like the task's level."""
        levels = LevelQueues(queue, NAMES, poll_interval_s=0.05)
        tasks = [fresh_task("r", 0, (), 0), fresh_task("r.0", 1, (4,), 0)]
        await levels.announce("j1", tasks)
        for level, task in enumerate(tasks):
            (got,) = await queue.receive(NAMES[level], max_messages=4, visibility_s=5, wait_s=0)
            assert model.WorkMessage.loads(got.body) == model.WorkMessage("j1", task.task_id, 0)

    async def test_an_empty_level_is_skipped_until_work_is_sent_to_it(
        self, queue: WorkQueue
    ) -> None:
        """Found empty: quiet for a while, other levels unaffected; a send ends it at once."""
        levels = LevelQueues(queue, NAMES, poll_interval_s=10.0)
        assert not levels.quiet(1)
        levels.found_empty(1)
        assert levels.quiet(1)
        assert not levels.quiet(0)
        await levels.send(1, [model.WorkMessage("j1", "r.0", 0).dumps()])
        assert not levels.quiet(1)
