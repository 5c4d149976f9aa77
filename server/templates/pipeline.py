"""The clustering server (Crusher's Algorithm 2) as three bounded SEDA stages.

    SubmitEmails ─▶ [CPU queue] ─▶ CPU stage ─▶ [I/O queue] ─▶ I/O stage ─▶ [formation queue] ─▶ formation
                     bounded       process pool    bounded      asyncio tasks   bounded, deduped    pool + store
                     full: drop    parse, XPaths,  full: drop   store row h,    full: drop          fetch emails,
                     (counted)     MinHash, keys   (counted)    fetch s, t, n   (counted)           UDCAs, store

- **CPU stage**: `cpu_workers` processes (``forkserver``: never forked from a process
  holding gRPC threads), fed micro-batches of `cpu_batch` emails by as many dispatcher
  tasks, so at most that many batches are in the pool and the event loop never parses.
- **I/O stage** (CheckTemplateEligibility): `io_concurrency` tasks, each storing a
  micro-batch of up to `io_batch` emails in one store call (email and user cells of every
  row key h), then per row: n >= k and no template → form; template older than A →
  re-form; n >= k and s >= S with a template → full-template cache (its next emails are
  ignored without touching the store). Loom's scheme also re-forms a row when an email
  with n >= k matches none of the row's templates: a second template of a shared layout
  forms the moment *its* emails reach k recipients.
- **Formation stage**: `formation_workers` tasks; a row is queued at most once (a trigger
  while it is queued or running marks it dirty and it runs once more afterwards).

Every queue is bounded; a full queue drops and counts, it never blocks a caller.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import TypeVar

from server.runtime.errors import LoomError
from server.runtime.logs import get_logger
from server.runtime.workers import WorkerPool
from server.templates.cache import TtlLru
from server.templates.model import EmailIn, Parsed, TemplateValue, decode_templates
from server.templates.rows import FULL_ROW_FACTOR, RowStates, decide
from server.templates.schemes import SchemeParams, match_template
from server.templates.settings import TemplatesSettings
from server.templates.tokens import email_hashes
from server.templates.work import fingerprint_batch, form_row
from storage import clock
from storage.ports import ClusterWrite, TemplateStore

__all__ = ["Counters", "Pipeline"]

_log = get_logger("templates.pipeline")
T = TypeVar("T")
REFORM_YIELD_S = 2.0
"""Longest a re-formation waits for a backlogged CPU stage (so re-formations never starve)."""


@dataclass
class Counters:
    """Counts only: never an email, a recipient or a text."""

    accepted: int = 0
    dropped_cpu: int = 0
    dropped_io: int = 0
    dropped_formations: int = 0
    fingerprinted: int = 0
    processed: int = 0
    skipped_full: int = 0
    formations: int = 0
    templates_formed: int = 0
    failed: int = 0


class Pipeline:
    """The stages, their queues and caches; `templates_of` is shared with annotation."""

    def __init__(
        self,
        store: TemplateStore,
        settings: TemplatesSettings,
        executor: Executor,
        params: SchemeParams,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._store = store
        self._s = settings
        self._executor = executor
        self.params = params
        self._clock = clock
        self._key = settings.recipient_hash_key.encode()
        self.counters = Counters()
        self.cpu_queue: asyncio.Queue[EmailIn] = asyncio.Queue(max(1, settings.cpu_queue))
        self.io_queue: asyncio.Queue[tuple[EmailIn, Parsed]] = asyncio.Queue(
            max(1, settings.io_queue)
        )
        # (0 first formation | 1 re-formation, arrival, row key): first formations go first,
        # so a new template is never stuck behind re-formations of busy rows.
        self.form_queue: asyncio.PriorityQueue[tuple[int, int, bytes]] = asyncio.PriorityQueue(
            max(1, settings.formation_queue)
        )
        self._arrivals = 0
        self._pending: set[bytes] = set()
        """Rows whose formation is queued or running (a row is queued at most once)."""
        self._running: set[bytes] = set()
        """Rows whose formation has fetched its emails (a trigger now may have been missed)."""
        self._dirty: dict[bytes, bool] = {}
        """Running rows triggered again meanwhile -> whether as a first formation."""
        self._timers: set[bytes] = set()
        self.rows = RowStates(
            settings.template_cache_size,
            settings.template_cache_ttl_s,
            settings.k_anonymity,
            clock,
        )
        """Each row's s, n, t as last counted or formed: the store counts only the others."""
        self._count_cap = max(settings.k_anonymity, settings.max_emails)
        self._recent = TtlLru[bytes, float](
            settings.template_cache_size, settings.reform_interval_s, clock
        )
        self.full = TtlLru[bytes, int](settings.full_cache_size, settings.full_cache_ttl_s, clock)
        """Full-template cache: row key -> its email count s when it was found full."""
        self.templates = TtlLru[bytes, list[TemplateValue]](
            settings.template_cache_size, settings.template_cache_ttl_s, clock
        )
        self._stored_since = TtlLru[bytes, dict[str, int]](
            settings.full_cache_size, settings.full_cache_ttl_s, clock
        )
        """Full rows: emails stored per template since its row last formed (Loom)."""
        self._pools = [
            # Two batches in flight per process: one runs while the next is already there,
            # so a worker never idles through a result's trip back and a new hand-off.
            WorkerPool("templates-cpu", 2 * settings.cpu_workers, self._cpu_work),
            WorkerPool("templates-io", settings.io_concurrency, self._io_work),
            WorkerPool("templates-form", settings.formation_workers, self._form_work),
        ]

    def start(self) -> None:
        """Starts every stage's tasks (inside the running loop)."""
        for pool in self._pools:
            pool.start()

    async def stop(self) -> None:
        """Stops every stage; queued emails are dropped (Crusher tolerates email loss)."""
        for pool in self._pools:
            await pool.stop()

    def admit(self, email: EmailIn) -> bool:
        """Queues `email` for the CPU stage; False (and counted) when the queue is full."""
        try:
            self.cpu_queue.put_nowait(email)
        except asyncio.QueueFull:
            self.counters.dropped_cpu += 1
            return False
        self.counters.accepted += 1
        return True

    async def fingerprint(self, items: list[EmailIn]) -> list[Parsed | None]:
        """Runs a batch through the CPU pool (also AnnotateEmail's path)."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(
            self._executor, fingerprint_batch, items, self.params, self._key
        )

    async def templates_of(self, keys: tuple[bytes, ...]) -> dict[bytes, list[TemplateValue]]:
        """Each key's templates: from the cache, missing ones in one store call."""
        found: dict[bytes, list[TemplateValue]] = {}
        missing: list[bytes] = []
        for key in keys:
            cached = self.templates.get(key)
            if cached is None:
                missing.append(key)
            else:
                found[key] = cached
        if missing:
            stored = await self._store.get_templates(missing)
            for key in missing:
                data = stored.get(key)
                value = decode_templates(data) if data is not None else []
                ttl = None if value else self._s.absent_cache_ttl_s
                self.templates.put(key, value, ttl)
                found[key] = value
        return found

    @staticmethod
    def _drain(queue: asyncio.Queue[T], first: T, limit: int) -> list[T]:
        batch = [first]
        while len(batch) < limit:
            try:
                batch.append(queue.get_nowait())
            except asyncio.QueueEmpty:
                break
        return batch

    async def _cpu_work(self) -> None:
        while True:
            first = await self.cpu_queue.get()
            batch = self._drain(self.cpu_queue, first, self._s.cpu_batch)
            try:
                parsed = await self.fingerprint(batch)
            except Exception as exc:
                self.counters.failed += len(batch)
                _log.warning("cpu batch failed", error=type(exc).__name__, emails=len(batch))
                continue
            for email, result in zip(batch, parsed, strict=True):
                if result is None:
                    self.counters.failed += 1
                    continue
                self.counters.fingerprinted += 1
                try:
                    self.io_queue.put_nowait((email, result))
                except asyncio.QueueFull:
                    self.counters.dropped_io += 1

    async def _io_work(self) -> None:
        while True:
            first = await self.io_queue.get()
            batch = self._drain(self.io_queue, first, self._s.io_batch)
            try:
                await self._check_eligibility(batch)
            except LoomError as exc:
                self.counters.failed += len(batch)
                _log.warning("store failed", error=type(exc).__name__, emails=len(batch))

    async def _check_eligibility(self, batch: list[tuple[EmailIn, Parsed]]) -> None:
        """Algorithm 2's CheckTemplateEligibility for a micro-batch of emails.

        One store call writes the batch and counts only the rows whose cached state cannot
        decide (`RowStates.needs_count`); the others are decided from that state.
        """
        writes: list[ClusterWrite] = []
        by_key: dict[bytes, list[tuple[EmailIn, Parsed]]] = {}
        matched: set[int] = set()  # emails (their Parsed's id) a full row found explained
        for email, parsed in batch:
            wrote = False
            for key in parsed.keys:
                if key in self.full and not self._store_in_full_row(key, email, parsed, matched):
                    continue
                writes.append(
                    ClusterWrite(
                        key=key,
                        email_id=email.email_id,
                        user=parsed.user.encode(),
                        payload=parsed.payload,
                    )
                )
                by_key.setdefault(key, []).append((email, parsed))
                wrote = True
            self.counters.processed += 1
            if not wrote:
                self.counters.skipped_full += 1
        if not writes:
            return
        # A row with a formation queued or running is known to have n >= k: its state
        # (the count that triggered it, plus what was stored since) decides meanwhile.
        counted = [
            key
            for key in by_key
            if self.rows.needs_count(key) and not (key in self._pending and self.rows.get(key))
        ]
        counts = await self._store.add_emails(writes, counted, self._count_cap)
        s, now_ms = self._s, clock.now_ms()
        for key, emails in by_key.items():
            found = counts.get(key)
            st = (
                self.rows.counted(key, found)
                if found is not None
                else self.rows.stored(key, len(emails))
            )
            if st is None:  # evicted meanwhile: the row's next email counts it
                continue
            d = decide(st, s.k_anonymity, s.max_emails, int(s.reinduce_after_s * 1000), now_ms)
            if d.form:
                self._schedule(key, first=True)
            if d.reform:
                self._schedule(key, first=False)
            if d.full:
                self.full.put(key, st.emails)
            busy = d.form or d.reform or key in self._pending or key in self._timers
            if d.formed and self.params.scheme == "loom" and not busy:
                # (a formation on its way reads every email anyway)
                await self._check_explained(key, [e for e in emails if id(e[1]) not in matched])

    def _store_in_full_row(
        self, key: bytes, email: EmailIn, parsed: Parsed, matched: set[int]
    ) -> bool:
        """Whether a full row (s >= S, with templates) must still store this email.

        The paper's row is its template: no. Loom's row holds several templates sharing a
        layout and S bounds each of them: an email none of them explains (a rarer template's,
        still forming) or whose template holds fewer than S emails is stored, until the row
        holds `FULL_ROW_FACTOR` times S emails.
        """
        if self.params.scheme != "loom":
            return False
        size = self.full.get(key)
        templates = self.templates.get(key)
        if size is None or templates is None or size >= FULL_ROW_FACTOR * self._s.max_emails:
            return False
        found, _ = match_template(templates, email_hashes(email.subject, parsed.texts), self.params)
        if found is None:
            return True
        matched.add(id(parsed))
        since = self._stored_since.get(key) or {}
        if found.email_count + since.get(found.template_id, 0) >= self._s.max_emails:
            return False
        since[found.template_id] = since.get(found.template_id, 0) + 1
        self._stored_since.put(key, since)
        return True

    async def _check_explained(self, key: bytes, emails: list[tuple[EmailIn, Parsed]]) -> None:
        """Re-forms a formed row (Loom) when one of its new emails fits none of its templates:
        a second template sharing the layout forms the moment its emails reach k."""
        if not emails:
            return
        templates = (await self.templates_of((key,)))[key]
        for email, parsed in emails:
            found, _ = match_template(
                templates, email_hashes(email.subject, parsed.texts), self.params
            )
            if found is None:
                self._schedule(key, first=False)
                return

    def _schedule(self, key: bytes, *, first: bool) -> None:
        """Queues a formation of row `key` (at most one queued or running per row).

        A first formation runs at once (the template forms the moment n >= k). A
        re-formation (age >= A, or an email no template explains) runs at most once per
        `reform_interval_s` per row; one that comes sooner is deferred to the interval's
        end, so a busy shared row cannot monopolise the CPU stage.
        """
        if not first:
            started = self._recent.get(key)
            if started is not None:
                if key not in self._timers:
                    self._timers.add(key)
                    delay = max(0.0, started + self._s.reform_interval_s - self._clock())
                    asyncio.get_running_loop().call_later(delay, self._deferred, key)
                return
        if key in self._pending:
            # A queued formation will read this row's emails anyway; a running one may
            # have read them before this trigger's email was stored: it runs once more.
            if key in self._running:
                self._dirty[key] = self._dirty.get(key, False) or first
            return
        self._arrivals += 1
        try:
            self.form_queue.put_nowait((0 if first else 1, self._arrivals, key))
        except asyncio.QueueFull:
            self.counters.dropped_formations += 1
            return
        self._pending.add(key)

    def formations_waiting(self) -> int:
        """Formations queued or deferred to the end of their row's re-formation interval."""
        return self.form_queue.qsize() + len(self._timers)

    def _deferred(self, key: bytes) -> None:
        self._timers.discard(key)
        self._recent.pop(key)
        self._schedule(key, first=False)

    async def _yield_to_cpu_stage(self) -> None:
        """A re-formation waits while the CPU stage is backlogged (its queue over half full),
        up to `REFORM_YIELD_S`: it shares the worker processes with fingerprinting, and
        taking them under load turns into dropped emails. First formations never wait."""
        waited = 0.0
        while self.cpu_queue.qsize() * 2 > self.cpu_queue.maxsize and waited < REFORM_YIELD_S:
            await asyncio.sleep(0.05)
            waited += 0.05

    async def _form_work(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            priority, _, key = await self.form_queue.get()
            if priority:
                await self._yield_to_cpu_stage()
            self._recent.put(key, self._clock())
            self._running.add(key)
            formed = False
            try:
                payloads = await self._store.get_emails(key, FULL_ROW_FACTOR * self._s.max_emails)
                previous = (await self.templates_of((key,)))[key]
                now_ms = clock.now_ms()
                result = await loop.run_in_executor(
                    self._executor,
                    form_row,
                    key,
                    payloads,
                    self._s.k_anonymity,
                    now_ms,
                    self.params,
                    previous,
                )
                self.counters.formations += 1
                if result.templates:
                    known = {t.template_id for t in self.templates.get(key) or []}
                    sender = result.templates[0].sender
                    await self._store.put_templates(key, result.encoded, sender, now_ms)
                    self.templates.put(key, result.templates)
                    self._stored_since.pop(key)
                    self.counters.templates_formed += sum(
                        t.template_id not in known for t in result.templates
                    )
                    formed = True
                self.rows.formed(
                    key,
                    emails=result.emails,
                    users=result.users,
                    template_at_ms=now_ms if formed else None,
                    # Loom's scheme re-forms a row as it grows: templates sharing its layout
                    # split out once their own text is k-anonymous.
                    left_out=bool(result.left_out) and self.params.scheme == "loom",
                    regrow=self.params.scheme == "loom",
                )
            except Exception as exc:  # LoomError, a broken pool: logged, never raised
                _log.warning("formation failed", error=type(exc).__name__)
            finally:
                self._pending.discard(key)
                self._running.discard(key)
                dirty = self._dirty.pop(key, None)
                if dirty is not None:
                    # Still no template after a first trigger: that trigger keeps its priority.
                    self._schedule(key, first=dirty and not formed and self._untemplated(key))
                with contextlib.suppress(ValueError):
                    self.form_queue.task_done()

    def _untemplated(self, key: bytes) -> bool:
        st = self.rows.get(key)
        return st is None or st.template_at_ms is None
