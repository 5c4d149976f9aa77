"""Inbox's protobuf <-> domain translation, with every input check.

Bounds: ids 1..256 bytes of UTF-8, message_id > 0, 1..`max_recipients`
recipients (default 1,000,000), page_size 0..500 (0 = the default), 1..1,000 thread ids
per MarkThreads, page tokens issued by this service for this inbox and filter.
"""

from __future__ import annotations

from loom.v1 import common_pb2, inbox_pb2

from server.inbox import pagetoken
from server.inbox.model import InboxFilter, MarkResult, Page, Post, PostResult
from server.inbox.pagetoken import Cursor
from server.inbox.settings import InboxSettings
from server.inbox.watch import ChangesPage, Event, Watching
from server.inbox.watchtoken import Resume
from server.runtime.validation import Violations
from storage.ports import DeliveryRecord, InboxOperation

__all__ = [
    "MAX_ID_BYTES",
    "MAX_MARK_THREADS",
    "MAX_PAGE_SIZE",
    "changes_from_proto",
    "changes_to_proto",
    "delete_inbox_from_proto",
    "delete_threads_from_proto",
    "delivery_id_from_proto",
    "delivery_to_proto",
    "event_to_proto",
    "inbox_id_from_proto",
    "list_from_proto",
    "mark_from_proto",
    "mark_to_proto",
    "operation_id_from_proto",
    "operation_to_proto",
    "page_to_proto",
    "post_from_proto",
    "post_to_proto",
    "remove_from_proto",
    "remove_to_proto",
    "watch_from_proto",
]

MAX_ID_BYTES = 256
MAX_PAGE_SIZE = 500
MAX_MARK_THREADS = 1000
MAX_CHANGES_PAGE = 1000
DEFAULT_CHANGES_PAGE = 100
# One response should not carry a million violations: report the first few bad ids.
_MAX_ID_VIOLATIONS = 20

_OPERATION_STATES = {
    "running": common_pb2.OPERATION_STATE_RUNNING,
    "done": common_pb2.OPERATION_STATE_DONE,
    "failed": common_pb2.OPERATION_STATE_FAILED,
}
_STATES = {
    "running": inbox_pb2.DELIVERY_STATE_RUNNING,
    "done": inbox_pb2.DELIVERY_STATE_DONE,
    "failed": inbox_pb2.DELIVERY_STATE_FAILED,
}
_FILTERS = {
    inbox_pb2.INBOX_FILTER_UNSPECIFIED: InboxFilter.ALL,
    inbox_pb2.INBOX_FILTER_ALL: InboxFilter.ALL,
    inbox_pb2.INBOX_FILTER_UNREAD: InboxFilter.UNREAD,
    inbox_pb2.INBOX_FILTER_READ: InboxFilter.READ,
}


def _all_plainly_valid(ids: list[str]) -> bool:
    """One pass in C over the whole list: non-empty, short enough, no NUL.

    A UTF-8 character takes at most 4 bytes, so ids of at most MAX_ID_BYTES // 4 characters
    need no encoding. A 20,000-id announcement checks in ~1 ms instead of ~10 ms of
    per-id Python on the event loop (which starved GetUnreadCount under load).
    """
    return (
        bool(ids)
        and min(map(len, ids)) > 0
        and max(map(len, ids)) <= MAX_ID_BYTES // 4
        and "\x00" not in "".join(ids)
    )


def _ids(v: Violations, field: str, ids: list[str]) -> None:
    if _all_plainly_valid(ids):
        return
    bad = 0
    for i, value in enumerate(ids):
        if not v.identifier(f"{field}[{i}]", value, max_bytes=MAX_ID_BYTES):
            bad += 1
            if bad >= _MAX_ID_VIOLATIONS:
                v.add(field, f"more bad ids follow; only the first {bad} are listed")
                return


# 2^53 - 1: the largest integer every client language holds exactly (JavaScript's safe
# integer), and the range within which the Cassandra store derives write timestamps.
MAX_MESSAGE_ID = (1 << 53) - 1


def post_from_proto(request: inbox_pb2.PostMessageRequest, limits: InboxSettings) -> Post:
    """A validated post; raises InvalidArgument naming every bad field."""
    v = Violations()
    v.identifier("thread_id", request.thread_id, max_bytes=MAX_ID_BYTES)
    v.check(
        0 < request.message_id <= MAX_MESSAGE_ID,
        "message_id",
        f"must lie in 1..{MAX_MESSAGE_ID} (2^53 - 1)",
    )
    v.identifier("sender_inbox_id", request.sender_inbox_id, max_bytes=MAX_ID_BYTES)
    recipients = list(request.recipient_inbox_ids)
    if v.count("recipient_inbox_ids", recipients, minimum=1, maximum=limits.max_recipients):
        _ids(v, "recipient_inbox_ids", recipients)
    v.raise_if_any()
    return Post(request.thread_id, request.message_id, request.sender_inbox_id, recipients)


