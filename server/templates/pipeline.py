"""The clustering server (Crusher's Algorithm 2) as three bounded SEDA stages.

    SubmitEmails ─▶ [CPU queue] ─▶ CPU stage ─▶ [I/O queue] ─▶ I/O stage ─▶ [formation queue] ─▶ formation
                     bounded       process pool    bounded      asyncio tasks   bounded, deduped    pool + store
                     full: drop    parse, XPaths,  full: drop   store row h,    full: drop          fetch emails,
                     (counted)     MinHash, keys   (counted)    fetch s, t, n   (counted)           UDCAs, store

- **CPU stage**: `cpu_workers` processes (``forkserver``: never forked from a process
  holding gRPC threads), fed batches of up to `cpu_batch` emails by twice as many
  dispatcher tasks, so the event loop never parses and a worker never idles through a
  result's trip back. A batch crosses to the worker as plain tuples and comes back as
  plain tuples of what the I/O stage needs (`work.fingerprint_for_store`).
- **I/O stage** (CheckTemplateEligibility): `io_concurrency` tasks, each storing up to
  `io_batch` emails in one store call (email and user cells of every row key h), then per
  row: n >= k and no template → form; template older than A → re-form; n >= k and s >= S
  with a template → full-template cache (its next emails are ignored without touching the
  store). Loom's scheme also re-forms a row when an email with n >= k matches none of the
  row's templates: a second template of a shared layout forms the moment *its* emails
  reach k recipients.
- **Formation stage**: `server/templates/formation.py`.

Emails move between the stages a batch at a time (`queues.BatchQueue`): a request is
admitted with one call, a batch of results queued for the I/O stage with another. Every
queue is bounded; a full queue drops and counts, it never blocks a caller.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable
from concurrent.futures import Executor

from server.runtime import tracing
from server.runtime.errors import LoomError
from server.runtime.logs import get_logger
from server.runtime.workers import WorkerPool
from server.templates.cache import TtlLru
from server.templates.counters import Counters
from server.templates.formation import Formations
from server.templates.model import EmailIn, Parsed, TemplateValue, decode_templates
from server.templates.queues import BatchQueue
from server.templates.rows import FULL_ROW_FACTOR, RowStates, decide
from server.templates.schemes import SchemeParams, match_template
from server.templates.settings import TemplatesSettings
from server.templates.tokens import text_hashes
from server.templates.work import ToStore, fingerprint_batch, fingerprint_for_store
from storage import clock
from storage.ports import ClusterWrite, TemplateStore

__all__ = ["Counters", "Pipeline"]

_log = get_logger("templates.pipeline")
Fingerprinted = tuple[EmailIn, ToStore]


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
        self._key = settings.recipient_hash_key.encode()
        self.counters = Counters()
        self.cpu_queue = BatchQueue[EmailIn](settings.cpu_queue)
        self.io_queue = BatchQueue[Fingerprinted](settings.io_queue)
        self.rows = RowStates(
            settings.template_cache_size,
            settings.template_cache_ttl_s,
            settings.k_anonymity,
            clock,
        )
        """Each row's s, n, t as last counted or formed: the store counts only the others."""
        self._count_cap = max(settings.k_anonymity, settings.max_emails)
        self.full = TtlLru[bytes, int](settings.full_cache_size, settings.full_cache_ttl_s, clock)
        """Full-template cache: row key -> its email count s when it was found full."""
        self.templates = TtlLru[bytes, list[TemplateValue]](
            settings.template_cache_size, settings.template_cache_ttl_s, clock
        )
        self.formations = Formations(
            store,
            settings,
            executor,
            params=params,
            counters=self.counters,
            rows=self.rows,
            templates=self.templates,
            templates_of=self.templates_of,
            backlogged=self._cpu_backlogged,
            busy=lambda: self.cpu_queue.qsize() > 0,
            clock_s=clock,
        )
        self.erasing: dict[bytes, int] = {}
        """Recipient hashes being erased (each with how many erasures run for it): their
        emails still queued are not stored."""
        self._pools = [
            # Two batches in flight per process: one runs while the next is already there,
            # so a worker never idles through a result's trip back and a new hand-off.
            WorkerPool("templates-cpu", 2 * settings.cpu_workers, self._cpu_work),
            WorkerPool("templates-io", settings.io_concurrency, self._io_work),
            WorkerPool("templates-form", settings.formation_workers, self.formations.work),
            WorkerPool("templates-complete", 1, self.formations.complete),
        ]

    @property
    def settings(self) -> TemplatesSettings:
        """The service's settings (k, the row cap, the hash key)."""
        return self._s

    @property
    def executor(self) -> Executor:
        """The CPU stage's process pool (formations run there)."""
        return self._executor

    def start(self) -> None:
        """Starts every stage's tasks (inside the running loop)."""
        for pool in self._pools:
            pool.start()

    async def stop(self) -> None:
        """Stops every stage; queued emails are dropped (Crusher tolerates email loss)."""
        for pool in self._pools:
            await pool.stop()

    def admit(self, emails: list[EmailIn]) -> int:
        """Queues the longest prefix of `emails` the CPU stage has room for; how many that
        was (the rest are dropped and counted)."""
        link = tracing.current_link()
        if link is not None:
            emails = [dataclasses.replace(e, trace=link) for e in emails]
        accepted = self.cpu_queue.offer(emails)
        self.counters.accepted += accepted
        self.counters.dropped_cpu += len(emails) - accepted
        return accepted

    def formations_waiting(self) -> int:
        """Formations queued or deferred to the end of their row's re-formation interval."""
        return self.formations.waiting()

    def _cpu_backlogged(self) -> bool:
        """The CPU stage's queue is over half full (re-formations then wait)."""
        return self.cpu_queue.qsize() * 2 > self.cpu_queue.maxsize

    async def fingerprint(self, items: list[EmailIn]) -> list[Parsed | None]:
        """Runs a batch through the CPU pool (AnnotateEmail's path)."""
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

    async def _cpu_work(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            batch = await self.cpu_queue.take(self._s.cpu_batch)
            items = [
                (e.sender, e.recipient_id, e.subject, e.html_body, e.received_at_ms) for e in batch
            ]
            try:
                # Tracing on: the batch's own trace, linked to the requests of its emails.
                with tracing.linked(
                    "templates.cpu_batch", (e.trace for e in batch), {"loom.emails": len(batch)}
                ):
                    results = await loop.run_in_executor(
                        self._executor, fingerprint_for_store, items, self.params, self._key
                    )
            except Exception as exc:
                self.counters.failed += len(batch)
                _log.warning("cpu batch failed", error=type(exc).__name__, emails=len(batch))
                continue
            done = [(e, r) for e, r in zip(batch, results, strict=True) if r is not None]
            self.counters.failed += len(batch) - len(done)
            self.counters.fingerprinted += len(done)
            self.counters.dropped_io += len(done) - self.io_queue.offer(done)

    async def _io_work(self) -> None:
        while True:
            batch = await self.io_queue.take(self._s.io_batch)
            try:
                await self._check_eligibility(batch)
            except LoomError as exc:
                self.counters.failed += len(batch)
                _log.warning("store failed", error=type(exc).__name__, emails=len(batch))

    async def _check_eligibility(self, batch: list[Fingerprinted]) -> None:
        """Algorithm 2's CheckTemplateEligibility for a batch of emails.

        One store call writes the batch and counts only the rows whose cached state cannot
        decide (`RowStates.needs_count`); the others are decided from that state.
        """
        if self.erasing:  # emails of a recipient being erased, queued before the erasure
            batch = [item for item in batch if item[1].user not in self.erasing]
        writes: list[ClusterWrite] = []
        by_key: dict[bytes, list[Fingerprinted]] = {}
        matched: set[int] = set()  # emails (their ToStore's id) a full row found explained
        full = self.full
        for item in batch:
            email, parsed = item
            wrote = False
            for key in parsed.keys:
                if key in full and not self._store_in_full_row(key, email, parsed, matched):
                    continue
                writes.append(
                    ClusterWrite(
                        key=key, email_id=email.email_id, user=parsed.user, payload=parsed.payload
                    )
                )
                by_key.setdefault(key, []).append(item)
                wrote = True
            if not wrote:
                self.counters.skipped_full += 1
        self.counters.processed += len(batch)
        if not writes:
            return
        # A row with a formation queued or running is known to have n >= k: its state
        # (the count that triggered it, plus what was stored since) decides meanwhile.
        pending = self.formations.pending
        counted = [
            key
            for key in by_key
            if self.rows.needs_count(key) and not (key in pending and self.rows.get(key))
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
                self.formations.schedule(key, first=True)
            if d.reform:
                self.formations.schedule(key, first=False)
            if d.full:
                full.put(key, st.emails)
            busy = d.form or d.reform or self.formations.busy(key)
            if d.formed and self.params.scheme == "loom" and not busy:
                # (a formation on its way reads every email anyway)
                await self._check_explained(key, [e for e in emails if id(e[1]) not in matched])

    def _store_in_full_row(
        self, key: bytes, email: EmailIn, parsed: ToStore, matched: set[int]
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
        found, _ = match_template(
            templates, text_hashes(email.subject, parsed.text_list()), self.params
        )
        if found is None:
            return True
        matched.add(id(parsed))
        stored_since = self.formations.stored_since
        since = stored_since.get(key) or {}
        if found.email_count + since.get(found.template_id, 0) >= self._s.max_emails:
            return False
        since[found.template_id] = since.get(found.template_id, 0) + 1
        stored_since.put(key, since)
        return True

    async def _check_explained(self, key: bytes, emails: list[Fingerprinted]) -> None:
        """Re-forms a formed row (Loom) when one of its new emails fits none of its templates:
        a second template sharing the layout forms the moment its emails reach k."""
        if not emails:
            return
        templates = (await self.templates_of((key,)))[key]
        for email, parsed in emails:
            found, _ = match_template(
                templates, text_hashes(email.subject, parsed.text_list()), self.params
            )
            if found is None:
                self.formations.schedule(key, first=False)
                return
