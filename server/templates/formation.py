"""The formation stage (Crusher's FormTemplate(h)): a bounded, deduplicated queue of rows and
`formation_workers` tasks, each holding a CPU-stage process only while its UDCAs run.

- A row is queued at most once; a trigger while it is queued is absorbed (the queued
  formation reads the row's emails anyway), a trigger while it runs marks it dirty and it
  runs once more afterwards (its read may have missed the trigger's email).
- First formations go ahead of re-formations: a new template is never stuck behind
  re-formations of busy rows.
- A re-formation (age >= A; Loom: growth, an unexplained email) runs at most once per
  `reform_interval_s` per row (a sooner one is deferred to the interval's end, not lost),
  and waits (up to `REFORM_YIELD_S`) while the CPU stage's queue is over half full: it
  shares the worker processes with fingerprinting, and taking them under load would turn
  into dropped emails. First formations never wait for the queue.
- While emails are queued for the CPU stage, one formation at a time takes a worker
  process (the others wait for it), and field rules (most of a formation's CPU) wait for
  an idle stage: a re-formation keeps the rules this process formed whatever their
  sample, and rules that must form (a new template) read a short sample
  (`schemes.busy_sample`). A row holding such rules is *provisional*: once the CPU stage
  has been idle for `IDLE_FOR_S` (`complete`), or once it has been provisional for
  `PROVISIONAL_MAX_S` however busy the stage (a load that never lets it idle), it re-forms
  from a full sample. Provisional rows count as waiting formations, so a caller waiting for
  formations to drain gets the full rules.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from concurrent.futures import Executor

from server.runtime.logs import get_logger
from server.templates.cache import TtlLru
from server.templates.counters import Counters
from server.templates.model import TemplateValue
from server.templates.rows import FULL_ROW_FACTOR, RowStates
from server.templates.schemes import SchemeParams
from server.templates.settings import TemplatesSettings
from server.templates.work import form_row
from storage import clock
from storage.ports import TemplateStore

__all__ = ["REFORM_YIELD_S", "Formations"]

_log = get_logger("templates.formation")
REFORM_YIELD_S = 2.0
"""Longest a re-formation waits for a backlogged CPU stage (so re-formations never starve)."""
_YIELD_POLL_S = 0.05
_IDLE_POLL_S = 0.1
"""How often `complete` looks at the CPU stage."""
IDLE_FOR_S = 0.5
"""How long the CPU stage stays idle before provisional rows re-form (a paced load leaves
the queue empty for moments between its requests: re-forming then would only find the
stage busy again and keep the short-sample rules)."""
PROVISIONAL_MAX_S = 60.0
"""Longest a row keeps rules read from a busy stage's short sample: then it re-forms from
the full sample even while the stage stays busy (one formation at a time still)."""


class Formations:
    """The formation queue and its scheduling; `work` is one formation task's loop."""

    def __init__(
        self,
        store: TemplateStore,
        settings: TemplatesSettings,
        executor: Executor,
        *,
        params: SchemeParams,
        counters: Counters,
        rows: RowStates,
        templates: TtlLru[bytes, list[TemplateValue]],
        templates_of: Callable[[tuple[bytes, ...]], Awaitable[dict[bytes, list[TemplateValue]]]],
        backlogged: Callable[[], bool],
        busy: Callable[[], bool],
        clock_s: Callable[[], float],
    ) -> None:
        self._store = store
        self._s = settings
        self._executor = executor
        self._params = params
        self._counters = counters
        self._rows = rows
        self._templates = templates
        """The template cache (annotation's): a formation here updates it at once."""
        self._templates_of = templates_of
        self._backlogged = backlogged
        """Whether the CPU stage is backlogged (re-formations then wait)."""
        self._busy = busy
        """Whether the CPU stage has work queued (field rules then wait for an idle stage)."""
        self._clock = clock_s
        # (0 first formation | 1 re-formation, arrival, row key)
        self.queue: asyncio.PriorityQueue[tuple[int, int, bytes]] = asyncio.PriorityQueue(
            max(1, settings.formation_queue)
        )
        self._arrivals = 0
        self.pending: set[bytes] = set()
        """Rows whose formation is queued or running (a row is queued at most once)."""
        self._running: set[bytes] = set()
        """Rows whose formation has fetched its emails (a trigger now may have been missed)."""
        self._dirty: dict[bytes, bool] = {}
        """Running rows triggered again meanwhile -> whether as a first formation."""
        self.timers: set[bytes] = set()
        """Rows whose re-formation is deferred to the end of their interval."""
        self._recent = TtlLru[bytes, float](
            settings.template_cache_size, settings.reform_interval_s, clock_s
        )
        self.stored_since = TtlLru[bytes, dict[str, int]](
            settings.full_cache_size, settings.full_cache_ttl_s, clock_s
        )
        """Full rows: emails stored per template since the row last formed (Loom)."""
        self._settled = TtlLru[bytes, dict[str, int]](
            settings.template_cache_size, settings.full_cache_ttl_s, clock_s
        )
        """Per row, the ids of the templates whose field rules this process formed, each
        with the count of emails its rules were read from: only those rules may carry over
        to a re-formation (never rules an earlier release or an erasure's re-formation left
        in the store), and only until their sample doubles."""
        self._busy_slot = asyncio.Lock()
        """Held by the one formation that runs while the CPU stage is busy."""
        self.provisional: dict[bytes, float] = {}
        """Rows whose field rules were read from a busy stage's short sample (each with when
        it first was): re-formed once the CPU stage is idle, or overdue (`complete`)."""

    def waiting(self) -> int:
        """Formations queued, deferred to the end of their row's re-formation interval, or
        waiting for an idle CPU stage (provisional rows not queued yet)."""
        later = sum(key not in self.pending and key not in self.timers for key in self.provisional)
        return self.queue.qsize() + len(self.timers) + later

    def running(self, key: bytes) -> bool:
        """Whether a formation of `key` has read (or is reading) the row's emails now."""
        return key in self._running

    def busy(self, key: bytes) -> bool:
        """Whether a formation of `key` is queued, running or deferred."""
        return key in self.pending or key in self.timers

    def schedule(self, key: bytes, *, first: bool) -> None:
        """Queues a formation of row `key` (see the module's rules)."""
        if not first:
            started = self._recent.get(key)
            if started is not None:
                if key not in self.timers:
                    self.timers.add(key)
                    delay = max(0.0, started + self._s.reform_interval_s - self._clock())
                    asyncio.get_running_loop().call_later(delay, self._deferred, key)
                return
        if key in self.pending:
            if key in self._running:
                self._dirty[key] = self._dirty.get(key, False) or first
            return
        self._arrivals += 1
        try:
            self.queue.put_nowait((0 if first else 1, self._arrivals, key))
        except asyncio.QueueFull:
            self._counters.dropped_formations += 1
            return
        self.pending.add(key)

    def _deferred(self, key: bytes) -> None:
        self.timers.discard(key)
        self._recent.pop(key)
        self.schedule(key, first=False)

    async def _yield_to_cpu_stage(self) -> None:
        waited = 0.0
        while self._backlogged() and waited < REFORM_YIELD_S:
            await asyncio.sleep(_YIELD_POLL_S)
            waited += _YIELD_POLL_S

    async def work(self) -> None:
        """One formation task: forms queued rows, one at a time, forever."""
        loop = asyncio.get_running_loop()
        while True:
            priority, _, key = await self.queue.get()
            if priority:
                await self._yield_to_cpu_stage()
            # Emails still queued for the CPU stage: one formation at a time takes a worker
            # process, and its field rules (most of its CPU) are kept or read from a short
            # sample until the stage is idle (as many provisional rows as the template cache
            # holds, at most).
            busy = self._busy()
            defer = (
                busy
                and len(self.provisional) < self._s.template_cache_size
                and not self._overdue(key)
            )
            if busy:
                await self._busy_slot.acquire()
            self._recent.put(key, self._clock())
            self._running.add(key)
            formed = False
            try:
                payloads = await self._store.get_emails(key, FULL_ROW_FACTOR * self._s.max_emails)
                previous = (await self._templates_of((key,)))[key]
                now_ms = clock.now_ms()
                result = await loop.run_in_executor(
                    self._executor,
                    form_row,
                    key,
                    payloads,
                    self._s.k_anonymity,
                    now_ms,
                    self._params,
                    previous,
                    self._settled.get(key) or {},
                    defer,
                )
                self._counters.formations += 1
                if result.templates:
                    known = {t.template_id for t in self._templates.get(key) or []}
                    sender = result.templates[0].sender
                    await self._store.put_templates(key, result.encoded, sender, now_ms)
                    self._templates.put(key, result.templates)
                    self._settled.put(key, result.read)
                    self.stored_since.pop(key)
                    self._counters.templates_formed += sum(
                        t.template_id not in known for t in result.templates
                    )
                    formed = True
                if 0 in result.read.values():  # rules read from a busy stage's short sample
                    self.provisional.setdefault(key, self._clock())
                else:
                    self.provisional.pop(key, None)
                loom = self._params.scheme == "loom"
                self._rows.formed(
                    key,
                    emails=result.emails,
                    users=result.users,
                    template_at_ms=now_ms if formed else None,
                    # Loom's scheme re-forms a row as it grows: templates sharing its layout
                    # split out once their own text is k-anonymous.
                    left_out=bool(result.left_out) and loom,
                    regrow=loom,
                )
            except Exception as exc:  # LoomError, a broken pool: logged, never raised
                _log.warning("formation failed", error=type(exc).__name__)
                self.provisional.pop(key, None)  # its next trigger re-forms it
            finally:
                if busy:
                    self._busy_slot.release()
                self.pending.discard(key)
                self._running.discard(key)
                dirty = self._dirty.pop(key, None)
                if dirty is not None:
                    # Still no template after a first trigger: that trigger keeps its priority.
                    self.schedule(key, first=dirty and not formed and self._untemplated(key))
                with contextlib.suppress(ValueError):
                    self.queue.task_done()

    async def complete(self) -> None:
        """Re-forms provisional rows, forever: every one not already queued once the CPU
        stage has been idle for `IDLE_FOR_S`, and an overdue one (`PROVISIONAL_MAX_S`)
        whatever the stage (their short-sample rules then re-form: `form_templates`)."""
        idle_since: float | None = None
        while True:
            await asyncio.sleep(_IDLE_POLL_S)
            now = self._clock()
            if self._busy():
                idle_since = None
            elif idle_since is None:
                idle_since = now
            idle = idle_since is not None and now - idle_since >= IDLE_FOR_S
            for key in self.provisional:  # oldest first: the overdue are a prefix
                if self.queue.full() or not (idle or self._overdue(key)):
                    break
                if not self.busy(key):
                    self.schedule(key, first=False)

    def _overdue(self, key: bytes) -> bool:
        """Whether row `key` has kept short-sample rules for `PROVISIONAL_MAX_S`."""
        since = self.provisional.get(key)
        return since is not None and self._clock() - since >= PROVISIONAL_MAX_S

    def forget(self, key: bytes) -> None:
        """Row `key`'s templates were re-formed elsewhere (an erasure): none is settled."""
        self._settled.pop(key)

    def _untemplated(self, key: bytes) -> bool:
        st = self._rows.get(key)
        return st is None or st.template_at_ms is None
