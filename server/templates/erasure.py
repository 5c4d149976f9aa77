"""Erasing recipients from TemplateInduction: their emails, their user cells, and what a
formed template kept of them.

The store holds a recipient only as a keyed hash: in the user cells of every row (cluster)
an email of theirs went to, and inside their stored emails' payloads. Rows are keyed by
cluster, not by recipient, so the erasure walks every user cell once (`scan_users`, values
stripped: the cheapest walk the store has) to find the rows that hold one of the hashes;
an email of theirs is only ever in such a row (its user cell is written with it, at the
same time, and expires with it). Each such row then:

1. loses the recipients' email cells (found by decoding the row's payloads) and user cells;
2. waits for a formation of the row already reading its emails to end (it may have read
   the erased emails), so that what step 3 writes is the last word;
3. keeps only what k distinct recipients gave it: when it has templates, it is formed
   again from the emails that remain (the ids of templates that continue are kept); when
   fewer than k distinct recipients remain, or the remaining emails form no template, its
   templates are deleted and the row is unformed again (it forms anew once k recipients'
   emails arrive).

From the acknowledgement on, emails of these recipients still queued in the pipeline are
not stored (`Pipeline.erasing`) until the operation ends. The engine's files are scrubbed
once the last delete has committed. Another replica's annotation cache may serve a dropped
template until its entry expires (`template_cache_ttl_s`); a template holds no identifier.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

from server.summary.operations import OperationRecord, OperationState
from server.templates.grouping import GroupingParams
from server.templates.model import decode_cluster_email, decode_templates, recipient_hash
from server.templates.pipeline import Pipeline
from server.templates.rows import FULL_ROW_FACTOR
from server.templates.schemes import SchemeParams
from server.templates.settings import TemplatesSettings
from server.templates.work import form_row
from storage import clock
from storage.ports import PortableTemplateStore, TemplatePortability, TemplateStore

__all__ = ["Erasure", "erase_offline", "erase_offline_users", "scheme_params"]

_USER_PAGE = 1000
_ROW_EMAILS = 10_000_000
"""Emails of one row an erasure reads: all of them (a row holds a few times S at most)."""
_FORMATION_POLL_S = 0.02


class Erasure:
    """Runs recipient erasures over a TemplateStore for one pipeline."""

    def __init__(
        self, store: TemplateStore, scans: TemplatePortability, pipeline: Pipeline
    ) -> None:
        self._store = store
        self._scans = scans
        self._pipeline = pipeline

    def hashes(self, recipient_ids: Sequence[str]) -> frozenset[bytes]:
        """The recipients' user cells' qualifiers, as the store holds them."""
        key = self._pipeline.settings.recipient_hash_key.encode()
        return frozenset(recipient_hash(r, key).encode() for r in recipient_ids)

    def hold(self, users: frozenset[bytes]) -> None:
        """From now on the pipeline stores no email of `users` (until `release`)."""
        erasing = self._pipeline.erasing
        for user in users:
            erasing[user] = erasing.get(user, 0) + 1

    def release(self, users: frozenset[bytes]) -> None:
        """Undoes one `hold`."""
        erasing = self._pipeline.erasing
        for user in users:
            left = erasing[user] - 1
            if left:
                erasing[user] = left
            else:
                del erasing[user]

    async def run(self, users: frozenset[bytes], op: OperationRecord) -> None:
        """The operation: find the rows, clean each, scrub. Progress: user cells read, then
        rows cleaned (`total` is known once the walk has found the rows)."""
        keys: set[bytes] = set()
        async for page in self._scans.scan_users(_USER_PAGE):
            keys.update(cell.key for cell in page if cell.user in users)
            op.done += len(page)
        op.total = op.done + len(keys)
        for key in sorted(keys):
            await self._clean_row(key, users)
            op.done += 1
        await self._store.scrub()

    async def _clean_row(self, key: bytes, users: frozenset[bytes]) -> None:
        store, p = self._store, self._pipeline
        cells = await store.get_email_cells(key, _ROW_EMAILS)
        theirs = [e for e, payload in cells if decode_cluster_email(payload).user.encode() in users]
        await store.erase_cells(key, theirs, users)
        # A formation's end has no event of its own; an erasure polls only its own rows.
        while p.formations.running(key):  # noqa: ASYNC110
            await asyncio.sleep(_FORMATION_POLL_S)
        p.rows.forget(key)
        p.formations.forget(key)
        p.full.pop(key)
        stored = await store.get_templates([key])
        if key not in stored:
            p.templates.pop(key)
            return
        s = p.settings
        counts = (await store.add_emails([], counted=[key]))[key]
        if counts.users >= s.k_anonymity:
            payloads = await store.get_emails(key, FULL_ROW_FACTOR * s.max_emails)
            now_ms = clock.now_ms()
            result = await asyncio.get_running_loop().run_in_executor(
                p.executor,
                form_row,
                key,
                payloads,
                s.k_anonymity,
                now_ms,
                p.params,
                decode_templates(stored[key]),
            )
            if result.templates:
                await store.put_templates(key, result.encoded, result.templates[0].sender, now_ms)
                p.templates.put(key, result.templates)
                return
        await store.delete_templates(key)
        p.templates.pop(key)


def scheme_params(t: TemplatesSettings) -> SchemeParams:
    """The clustering scheme's parameters from the service's settings (what a server uses)."""
    return SchemeParams(
        scheme=t.scheme,
        match=t.match_threshold,
        grouping=GroupingParams(
            present=t.text_present,
            absent=t.text_absent,
            min_own=t.own_text_min,
            min_own_share=t.own_text_share,
            own_share_cap=t.own_text_share_cap,
            own_over_shared=t.own_over_shared,
            cut_ratio=t.cut_across_ratio,
        ),
    )


async def erase_offline(
    store: PortableTemplateStore, settings: TemplatesSettings, recipient_ids: Sequence[str]
) -> OperationRecord:
    """Erases recipients from a store no server runs a pipeline on: runs to the end,
    re-forming rows in a thread; returns the ended operation (DONE, or raises)."""
    key = settings.recipient_hash_key.encode()
    users = frozenset(recipient_hash(r, key).encode() for r in recipient_ids)
    return await erase_offline_users(store, settings, users)


async def erase_offline_users(
    store: PortableTemplateStore, settings: TemplatesSettings, users: frozenset[bytes]
) -> OperationRecord:
    """`erase_offline` of recipients named by their keyed hashes, as the store holds them
    (``loom load`` and ``loom restore`` re-applying the erasure log, which names them so)."""
    op = OperationRecord(operation_id=uuid.uuid4().hex, kind="erase_recipients")
    with ThreadPoolExecutor(1) as executor:
        erasure = Erasure(
            store, store, Pipeline(store, settings, executor, scheme_params(settings))
        )
        await erasure.run(users, op)
    op.state = OperationState.DONE
    op.finished.set()
    return op
