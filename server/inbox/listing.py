"""Choosing one page out of a whole inbox: Yammer's "read it all, sort, filter".

Trimming bounds an inbox to a few thousand small rows, so sorting them in the service is
cheaper and simpler than any index the engine could keep (secondary indexes and
sorted-by-deletes were what sank Yammer's first design).
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable

from server.inbox import pagetoken
from server.inbox.model import InboxFilter, Page
from server.inbox.pagetoken import Cursor
from storage.ports import InboxEntry

__all__ = ["order_key", "select_page"]


def order_key(entry: InboxEntry) -> tuple[int, str]:
    """Listing order: newest activity first, thread id breaking ties (a total order)."""
    return (-entry.last_message_id, entry.thread_id)


def select_page(
    entries: Iterable[InboxEntry],
    *,
    inbox_id: str,
    flt: InboxFilter,
    after: Cursor | None,
    page_size: int,
) -> Page:
    """The `page_size` entries after `after` that pass `flt`, and the next page's token."""
    bound = after.sort_key() if after is not None else None
    candidates = (e for e in entries if flt.matches(e) and (bound is None or order_key(e) > bound))
    best = heapq.nsmallest(page_size + 1, candidates, key=order_key)
    page, more = best[:page_size], len(best) > page_size
    token = ""
    if more and page:
        last = page[-1]
        token = pagetoken.encode(Cursor(last.last_message_id, last.thread_id, flt), inbox_id)
    return Page(entries=page, next_page_token=token)