def post_to_proto(result: PostResult) -> inbox_pb2.PostMessageResponse:
    """PostMessage's answer."""
    return inbox_pb2.PostMessageResponse(
        delivered=result.delivered,
        delivery_id=result.delivery_id,
        inboxes_updated=result.inboxes_updated,
    )


def delivery_id_from_proto(request: inbox_pb2.GetDeliveryRequest) -> str:
    """The delivery id of a GetDelivery call."""
    v = Violations()
    v.identifier("delivery_id", request.delivery_id, max_bytes=MAX_ID_BYTES)
    v.raise_if_any()
    return request.delivery_id


def delivery_to_proto(record: DeliveryRecord) -> inbox_pb2.Delivery:
    """A delivery's progress."""
    return inbox_pb2.Delivery(
        delivery_id=record.delivery_id,
        state=_STATES[record.state],
        progress=common_pb2.Progress(done=record.done, total=record.total),
        error=record.error,
    )


def inbox_id_from_proto(inbox_id: str) -> str:
    """A validated inbox id (GetUnreadCount)."""
    v = Violations()
    v.identifier("inbox_id", inbox_id, max_bytes=MAX_ID_BYTES)
    v.raise_if_any()
    return inbox_id


def list_from_proto(
    request: inbox_pb2.ListInboxRequest,
) -> tuple[str, InboxFilter, int, Cursor | None]:
    """(inbox_id, filter, page_size (0 = default), cursor) of a ListInbox call."""
    v = Violations()
    inbox_ok = v.identifier("inbox_id", request.inbox_id, max_bytes=MAX_ID_BYTES)
    flt = _FILTERS.get(request.filter)
    v.check(flt is not None, "filter", "must be ALL, UNREAD or READ")
    v.check(0 <= request.page_size <= MAX_PAGE_SIZE, "page_size", f"must lie in 0..{MAX_PAGE_SIZE}")
    cursor = None
    if request.page_token and inbox_ok:
        try:
            cursor = pagetoken.decode(request.page_token, request.inbox_id)
        except ValueError as exc:
            v.add("page_token", str(exc))
        else:
            v.check(
                flt is None or cursor.filter is flt,
                "page_token",
                "was issued for another filter",
            )
    v.raise_if_any()
    assert flt is not None
    return request.inbox_id, flt, request.page_size, cursor


def page_to_proto(page: Page) -> inbox_pb2.ListInboxResponse:
    """One ListInbox page."""
    return inbox_pb2.ListInboxResponse(
        entries=[
            inbox_pb2.InboxEntry(
                thread_id=e.thread_id, last_message_id=e.last_message_id, is_read=e.is_read
            )
            for e in page.entries
        ],
        next_page_token=page.next_page_token,
        sync_token=page.sync_token,
    )


def watch_from_proto(
    request: inbox_pb2.WatchInboxRequest, watching: Watching
) -> tuple[str, Resume | None]:
    """(inbox_id, where to resume or None for "from now") of a WatchInbox call; a token
    past the change log's retention raises ResyncRequired."""
    v = Violations()
    inbox_ok = v.identifier("inbox_id", request.inbox_id, max_bytes=MAX_ID_BYTES)
    resume = _resume(
        v,
        "resume_token",
        request.resume_token,
        request.inbox_id,
        watching=watching,
        inbox_ok=inbox_ok,
    )
    v.raise_if_any()
    return request.inbox_id, resume


def changes_from_proto(
    request: inbox_pb2.GetInboxChangesRequest, watching: Watching
) -> tuple[str, Resume, int]:
    """(inbox_id, where to continue, page size) of a GetInboxChanges call."""
    v = Violations()
    inbox_ok = v.identifier("inbox_id", request.inbox_id, max_bytes=MAX_ID_BYTES)
    v.check(
        bool(request.since_token),
        "since_token",
        "is required (from WatchInbox, an earlier page or ListInbox's sync_token)",
    )
    v.check(
        0 <= request.page_size <= MAX_CHANGES_PAGE,
        "page_size",
        f"must lie in 0..{MAX_CHANGES_PAGE}",
    )
    resume = _resume(
        v,
        "since_token",
        request.since_token,
        request.inbox_id,
        watching=watching,
        inbox_ok=inbox_ok,
    )
    v.raise_if_any()
    assert resume is not None
    return request.inbox_id, resume, request.page_size or DEFAULT_CHANGES_PAGE


def _resume(
    v: Violations, field: str, token: str, inbox_id: str, *, watching: Watching, inbox_ok: bool
) -> Resume | None:
    if not token or not inbox_ok:
        return None
    try:
        return watching.resume_point(inbox_id, token)
    except ValueError as exc:
        v.add(field, str(exc))
        return None


