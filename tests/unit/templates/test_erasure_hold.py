"""While a recipient's erasure runs, the pipeline stores none of their queued emails; the
real I/O stage on the real embedded store (no fakes)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from server.templates.erasure import Erasure
from server.templates.model import EmailIn
from server.templates.pipeline import Pipeline
from server.templates.schemes import SchemeParams
from server.templates.settings import TemplatesSettings
from server.templates.work import ToStore, fingerprint_for_store
from storage.sqlite.templates import SqliteTemplateStore

HTML = "<html><body><p>Hi there,</p><p>Your order shipped.</p></body></html>"


async def test_held_recipients_emails_are_not_stored(store: SqliteTemplateStore) -> None:
    """Held: only the other recipient's email is stored; released: the next one is."""
    settings = TemplatesSettings(k_anonymity=5, cpu_workers=1)
    params = SchemeParams()
    with ThreadPoolExecutor(1) as executor:
        pipeline = Pipeline(store, settings, executor, params)
        erasure = Erasure(store, store, pipeline)
        key = settings.recipient_hash_key.encode()

        def fingerprinted(eid: str, recipient: str) -> tuple[EmailIn, ToStore]:
            email = EmailIn(eid, "s@shop.example", recipient, "Shipped", HTML, 1)
            (stored,) = fingerprint_for_store(
                [(email.sender, recipient, email.subject, HTML, 1)], params, key
            )
            assert stored is not None
            return email, stored

        erased, kept = fingerprinted("e1", "erased"), fingerprinted("e2", "kept")
        row = kept[1].keys[0]
        users = erasure.hashes(["erased"])
        erasure.hold(users)
        await pipeline._check_eligibility([erased, kept])
        assert [e for e, _ in await store.get_email_cells(row, 10)] == ["e2"]
        erasure.release(users)
        assert pipeline.erasing == {}
        later = fingerprinted("e3", "erased")
        await pipeline._check_eligibility([later])
        assert sorted(e for e, _ in await store.get_email_cells(row, 10)) == ["e2", "e3"]
