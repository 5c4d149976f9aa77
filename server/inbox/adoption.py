"""Adopting fan-outs whose server stopped advancing them: nothing accepted is left behind.

A background fan-out belongs to the server that accepted it, which writes its progress
every `progress_interval_s`. If that server dies (kill -9, a lost node) the stored record
stops moving; a server that stops gracefully releases its deliveries instead (their claim
time becomes `RELEASED_MS`). Every server runs an `Adopter`: every `interval_s`, while its
fan-out queue has room, it lists the unfinished deliveries and adopts those released or
silent for `stall_after_s` — by a compare-and-set on the record's claim time
(`InboxStore.claim_delivery`), so of several servers looking at one stalled delivery exactly
one takes it — then loads the stored recipients and resumes from the stored progress.
Deliveries are idempotent, so re-delivering the chunks after the last progress write
changes nothing.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import replace

from server.inbox.fanout import RELEASED_MS, FanoutJob, FanoutStage
from server.runtime.errors import LoomError, ResourceExhausted
from server.runtime.logs import get_logger
from server.runtime.workers import WorkerPool
from storage.ports import InboxStore

__all__ = ["Adopter"]

_log = get_logger("inbox.adoption")
_NO_RECIPIENTS = "its recipients were not stored (accepted by an older server); retry PostMessage"


class Adopter:
    """Finds stalled or released deliveries and hands them to this server's fan-out stage."""

    def __init__(
        self,
        store: InboxStore,
        fanout: FanoutStage,
        *,
        stall_after_s: float,
        interval_s: float,
        now_ms: Callable[[], int],
    ) -> None:
        self._store = store
        self._fanout = fanout
        self._stall_ms = int(stall_after_s * 1000)
        self._interval_s = interval_s
        self._now_ms = now_ms
        self._runner = WorkerPool("inbox-adoption", 1, self._loop)
        self.adopted = 0
        """Deliveries this server has adopted (metrics, tests)."""

    def start(self) -> None:
        """Starts looking (the first look is immediate: a restarted server resumes at once)."""
        self._runner.start()

    async def stop(self) -> None:
        """Stops looking."""
        await self._runner.stop()

    async def _loop(self) -> None:
        while True:
            try:
                await self.adopt_once()
            except LoomError as exc:
                _log.warning("delivery adoption skipped", error=str(exc))
            await asyncio.sleep(self._interval_s)

    def _stalled(self, updated_at_ms: int) -> bool:
        return updated_at_ms == RELEASED_MS or self._now_ms() - updated_at_ms >= self._stall_ms

    async def adopt_once(self) -> int:
        """One look: adopts what is stalled, as far as the queue has room; how many."""
        room = self._fanout.room()
        if room <= 0:
            return 0
        adopted = 0
        for stored in await self._store.unfinished_deliveries(limit=4 * room):
            if adopted >= room:
                break
            if self._fanout.live(stored.delivery_id) is not None:
                continue
            if not self._stalled(stored.updated_at_ms) or stored.error == _NO_RECIPIENTS:
                continue
            claimed = replace(stored, state="running", error="", updated_at_ms=self._now_ms())
            if not await self._store.claim_delivery(claimed, stored.updated_at_ms):
                continue  # another server adopted it first
            recipients = await self._store.load_recipients(stored.delivery_id)
            if recipients is None:
                await self._store.save_delivery(
                    replace(claimed, state="failed", error=_NO_RECIPIENTS)
                )
                continue
            try:
                self._fanout.submit(FanoutJob(claimed, recipients))
            except ResourceExhausted:  # PostMessage filled the queue meanwhile: let it go
                await self._store.save_delivery(replace(claimed, updated_at_ms=RELEASED_MS))
                break
            adopted += 1
            _log.info("delivery adopted", delivery_id=stored.delivery_id, done=stored.done)
        self.adopted += adopted
        return adopted