_EVENT_KINDS = {
    "delivered": inbox_pb2.INBOX_EVENT_KIND_DELIVERED,
    "marked_read": inbox_pb2.INBOX_EVENT_KIND_MARKED_READ,
    "marked_unread": inbox_pb2.INBOX_EVENT_KIND_MARKED_UNREAD,
    "removed": inbox_pb2.INBOX_EVENT_KIND_REMOVED,
    "deleted": inbox_pb2.INBOX_EVENT_KIND_DELETED,
    "inbox_deleted": inbox_pb2.INBOX_EVENT_KIND_INBOX_DELETED,
}


def event_to_proto(event: Event) -> inbox_pb2.InboxEvent:
    """One WatchInbox / GetInboxChanges event."""
    c = event.change
    if c is None:
        return inbox_pb2.InboxEvent(
            resume_token=event.resume_token,
            kind=inbox_pb2.INBOX_EVENT_KIND_SYNCED,
            unread_count=event.unread_count,
            changed_at_ms=event.changed_at_ms,
        )
    return inbox_pb2.InboxEvent(
        resume_token=event.resume_token,
        kind=_EVENT_KINDS[c.kind],
        thread_ids=list(c.thread_ids),
        message_id=c.message_id,
        unread_count=event.unread_count,
        all_threads=c.all_threads,
        changed_at_ms=event.changed_at_ms,
    )


def changes_to_proto(page: ChangesPage) -> inbox_pb2.GetInboxChangesResponse:
    """One GetInboxChanges page."""
    return inbox_pb2.GetInboxChangesResponse(
        events=[event_to_proto(e) for e in page.events],
        next_token=page.next_token,
        has_more=page.has_more,
        unread_count=page.unread_count,
    )


def mark_from_proto(request: inbox_pb2.MarkThreadsRequest) -> tuple[str, list[str] | None, bool]:
    """(inbox_id, thread ids or None for the whole inbox, read) of a MarkThreads call."""
    v = Violations()
    v.identifier("inbox_id", request.inbox_id, max_bytes=MAX_ID_BYTES)
    target = request.WhichOneof("target")
    thread_ids: list[str] | None = None
    if target == "threads":
        thread_ids = list(request.threads.thread_ids)
        if v.count("threads.thread_ids", thread_ids, minimum=1, maximum=MAX_MARK_THREADS):
            _ids(v, "threads.thread_ids", thread_ids)
    elif target == "all":
        v.check(request.all, "all", "must be true when set")
    else:
        v.add("target", "set threads or all")
    v.raise_if_any()
    return request.inbox_id, thread_ids, request.read


def mark_to_proto(result: MarkResult) -> inbox_pb2.MarkThreadsResponse:
    """MarkThreads' answer."""
    return inbox_pb2.MarkThreadsResponse(changed=result.changed, unread_count=result.unread_count)


def _thread_ids(v: Violations, field: str, ids: list[str]) -> None:
    if v.count(field, ids, minimum=1, maximum=MAX_MARK_THREADS):
        _ids(v, field, ids)


def delete_threads_from_proto(request: inbox_pb2.DeleteThreadsRequest) -> list[str]:
    """The distinct thread ids of a DeleteThreads call."""
    v = Violations()
    thread_ids = list(request.thread_ids)
    _thread_ids(v, "thread_ids", thread_ids)
    v.raise_if_any()
    return list(dict.fromkeys(thread_ids))


def remove_from_proto(request: inbox_pb2.RemoveThreadsRequest) -> tuple[str, list[str]]:
    """(inbox_id, distinct thread ids) of a RemoveThreads call."""
    v = Violations()
    v.identifier("inbox_id", request.inbox_id, max_bytes=MAX_ID_BYTES)
    thread_ids = list(request.thread_ids)
    _thread_ids(v, "thread_ids", thread_ids)
    v.raise_if_any()
    return request.inbox_id, list(dict.fromkeys(thread_ids))


def remove_to_proto(result: MarkResult) -> inbox_pb2.RemoveThreadsResponse:
    """RemoveThreads' answer."""
    return inbox_pb2.RemoveThreadsResponse(removed=result.changed, unread_count=result.unread_count)


def delete_inbox_from_proto(request: inbox_pb2.DeleteInboxRequest) -> str:
    """The inbox id of a DeleteInbox call."""
    return inbox_id_from_proto(request.inbox_id)


def operation_id_from_proto(request: common_pb2.GetOperationRequest) -> str:
    """The operation id of a GetOperation call."""
    v = Violations()
    v.identifier("operation_id", request.operation_id, max_bytes=MAX_ID_BYTES)
    v.raise_if_any()
    return request.operation_id


def operation_to_proto(op: InboxOperation) -> common_pb2.Operation:
    """A background operation's progress."""
    return common_pb2.Operation(
        operation_id=op.operation_id,
        kind=op.kind,
        state=_OPERATION_STATES[op.state],
        progress=common_pb2.Progress(done=op.done, total=op.total),
        error=op.error,
    )
