"""ThreadWeaver's protobuf <-> domain translation, with every input check.

Bounds: ids 1..512 bytes of UTF-8 (a gid or Gmail thread id is ~20), Message-IDs up to 998
bytes (RFC 5322's line limit), 1..1,000 messages per batch, 1..100 threads per resolve,
up to 1,000 team gids, max_threads 0 (default) ..100,000.
"""

from __future__ import annotations

from google.protobuf import timestamp_pb2
from loom.v1 import common_pb2, threadweaver_pb2

from server.runtime.validation import Violations
from server.threadweaver.model import MAX_ID_BYTES, Message, UnifiedThread, WeaveResult
from server.threadweaver.settings import ThreadWeaverSettings
from server.threadweaver.unweave import OperationView
from storage.ports import ThreadKey

__all__ = [
    "MAX_ID_BYTES",
    "MAX_RFC_BYTES",
    "gid_from_proto",
    "messages_from_proto",
    "operation_id_from_proto",
    "operation_to_proto",
    "result_to_proto",
    "single_message_from_proto",
    "thread_refs_from_proto",
    "unified_request_from_proto",
    "unified_to_proto",
    "unweave_refs_from_proto",
]

MAX_RFC_BYTES = 998
MAX_TEAM_GIDS = 1000
MAX_MAX_THREADS = 100_000
# 9999-12-31: beyond that a timestamp is a bug in the caller, not a date.
_MAX_MS = 253_402_300_799_999


def _thread(v: Violations, path: str, gid: str, thread_id: str) -> ThreadKey:
    v.identifier(f"{path}gid", gid, max_bytes=MAX_ID_BYTES)
    v.identifier(f"{path}thread_id", thread_id, max_bytes=MAX_ID_BYTES)
    return ThreadKey(gid, thread_id)


def _message(v: Violations, path: str, msg: threadweaver_pb2.WovenMessage) -> Message:
    thread = _thread(v, path, msg.gid, msg.thread_id)
    size = len(msg.rfc_message_id.encode("utf-8"))
    v.check(
        size <= MAX_RFC_BYTES, f"{path}rfc_message_id", f"must be at most {MAX_RFC_BYTES} bytes"
    )
    sent_ms = 0
    if v.check(msg.HasField("sent_at"), f"{path}sent_at", "is required"):
        sent_ms = msg.sent_at.seconds * 1000 + msg.sent_at.nanos // 1_000_000
        v.check(0 <= sent_ms <= _MAX_MS, f"{path}sent_at", "must lie between 1970 and 9999")
    return Message(thread=thread, rfc_message_id=msg.rfc_message_id, sent_at_ms=sent_ms)


def messages_from_proto(
    items: list[threadweaver_pb2.WovenMessage], *, field: str, limits: ThreadWeaverSettings
) -> list[Message]:
    """Validates and converts messages; raises InvalidArgument naming every bad field."""
    v = Violations()
    if v.count(field, items, minimum=1, maximum=limits.max_batch):
        out = [_message(v, f"{field}[{i}].", m) for i, m in enumerate(items)]
    v.raise_if_any()
    return out


def single_message_from_proto(request: threadweaver_pb2.WeaveMessageRequest) -> Message:
    """Validates the one message of WeaveMessage."""
    v = Violations()
    if v.check(request.HasField("message"), "message", "is required"):
        msg = _message(v, "message.", request.message)
    v.raise_if_any()
    return msg


def result_to_proto(result: WeaveResult) -> threadweaver_pb2.WeaveMessageResponse:
    """One weave result."""
    return threadweaver_pb2.WeaveMessageResponse(
        unified_thread_id=result.unified_thread_id, merged=result.merged
    )


def unified_request_from_proto(
    request: threadweaver_pb2.GetUnifiedThreadRequest, limits: ThreadWeaverSettings
) -> tuple[ThreadKey, frozenset[str] | None, int]:
    """(thread, team filter or None, max_threads) of a GetUnifiedThread call."""
    v = Violations()
    thread = _thread(v, "", request.gid, request.thread_id)
    if v.count("team_gids", request.team_gids, minimum=0, maximum=MAX_TEAM_GIDS):
        for i, gid in enumerate(request.team_gids):
            v.identifier(f"team_gids[{i}]", gid, max_bytes=MAX_ID_BYTES)
    v.check(
        0 <= request.max_threads <= MAX_MAX_THREADS,
        "max_threads",
        f"must lie in 0..{MAX_MAX_THREADS} (0 = {limits.default_max_threads})",
    )
    v.raise_if_any()
    team = frozenset(request.team_gids) if request.team_gids else None
    return thread, team, request.max_threads or limits.default_max_threads


def unified_to_proto(view: UnifiedThread) -> threadweaver_pb2.GetUnifiedThreadResponse:
    """A unified thread read."""
    stats = threadweaver_pb2.UnifiedThreadStats(message_count=view.message_count)
    if view.last_message_at_ms is not None:
        stats.last_message_at.CopyFrom(_timestamp(view.last_message_at_ms))
    return threadweaver_pb2.GetUnifiedThreadResponse(
        unified_thread_ids=view.unified_thread_ids,
        threads=[common_pb2.ThreadRef(gid=t.gid, thread_id=t.thread_id) for t in view.threads],
        stats=stats,
        oversized=view.oversized,
        thread_count=view.thread_count,
    )


def thread_refs_from_proto(
    refs: list[common_pb2.ThreadRef], limits: ThreadWeaverSettings
) -> list[ThreadKey]:
    """The threads of a ResolveThreads call."""
    v = Violations()
    out: list[ThreadKey] = []
    if v.count("threads", refs, minimum=1, maximum=limits.max_resolve):
        out = [_thread(v, f"threads[{i}].", r.gid, r.thread_id) for i, r in enumerate(refs)]
    v.raise_if_any()
    return out


MAX_UNWEAVE = 1000
_STATES = {
    "running": common_pb2.OPERATION_STATE_RUNNING,
    "done": common_pb2.OPERATION_STATE_DONE,
    "failed": common_pb2.OPERATION_STATE_FAILED,
}


def unweave_refs_from_proto(
    refs: list[common_pb2.ThreadRef], limits: ThreadWeaverSettings
) -> list[ThreadKey]:
    """The threads of an UnweaveThreads call (1..1,000)."""
    del limits
    v = Violations()
    out: list[ThreadKey] = []
    if v.count("threads", refs, minimum=1, maximum=MAX_UNWEAVE):
        out = [_thread(v, f"threads[{i}].", r.gid, r.thread_id) for i, r in enumerate(refs)]
    v.raise_if_any()
    return out


def gid_from_proto(gid: str) -> str:
    """The gid of an UnweaveMailbox call."""
    v = Violations()
    v.identifier("gid", gid, max_bytes=MAX_ID_BYTES)
    v.raise_if_any()
    return gid


def operation_id_from_proto(operation_id: str) -> str:
    """The id of a GetOperation call."""
    v = Violations()
    v.identifier("operation_id", operation_id, max_bytes=64)
    v.raise_if_any()
    return operation_id


def operation_to_proto(op: OperationView) -> common_pb2.Operation:
    """A removal's operation."""
    return common_pb2.Operation(
        operation_id=op.operation_id,
        kind=op.kind,
        state=_STATES[op.state],
        progress=common_pb2.Progress(done=op.done, total=op.total),
        error=op.error,
    )


def _timestamp(ms: int) -> timestamp_pb2.Timestamp:
    ts = timestamp_pb2.Timestamp()
    ts.FromMilliseconds(ms)
    return ts
