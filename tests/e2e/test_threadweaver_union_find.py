"""Property: weaving through the real server yields exactly union-find's components.

See `tests/e2e/weaving.py` for the oracle. Runs against every ThreadWeaver engine, with
several concurrent clients on one server; `test_threadweaver_two_servers.py` does the same
with two `loom serve` processes writing at once.
"""

from __future__ import annotations

import random
import uuid

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from loom.v1 import threadweaver_pb2, threadweaver_pb2_grpc

from storage.ports import ThreadStore
from tests.e2e.weaving import (
    Woven,
    assert_star_complete,
    assert_union_find,
    corpora,
    namespace,
    proto,
    weave_chain_at_once,
    weave_concurrently,
)
from tests.serving import Running


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(raw=corpora, rng=st.randoms(use_true_random=False))
async def test_unified_threads_are_union_find_components(
    weaver_server: Running,
    weaver_store: ThreadStore,
    raw: list[tuple[int, int, str, int]],
    rng: random.Random,
) -> None:
    """Every thread's unified thread equals its union-find component, messages counted once,
    and every unified thread is left one link from its smallest UT."""
    stub = threadweaver_pb2_grpc.ThreadWeaverStub(weaver_server.channel)
    messages = namespace(raw)
    await weave_concurrently([stub], messages, rng)
    await assert_star_complete(weaver_store, messages)
    await assert_union_find([stub], messages)


async def test_a_chain_merged_all_at_once(
    weaver_server: Running, weaver_store: ThreadStore
) -> None:
    """60 unified threads chained by 59 merges woven concurrently: one unified thread, every
    UT linked to its smallest."""
    stub = threadweaver_pb2_grpc.ThreadWeaverStub(weaver_server.channel)
    messages = await weave_chain_at_once([stub], 60)
    await assert_star_complete(weaver_store, messages)
    await assert_union_find([stub], messages)


async def test_message_id_spellings_of_mail_apis_unify(weaver_server: Running) -> None:
    """`<a@b.example>`, `a@b.example` and ` <a@b.example> ` in three mailboxes are one
    message: one unified thread, counted once."""
    stub = threadweaver_pb2_grpc.ThreadWeaverStub(weaver_server.channel)
    domain = f"{uuid.uuid4().hex[:8]}.example"
    spellings = [f"<a@{domain}>", f"a@{domain}", f" <a@{domain}> "]
    results = []
    for i, rfc in enumerate(spellings):
        results.append(
            await stub.WeaveMessage(
                threadweaver_pb2.WeaveMessageRequest(
                    message=proto(Woven(f"{domain}-u{i}", "t", rfc, 5))
                )
            )
        )
    assert {r.unified_thread_id for r in results} == {f"{domain}-u0/t"}
    view = await stub.GetUnifiedThread(
        threadweaver_pb2.GetUnifiedThreadRequest(gid=f"{domain}-u2", thread_id="t")
    )
    assert [(t.gid, t.thread_id) for t in view.threads] == [
        (f"{domain}-u{i}", "t") for i in range(3)
    ]
    assert view.stats.message_count == 1
