"""The formation stage's scheduling on the real embedded store (no fakes): while the CPU
stage is busy, one formation runs at a time and field rules read a short sample, which
re-forms once the stage is idle."""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import AsyncIterator, Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from server.runtime.workers import WorkerPool
from server.templates.formation import PROVISIONAL_MAX_S
from server.templates.model import EmailIn, TemplateValue, decode_templates
from server.templates.pipeline import Pipeline
from server.templates.schemes import SchemeParams, busy_sample
from server.templates.settings import TemplatesSettings
from server.templates.work import ToStore, fingerprint_for_store, form_row
from storage.sqlite.templates import SqliteTemplateStore
from tests.serving import eventually
from tests.templates_corpus import NAMES, receipt

SETTINGS = TemplatesSettings(k_anonymity=5, cpu_workers=1, reform_interval_s=0.0)
PARAMS = SchemeParams()


def _batch(sender: str, n: int, seed: int) -> list[tuple[EmailIn, ToStore]]:
    """`n` receipts from `sender`, each to its own recipient, fingerprinted for the I/O stage."""
    rng = random.Random(seed)
    key = SETTINGS.recipient_hash_key.encode()
    out = []
    for i in range(n):
        subject, html = receipt(rng, NAMES[i % 12])
        email = EmailIn(f"{sender}-{i}", sender, f"u{i}", subject, html, 1_000 + i)
        (stored,) = fingerprint_for_store(
            [(sender, f"u{i}", subject, html, 1_000 + i)], PARAMS, key
        )
        assert stored is not None
        out.append((email, stored))
    return out


@contextlib.asynccontextmanager
async def _tasks(*work: Callable[[], Coroutine[Any, Any, None]]) -> AsyncIterator[None]:
    """Runs each coroutine function as a task for the block (the stages' own `WorkerPool`),
    stopped after it."""
    pools = [WorkerPool(f"test-{i}", 1, w) for i, w in enumerate(work)]
    for pool in pools:
        pool.start()
    try:
        yield
    finally:
        for pool in pools:
            await pool.stop()


async def _rules(store: SqliteTemplateStore, row: bytes) -> tuple[TemplateValue, TemplateValue]:
    """The row's one stored template, and the one a formation over every stored email forms."""
    (stored,) = decode_templates((await store.get_templates([row]))[row])
    (whole,) = form_row(row, await store.get_emails(row, 100), 5, 0, PARAMS).templates
    return stored, whole


async def test_rules_read_on_a_busy_stage_re_form_once_it_is_idle(
    store: SqliteTemplateStore,
) -> None:
    """A row first formed while emails wait for the CPU stage gets its template at once,
    with rules read from a short sample, and counts as a waiting formation; once the queue
    is empty it re-forms, and its rules are those of a formation over every email."""
    batch = _batch("s@shop.example", 30, 11)
    row = batch[0][1].keys[0]
    with ThreadPoolExecutor(1) as executor:
        pipeline = Pipeline(store, SETTINGS, executor, PARAMS)
        formations = pipeline.formations
        async with _tasks(formations.work, formations.complete):
            pipeline.cpu_queue.offer([batch[0][0]])  # an email waiting: the stage is busy
            await pipeline._check_eligibility(batch)  # 30 emails at once: one first formation

            async def formed() -> bool:
                return bool(await store.get_templates([row])) and not formations.pending

            await eventually(formed, bool, what="a first formation")
            (busy,) = decode_templates((await store.get_templates([row]))[row])
            assert row in formations.provisional
            assert formations.waiting() == 1
            await asyncio.sleep(0.3)  # several polls of a busy stage: nothing re-forms
            assert decode_templates((await store.get_templates([row]))[row]) == [busy]

            await pipeline.cpu_queue.take(10)  # the stage is idle now

            async def completed() -> bool:
                return formations.waiting() == 0 and not formations.pending

            await eventually(completed, bool, what="the provisional row re-formed")
            final, whole = await _rules(store, row)
    assert final.template_id == busy.template_id
    assert busy.field_rules != whole.field_rules
    assert final.field_rules == whole.field_rules
    assert row not in formations.provisional
    assert busy_sample(5) < len(batch)


@pytest.mark.parametrize("busy", [True, False])
async def test_a_busy_stage_runs_one_formation_at_a_time(
    store: SqliteTemplateStore, busy: bool
) -> None:
    """Formations share the CPU stage's processes: while emails wait for it, one formation
    runs at a time; on an idle stage the formation tasks run side by side."""
    rows = [_batch(f"s{i}@shop.example", 6, i) for i in range(6)]
    with ThreadPoolExecutor(4) as executor:
        pipeline = Pipeline(store, SETTINGS, executor, PARAMS)
        formations = pipeline.formations
        if busy:
            pipeline.cpu_queue.offer([rows[0][0][0]])
        most = 0

        async def watch() -> None:
            nonlocal most
            while True:
                most = max(most, len(formations._running))
                await asyncio.sleep(0)

        async def left() -> int:
            return len(formations.pending)

        # Every row queued before a formation task starts: on an idle stage the tasks then
        # take rows side by side at once, however slowly the eligibility checks run.
        await pipeline._check_eligibility([item for row in rows for item in row])
        assert len(formations.pending) == len(rows)
        async with _tasks(*[formations.work] * 4, watch):
            await eventually(left, lambda n: n == 0, what="every row formed")
    formed = await store.get_templates([row[0][1].keys[0] for row in rows])
    assert len(formed) == len(rows)
    assert most == 1 if busy else most >= 2


async def test_short_sample_rules_re_form_when_overdue_however_busy_the_stage(
    store: SqliteTemplateStore,
) -> None:
    """A load that never lets the CPU stage idle: a provisional row still re-forms from the
    full sample once it has been provisional for `PROVISIONAL_MAX_S`, the stage busy."""
    batch = _batch("s@shop.example", 30, 11)
    row = batch[0][1].keys[0]
    now = [1_000.0]
    with ThreadPoolExecutor(1) as executor:
        pipeline = Pipeline(store, SETTINGS, executor, PARAMS, clock=lambda: now[0])
        formations = pipeline.formations
        async with _tasks(formations.work, formations.complete):
            pipeline.cpu_queue.offer([batch[0][0]])  # busy, and stays busy
            await pipeline._check_eligibility(batch)

            async def provisional() -> bool:
                return row in formations.provisional and not formations.pending

            await eventually(provisional, bool, what="a short-sample formation")
            (short,) = decode_templates((await store.get_templates([row]))[row])
            now[0] += PROVISIONAL_MAX_S - 1
            await asyncio.sleep(0.3)  # polls before it is due: nothing re-forms
            assert row in formations.provisional
            now[0] += 1

            async def completed() -> bool:
                return row not in formations.provisional and not formations.pending

            await eventually(completed, bool, what="the overdue row re-formed")
            assert pipeline.cpu_queue.qsize() == 1
            final, whole = await _rules(store, row)
    assert short.field_rules != whole.field_rules
    assert final.field_rules == whole.field_rules
