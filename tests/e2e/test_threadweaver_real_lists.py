"""Real public mailing-list mail through the real server on every engine: the unified
threads must be exactly union-find's components of the mailbox threads that share a
Message-ID.

The messages are real list archives (`loadtest/corpora/mailing_lists.py`: pinned,
digest-checked, downloaded at test time, never committed) with their real Message-ID,
In-Reply-To and References headers, spread over subscribers' mailboxes threaded as Gmail
threads them, a third of the copies spelled bare, padded or ``< id >``, woven by four
concurrent clients in shuffled order and mixed batch shapes.
"""

from __future__ import annotations

import random
import uuid

from loom.v1 import common_pb2, threadweaver_pb2, threadweaver_pb2_grpc

from loadtest.corpora.mailing_lists import deliver, ensure_messages
from storage.ports import ThreadStore
from tests.e2e.weaving import (
    Woven,
    assert_star_complete,
    assert_union_find,
    expected_components,
    weave_concurrently,
)
from tests.serving import Running


async def test_real_list_mail_unifies_as_union_find(
    weaver_server: Running, weaver_store: ThreadStore, weaver_engine: str
) -> None:
    """Every pair of mailbox threads shares a unified thread exactly when union-find joins
    them; each unified thread counts its distinct messages once and is star-complete."""
    messages = ensure_messages()
    deliveries = deliver(messages, seed=20, namespace=uuid.uuid4().hex[:8])
    woven = [Woven(d.gid, d.thread_id, d.rfc_message_id, d.sent_at_s) for d in deliveries]
    stub = threadweaver_pb2_grpc.ThreadWeaverStub(weaver_server.channel)
    await weave_concurrently([stub], woven, random.Random(20))

    uf = expected_components(woven)
    threads = sorted({(m.gid, m.thread_id) for m in woven})
    resolved: dict[tuple[str, str], str] = {}
    for start in range(0, len(threads), 100):
        refs = [common_pb2.ThreadRef(gid=g, thread_id=t) for g, t in threads[start : start + 100]]
        reply = await stub.ResolveThreads(threadweaver_pb2.ResolveThreadsRequest(threads=refs))
        resolved.update(
            ((r.thread.gid, r.thread.thread_id), r.unified_thread_id) for r in reply.threads
        )
    mismatches = sum(
        (resolved[a] == resolved[b]) != uf.connected(a, b)
        for i, a in enumerate(threads)
        for b in threads[i + 1 :]
    )
    spelled = sum(
        not d.rfc_message_id.startswith("<") or " " in d.rfc_message_id for d in deliveries
    )
    print(  # the figures of this run, shown with -s
        f"\n[{weaver_engine}] {len(messages)} messages from "
        f"{len({m.list_name for m in messages})} list archives, {len(deliveries)} copies in "
        f"{len({d.gid for d in deliveries})} mailboxes, {len(threads)} mailbox threads, "
        f"{len(set(resolved.values()))} unified threads, {spelled} ids bare or padded, "
        f"{mismatches} mismatches"
    )
    assert mismatches == 0
    await assert_union_find([stub], woven)
    await assert_star_complete(weaver_store, woven)
