"""The ThreadWeaver workload's requests, built before any clock starts.

Pure (unit-tested without a server): the corpus's messages as WeaveMessages batches, the
start threads and their GetUnifiedThread requests, ResolveThreads inbox pages, and the thread
set of an answer. Building them up front keeps the load generator, which shares the cores
with the server, on the wire rather than in protobuf construction.
"""

from __future__ import annotations

from collections.abc import Sequence

from google.protobuf.timestamp_pb2 import Timestamp
from loom.v1 import common_pb2, threadweaver_pb2

from loadtest.corpora.threadweaver import Corpus, ThreadKey, WovenMessage

__all__ = ["discussion_starts", "get_requests", "resolve_pages", "thread_keys", "weave_batches"]


def _timestamp(ms: int) -> Timestamp:
    return Timestamp(seconds=ms // 1000, nanos=(ms % 1000) * 1_000_000)


def weave_batches(
    messages: Sequence[WovenMessage], batch_size: int
) -> list[threadweaver_pb2.WeaveMessagesRequest]:
    """``WeaveMessagesRequest``s of ``batch_size`` messages each (the last may be shorter)."""
    if batch_size < 1:
        raise ValueError("batch_size must be ≥ 1")
    out: list[threadweaver_pb2.WeaveMessagesRequest] = []
    for start in range(0, len(messages), batch_size):
        req = threadweaver_pb2.WeaveMessagesRequest()
        for m in messages[start : start + batch_size]:
            item = req.messages.add(
                gid=m.gid, thread_id=m.thread_id, rfc_message_id=m.rfc_message_id
            )
            item.sent_at.CopyFrom(_timestamp(m.sent_at_ms))
        out.append(req)
    return out


def discussion_starts(corpus: Corpus) -> list[ThreadKey]:
    """Team members' centi-threads of the long discussions: the slow case for the BFS."""
    team = set(corpus.team_gids)
    return [
        (gid, tid)
        for d in corpus.discussions
        for gid, tids in d.threads.items()
        if gid in team
        for tid in tids
    ]


def get_requests(
    starts: Sequence[ThreadKey], team_gids: Sequence[str]
) -> list[threadweaver_pb2.GetUnifiedThreadRequest]:
    """One ``GetUnifiedThreadRequest`` per start thread, team-filtered."""
    team = list(team_gids)
    return [
        threadweaver_pb2.GetUnifiedThreadRequest(gid=g, thread_id=t, team_gids=team)
        for g, t in starts
    ]


def resolve_pages(
    threads: Sequence[ThreadKey], page_size: int = 100
) -> list[threadweaver_pb2.ResolveThreadsRequest]:
    """Inbox pages: ``ResolveThreadsRequest``s of ``page_size`` threads each."""
    if page_size < 1:
        raise ValueError("page_size must be ≥ 1")
    return [
        threadweaver_pb2.ResolveThreadsRequest(
            threads=[
                common_pb2.ThreadRef(gid=g, thread_id=t) for g, t in threads[i : i + page_size]
            ]
        )
        for i in range(0, len(threads), page_size)
    ]


def thread_keys(refs: Sequence[common_pb2.ThreadRef]) -> frozenset[ThreadKey]:
    """The (gid, thread_id) set of a response's thread refs."""
    return frozenset((r.gid, r.thread_id) for r in refs)
