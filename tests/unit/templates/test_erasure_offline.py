"""`erase_offline` (what a load re-applies) on the real embedded store: the recipient's
cells go, a row left below k is unformed, a row still at k is formed again from the rest."""

from __future__ import annotations

import random
from pathlib import Path

from server.templates.erasure import erase_offline, scheme_params
from server.templates.model import decode_templates
from server.templates.settings import TemplatesSettings
from server.templates.work import fingerprint_for_store, form_row
from storage.ports import ClusterWrite
from storage.sqlite.templates import SqliteTemplateStore
from tests.templates_corpus import NAMES, receipt

K = 5


async def _formed_row(
    store: SqliteTemplateStore, settings: TemplatesSettings, sender: str, recipients: list[str]
) -> bytes:
    """Stores one receipt per recipient from `sender` and forms the row; its key."""
    params, key = scheme_params(settings), settings.recipient_hash_key.encode()
    rng = random.Random(sender)
    items = [(sender, r, *receipt(rng, NAMES[i % len(NAMES)]), 1) for i, r in enumerate(recipients)]
    stored = fingerprint_for_store(items, params, key)
    writes = []
    for i, s in enumerate(stored):
        assert s is not None
        writes.append(
            ClusterWrite(key=s.keys[0], email_id=f"{sender}-{i}", user=s.user, payload=s.payload)
        )
    row = writes[0].key
    assert all(w.key == row for w in writes)
    await store.add_emails(writes, counted=[])
    formed = form_row(row, [w.payload for w in writes], K, 1, params)
    assert formed.templates
    await store.put_templates(row, formed.encoded, sender, 1)
    return row


async def test_erase_offline_unforms_below_k_and_reforms_at_k(tmp_path: Path) -> None:
    settings = TemplatesSettings(k_anonymity=K, cpu_workers=1)
    store = await SqliteTemplateStore.open(tmp_path / "t.sqlite3", email_ttl_s=3600)
    try:
        low = await _formed_row(
            store, settings, "low@shop.example", [*(f"l{i}" for i in range(K - 1)), "x"]
        )
        high = await _formed_row(
            store, settings, "high@shop.example", [*(f"h{i}" for i in range(K)), "x"]
        )
        op = await erase_offline(store, settings, ["x", "unknown"])
        assert op.done == op.total
        assert op.total >= 2
        templates = await store.get_templates([low, high])
        assert low not in templates
        (kept,) = decode_templates(templates[high])
        assert kept.distinct_recipients == K
        counts = await store.add_emails([], counted=[low, high])
        assert (counts[low].users, counts[high].users) == (K - 1, K)
        again = await erase_offline(store, settings, ["x"])  # idempotent
        assert again.total == again.done
        assert (await store.get_templates([high])).keys() == {high}
    finally:
        await store.close()
