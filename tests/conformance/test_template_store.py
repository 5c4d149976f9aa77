"""TemplateStore conformance: Crusher's templates table, the same on every engine."""

from __future__ import annotations

import asyncio

from storage.clock import now_ms
from storage.ports import ClusterCounts, ClusterWrite, TemplateStore
from tests.serving import eventually


def _w(key: bytes, email: str, user: str, payload: bytes = b"p") -> ClusterWrite:
    return ClusterWrite(key=key, email_id=email, user=user.encode(), payload=payload)


async def test_counts_are_emails_and_distinct_users(template_store: TemplateStore) -> None:
    """s counts emails, n distinct recipients; repeats of an email id count once."""
    got = await template_store.add_emails(
        [_w(b"r1", "e1", "u1"), _w(b"r1", "e2", "u1"), _w(b"r1", "e3", "u2"), _w(b"r2", "e1", "u9")]
    )
    assert got == {
        b"r1": ClusterCounts(emails=3, users=2, template_at_ms=None),
        b"r2": ClusterCounts(emails=1, users=1, template_at_ms=None),
    }
    again = await template_store.add_emails([_w(b"r1", "e1", "u1"), _w(b"r1", "e4", "u3")])
    assert again == {b"r1": ClusterCounts(emails=4, users=3, template_at_ms=None)}


async def test_a_large_batch_over_many_rows_is_stored_and_counted_exactly(
    template_store: TemplateStore,
) -> None:
    """A batch of hundreds of emails over hundreds of rows (a busy I/O stage's call), an
    email repeated within it, is stored and counted as the same emails one by one would be."""
    writes = [_w(f"row{i % 301}".encode(), f"e{i}", f"u{i % 7}") for i in range(700)]
    writes.append(_w(b"row0", "e0", "u0"))  # the same cell twice in one batch: once
    got = await template_store.add_emails(writes)
    assert len(got) == 301
    for r in range(301):
        emails = len(range(r, 700, 301))
        users = len({i % 7 for i in range(r, 700, 301)})
        assert got[f"row{r}".encode()] == ClusterCounts(
            emails=emails, users=users, template_at_ms=None
        )
    assert len(await template_store.get_emails(b"row5", 10)) == 3


async def test_concurrent_batches_each_count_their_rows(template_store: TemplateStore) -> None:
    """Batches stored at once (the I/O stage's tasks) all land; each call's counts include
    at least its own writes, and a count afterwards is exact."""
    batches = [
        [_w(b"shared", f"b{b}e{i}", f"u{b}-{i}") for i in range(3)]
        + [_w(f"own{b}".encode(), "e", "u")]
        for b in range(6)
    ]
    results = await asyncio.gather(*(template_store.add_emails(batch) for batch in batches))
    for b, got in enumerate(results):
        assert got[f"own{b}".encode()] == ClusterCounts(emails=1, users=1, template_at_ms=None)
        assert 3 <= got[b"shared"].emails <= 18
        assert got[b"shared"].users == got[b"shared"].emails
    final = await template_store.add_emails([], counted=[b"shared"])
    assert final == {b"shared": ClusterCounts(emails=18, users=18, template_at_ms=None)}


async def test_emails_read_back(template_store: TemplateStore) -> None:
    """get_emails returns the stored payloads of one row, bounded by limit."""
    await template_store.add_emails(
        [_w(b"k", f"e{i}", f"u{i}", f"body{i}".encode()) for i in range(5)]
    )
    everything = await template_store.get_emails(b"k", 100)
    assert sorted(everything) == [f"body{i}".encode() for i in range(5)]
    assert len(await template_store.get_emails(b"k", 2)) == 2
    assert await template_store.get_emails(b"none", 10) == []


async def test_templates_put_get_and_formation_time(template_store: TemplateStore) -> None:
    """A row's templates replace each other; t is their formation time."""
    await template_store.add_emails([_w(b"k", "e", "u")])
    formed = now_ms()
    await template_store.put_templates(b"k", b"first", "a@x.example", formed)
    await template_store.put_templates(b"k", b"second", "a@x.example", formed + 5)
    assert await template_store.get_templates([b"k", b"other"]) == {b"k": b"second"}
    counts = await template_store.add_emails([_w(b"k", "e2", "u2")])
    assert counts[b"k"] == ClusterCounts(emails=2, users=2, template_at_ms=formed + 5)


async def test_list_templates_pages_in_key_order(template_store: TemplateStore) -> None:
    """Listing walks rows with templates in key order, optionally one sender's."""
    for i in range(7):
        sender = "a@x.example" if i % 2 == 0 else "b@y.example"
        await template_store.put_templates(bytes([i + 1]), f"t{i}".encode(), sender, 1000 + i)
    first = await template_store.list_templates(None, 3, None)
    assert [k for k, _ in first] == [b"\x01", b"\x02", b"\x03"]
    rest = await template_store.list_templates(first[-1][0], 10, None)
    assert [d for _, d in rest] == [b"t3", b"t4", b"t5", b"t6"]
    only_a = await template_store.list_templates(None, 10, "a@x.example")
    assert [d for _, d in only_a] == [b"t0", b"t2", b"t4", b"t6"]


async def test_emails_and_users_expire_at_the_ttl(template_store: TemplateStore) -> None:
    """Stored emails and users vanish once the TTL (2 s here) has passed; templates stay."""
    await template_store.add_emails([_w(b"ttl", "e1", "u1"), _w(b"ttl", "e2", "u2")])
    await template_store.put_templates(b"ttl", b"tpl", "a@x.example", now_ms())
    assert len(await template_store.get_emails(b"ttl", 10)) == 2
    await eventually(
        lambda: template_store.get_emails(b"ttl", 10), lambda got: got == [], timeout_s=20
    )
    counts = await template_store.add_emails([_w(b"ttl", "e3", "u3")])
    assert counts[b"ttl"].emails == 1
    assert counts[b"ttl"].users == 1
    assert await template_store.get_templates([b"ttl"]) == {b"ttl": b"tpl"}


async def test_counts_only_the_rows_asked_and_stop_at_the_cap(
    template_store: TemplateStore,
) -> None:
    """`counted` picks the rows counted (written or not); `cap` bounds s and n."""
    writes = [_w(b"c1", f"e{i}", f"u{i % 4}") for i in range(9)] + [_w(b"c2", "e", "u")]
    assert await template_store.add_emails(writes, counted=[]) == {}
    got = await template_store.add_emails([_w(b"c2", "e2", "u2")], counted=[b"c1", b"c3"], cap=6)
    assert got == {
        b"c1": ClusterCounts(emails=6, users=4, template_at_ms=None),
        b"c3": ClusterCounts(emails=0, users=0, template_at_ms=None),
    }
    exact = await template_store.add_emails([], counted=[b"c1", b"c2"], cap=100)
    assert exact == {
        b"c1": ClusterCounts(emails=9, users=4, template_at_ms=None),
        b"c2": ClusterCounts(emails=2, users=2, template_at_ms=None),
    }
