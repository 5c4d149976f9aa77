"""A fixed pool of asyncio worker tasks: the stage primitive of bounded background work.

Background stages (Inbox fan-out, trimming) are a bounded queue drained by a fixed number of
workers, so their concurrency is a setting, never a function of load. A lone background loop
(Inbox adoption, the health monitor) is a pool of one.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Coroutine
from typing import Any

__all__ = ["WorkerPool"]


class WorkerPool:
    """`size` tasks each running `work()`; started inside the loop, cancelled by `stop()`."""

    __slots__ = ("_name", "_size", "_tasks", "_work")

    def __init__(self, name: str, size: int, work: Callable[[], Coroutine[Any, Any, None]]) -> None:
        self._name = name
        self._size = max(1, size)
        self._work = work
        self._tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        """Starts the workers once (idempotent)."""
        if not self._tasks:
            self._tasks = [
                asyncio.create_task(self._work(), name=f"{self._name}-{i}")
                for i in range(self._size)
            ]

    async def stop(self) -> None:
        """Cancels every worker and waits until each has finished."""
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks = []
