"""From the chunk ledger to consumers: StreamObjects and AckObjects.

Workers write each emitted chunk into the ledger under a stable id (``<task>/<step>``) in
the same write that advances the marker, so a chunk exists exactly once whatever the queues
redelivered. Streams *lease* available chunks: a chunk goes to one stream at a time, so
several consumers of one job share its chunks. Without acks a chunk is settled as delivered
once its message has been written to the stream; a server that dies in between leaves it
leased, and it is sent again when the lease ends (at least once). With ``require_ack`` the
lease is the ack timeout: an unacknowledged chunk is re-sent under the same id, so a
consumer that remembers chunk ids sees every object exactly once.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import replace

from server.iterator import model
from server.iterator.model import JobSpec
from server.runtime.errors import FailedPrecondition
from storage.clock import now_ms
from storage.ports import ChunkRecord, JobStore

__all__ = ["AckResult", "Delivery"]

_SEND_LEASE_MS = 30_000
"""Without acks: how long a chunk being written to a stream stays leased to it."""
_MAX_LEASED_SCAN = 10_000
_MESSAGES_PER_LEASE = 4
"""Stream messages' worth of chunks one lease takes..."""
_LEASE_OBJECTS = 40_000
"""... and at least this many objects' worth: four of the largest chunks, whatever the
messages' size (a lease and its settlement cost the same for one chunk as for four)."""
_MAX_REMEMBERED = 200_000


def _messages(chunks: Sequence[ChunkRecord], max_objects: int) -> list[list[ChunkRecord]]:
    """Chunks cut into stream messages of at most `max_objects` (a chunk is never cut)."""
    out: list[list[ChunkRecord]] = []
    size = 0
    for chunk in chunks:
        if out and size + chunk.count <= max_objects:
            out[-1].append(chunk)
            size += chunk.count
        else:
            out.append([chunk])
            size = chunk.count
    return out


class AckResult(tuple[int, int, int]):
    """(objects acked, chunks acked, ignored ids)."""


class Delivery:
    """Streams the ledger to consumers and settles acknowledgements."""

    def __init__(self, store: JobStore, poll_s: float) -> None:
        self._store = store
        self._poll_s = poll_s
        self._events: dict[str, asyncio.Event] = {}
        self._background: set[asyncio.Task[None]] = set()
        self._counts: dict[str, dict[str, int]] = {}
        """job -> chunk id -> objects, of chunks this server leased and not yet saw acked:
        an ack by chunk id then settles without reading the chunk back."""

    def notify(self, job_id: str) -> None:
        """A chunk of `job_id` was committed in this server: wake its streams."""
        event = self._events.get(job_id)
        if event is not None:
            event.set()

    def _remember(self, job_id: str, chunks: Sequence[ChunkRecord]) -> None:
        counts = self._counts.setdefault(job_id, {})
        if len(counts) > _MAX_REMEMBERED:
            counts.clear()  # a hint only: a forgotten count is read back
        counts.update((c.chunk_id, c.count) for c in chunks)

    async def stream(
        self,
        job_id: str,
        spec: JobSpec,
        max_objects: int,
        *,
        on_idle: Callable[[], None] = lambda: None,
    ) -> AsyncIterator[list[ChunkRecord]]:
        """Lists of leased chunks (one stream message each) until the job is finished.

        Each lease takes up to `_MESSAGES_PER_LEASE` messages' worth of chunks in one round
        trip, and without acks they are settled together once all of them are written: per
        chunk, the ledger costs a fraction of a round trip rather than several. The next
        lease is already on its way while the consumer reads this one, and a settlement
        runs while the next messages are written (one at a time), so a stream waits on the
        engine's latency once per batch, not three times.
        """
        event = self._events.setdefault(job_id, asyncio.Event())
        lease_ms = spec.ack_timeout_s * 1000 if spec.require_ack else _SEND_LEASE_MS

        def lease() -> asyncio.Task[list[ChunkRecord]]:
            event.clear()  # a chunk committed from now on wakes a stream that found none
            return asyncio.create_task(
                self._store.lease_chunks(
                    job_id,
                    now_ms=now_ms(),
                    lease_ms=lease_ms,
                    max_objects=max(max_objects * _MESSAGES_PER_LEASE, _LEASE_OBJECTS),
                    max_chunks=1000,
                )
            )

        leasing = lease()
        settling: asyncio.Task[None] | None = None
        wait_s = self._poll_s
        try:
            while True:
                chunks = await leasing
                if chunks:
                    wait_s = self._poll_s
                    leasing = lease()
                    if spec.require_ack:
                        self._remember(job_id, chunks)
                    for message in _messages(chunks, max_objects):
                        yield message
                    if settling is not None:
                        await settling
                    settling = asyncio.create_task(self._written(job_id, spec, chunks))
                    continue
                if settling is not None:
                    await settling
                    settling = None
                on_idle()
                job = await self._store.get_job(job_id)
                if job is None or job.state in ("completed", "cancelled", "failed"):
                    self._counts.pop(job_id, None)
                    return
                # Chunks this server commits wake the stream; those of other processes and
                # replicas are found by polling: soon after chunks came, rarer while none do.
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(wait_s):
                        await event.wait()
                wait_s = min(self._poll_s * 4, wait_s * 2)
                leasing = lease()
        finally:
            # A stream that ends early leaves what it prefetched leased: sent again when
            # the lease ends. A settlement under way finishes on its own.
            leasing.cancel()
            if settling is not None:
                self._background.add(settling)
                settling.add_done_callback(self._background.discard)

    async def _written(self, job_id: str, spec: JobSpec, chunks: Sequence[ChunkRecord]) -> None:
        """After chunks were written to a stream: settled (without acks), re-sends counted."""
        if not spec.require_ack:
            await self._store.settle_chunks(
                job_id,
                [c.chunk_id for c in chunks],
                "delivered",
                {c.chunk_id: c.count for c in chunks},
            )
        resent = sum(1 for c in chunks if c.sends > 1)
        if resent:
            await self._store.add_counters(job_id, {model.RESENT_CHUNKS: resent})

    async def ack(
        self, job_id: str, spec: JobSpec, chunk_ids: Sequence[str], object_ids: Sequence[int]
    ) -> AckResult:
        """Settles acknowledged chunks (by id) and objects (by id); unknown ids ignored."""
        if not spec.require_ack:
            raise FailedPrecondition(f"job {job_id} was started without require_ack")
        chunks = objects = ignored = 0
        if chunk_ids:
            known = self._counts.get(job_id, {})
            counts = {c: known[c] for c in chunk_ids if c in known}
            chunks, objects = await self._store.settle_chunks(job_id, chunk_ids, "acked", counts)
            for c in counts:
                known.pop(c, None)
            ignored += len(set(chunk_ids)) - chunks
        if object_ids:
            more_objects, more_chunks, missing = await self._ack_objects(job_id, object_ids)
            objects += more_objects
            chunks += more_chunks
            ignored += missing
        if ignored:
            await self._store.add_counters(job_id, {model.IGNORED_ACKS: ignored})
        return AckResult((objects, chunks, ignored))

    async def _ack_objects(self, job_id: str, object_ids: Sequence[int]) -> tuple[int, int, int]:
        wanted = set(object_ids)
        acked = whole = repeated = 0
        for chunk in await self._store.leased_chunks(job_id, _MAX_LEASED_SCAN):
            flat = model.unpack(chunk.width, chunk.keys)
            ids = set(flat[chunk.width - 1 :: chunk.width])
            hit = ids & wanted
            if not hit:
                continue
            done = set(model.unpack(1, chunk.acked_keys))
            new = hit - done
            repeated += len(hit) - len(new)  # acked before: ignored, and counted so
            wanted -= hit
            if not new:
                continue
            done |= new
            if done >= ids:
                settled, _ = await self._store.settle_chunks(job_id, [chunk.chunk_id], "acked")
                if not settled:  # settled meanwhile (acked by chunk id): nothing new here
                    repeated += len(new)
                    continue
                whole += settled
            else:
                _, data = model.pack([(i,) for i in sorted(done)])
                updated = replace(chunk, acked_keys=data)
                if not await self._store.save_chunk_acks(job_id, updated, chunk.version):
                    wanted |= new  # raced with a lease or another ack: report as not acked
                    continue
            acked += len(new)
        return acked, whole, len(wanted) + repeated
