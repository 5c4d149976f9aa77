"""TemplateStore's scans and restore (what ``loom dump`` / ``loom load`` use), on every engine.

Cells are written through the port's own `add_emails` / `put_templates`, dumped with the
scans, restored into another fresh store of the same engine and dumped again: the copy
must hold the same cells with the same expiries (an email's remaining life survives the
trip, even into a store with another TTL), never an expired one, and the newer templates.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from storage import factory
from storage.clock import now_ms
from storage.ports import (
    ClusterCounts,
    ClusterWrite,
    PortableTemplateStore,
    StoredEmail,
    StoredTemplates,
    StoredUser,
)
from tests.engines import settings_for
from tests.serving import eventually

PAGE = 4
LONG_TTL_S = 120.0
"""TTL of the stores that must not lose cells while a test runs."""
SLACK_MS = 2
"""How far a copied expiry may drift (the engines keep milliseconds: it should not)."""

OpenStore = Callable[[float], Awaitable[PortableTemplateStore]]


@pytest.fixture
async def open_store(template_engine: str, tmp_path: Path) -> AsyncIterator[OpenStore]:
    """Opens fresh, empty TemplateStores on `template_engine` with a given email TTL (s)."""
    opened: list[PortableTemplateStore] = []

    async def open_(email_ttl_s: float) -> PortableTemplateStore:
        settings = settings_for(template_engine, tmp_path, templates_store=template_engine)
        store = await factory.open_template_store(settings, email_ttl_s=email_ttl_s)
        opened.append(store)
        return store

    try:
        yield open_
    finally:
        for store in opened:
            await store.close()


@dataclass
class Dump:
    """Everything the three scans gave, by cell."""

    emails: dict[tuple[bytes, str], StoredEmail] = field(default_factory=dict)
    users: dict[tuple[bytes, bytes], StoredUser] = field(default_factory=dict)
    templates: dict[bytes, StoredTemplates] = field(default_factory=dict)


async def dump(store: PortableTemplateStore, page: int = PAGE) -> Dump:
    """Every page of the three scans, after checking each holds 1..`page` cells and no cell
    comes twice."""
    emails = [p async for p in store.scan_emails(page)]
    users = [p async for p in store.scan_users(page)]
    templates = [p async for p in store.scan_templates(page)]
    for pages in (emails, users, templates):
        assert all(1 <= len(p) <= page for p in pages), [len(p) for p in pages]
    seen_e = Counter((e.key, e.email_id) for p in emails for e in p)
    seen_u = Counter((u.key, u.user) for p in users for u in p)
    seen_t = Counter(t.key for p in templates for t in p)
    for seen in (seen_e, seen_u, seen_t):
        assert not [cell for cell, n in seen.items() if n > 1], seen
    return Dump(
        emails={(e.key, e.email_id): e for p in emails for e in p},
        users={(u.key, u.user): u for p in users for u in p},
        templates={t.key: t for p in templates for t in p},
    )


async def load(store: PortableTemplateStore, d: Dump, page: int = PAGE) -> None:
    """Restores `d` a page of each kind per call, as a load would."""
    emails, users, templates = (
        list(d.emails.values()),
        list(d.users.values()),
        list(d.templates.values()),
    )
    for at in range(0, max(len(emails), len(users), len(templates), 1), page):
        await store.restore(
            emails[at : at + page], users[at : at + page], templates[at : at + page]
        )


def assert_same(copy: Dump, original: Dump) -> None:
    """The same cells with the same payloads and templates, expiries within SLACK_MS."""
    assert copy.emails.keys() == original.emails.keys()
    assert copy.users.keys() == original.users.keys()
    assert copy.templates == original.templates
    for cell, email in original.emails.items():
        assert copy.emails[cell].payload == email.payload
        assert abs(copy.emails[cell].expires_at_ms - email.expires_at_ms) <= SLACK_MS, cell
    for user_cell, user in original.users.items():
        assert abs(copy.users[user_cell].expires_at_ms - user.expires_at_ms) <= SLACK_MS, user_cell


def _w(key: bytes, email: str, user: bytes, payload: bytes = b"p") -> ClusterWrite:
    return ClusterWrite(key=key, email_id=email, user=user, payload=payload)


WIDE = b"wide\x00row"
"""A row of more emails than a page (a Bigtable scan resumes inside it)."""
KEYS = [b"\x00", b"a", b"a\x00", b"\xff\xfe", b"r:4", WIDE]


def sample_writes() -> list[ClusterWrite]:
    """Emails over several rows: binary keys, users and payloads, unicode ids, a row of
    exactly a page of emails, a row of many pages, repeated users."""
    writes = [
        _w(b"\x00", "e1", b"\x00\xff", b"\x00payload\xff"),
        _w(b"a", "ü-1", b"u1", b""),
        _w(b"a", "ü-2", b"u1", bytes(range(256))),
        _w(b"a\x00", "e", b"\xff", b"x" * 5000),
        _w(b"\xff\xfe", "e", b"u", b"y"),
    ]
    writes += [_w(b"r:4", f"e{i}", f"u{i}".encode(), f"p{i}".encode()) for i in range(PAGE)]
    writes += [
        _w(WIDE, f"e{i:03}", f"u{i % 7}".encode(), f"wide {i}".encode() * 10) for i in range(37)
    ]
    return writes


async def test_empty_store_scans_to_nothing(open_store: OpenStore) -> None:
    """A dump of an empty templates store holds nothing, not even an empty page, and a page
    size below 1 is refused."""
    store = await open_store(LONG_TTL_S)
    assert await dump(store) == Dump()
    for scan in (store.scan_emails, store.scan_users, store.scan_templates):
        with pytest.raises(ValueError, match="page"):
            [p async for p in scan(0)]
    await store.restore([], [], [])
    assert await dump(store) == Dump()


async def test_scans_give_every_live_cell_once_with_its_expiry(open_store: OpenStore) -> None:
    """A dump holds every stored email (payload byte for byte), every distinct recipient of
    each row and every row's templates exactly once, in pages no larger than asked; each
    email and user expires one TTL after it was written."""
    store = await open_store(LONG_TTL_S)
    writes = sample_writes()
    before = now_ms()
    await store.add_emails(writes)
    after = now_ms()
    await store.put_templates(b"a", b"tpl\x00a", "a@x.example", 1_000_123)
    await store.put_templates(b"no-emails", b"tpl b", "b@y.example", 2_000_456)

    for page in (1, PAGE, 1000):
        got = await dump(store, page)
        assert got.emails.keys() == {(w.key, w.email_id) for w in writes}
        assert got.users.keys() == {(w.key, w.user) for w in writes}
        for w in writes:
            email = got.emails[(w.key, w.email_id)]
            assert email.payload == w.payload
            ttl_ms = int(LONG_TTL_S * 1000)
            assert before + ttl_ms <= email.expires_at_ms <= after + ttl_ms
            user = got.users[(w.key, w.user)]
            assert before + ttl_ms <= user.expires_at_ms <= after + ttl_ms
        assert got.templates == {
            b"a": StoredTemplates(
                key=b"a", data=b"tpl\x00a", sender="a@x.example", formed_at_ms=1_000_123
            ),
            b"no-emails": StoredTemplates(
                key=b"no-emails", data=b"tpl b", sender="b@y.example", formed_at_ms=2_000_456
            ),
        }
    assert len([p async for p in store.scan_emails(PAGE)]) >= len(writes) // PAGE  # paged


async def test_dump_and_load_round_trip(open_store: OpenStore) -> None:
    """Loading a dump into a fresh store gives a store whose dump is the same: same emails,
    users, templates and expiries, the same reads and counts; into a store with another
    TTL too (each cell keeps its remaining life, not the new TTL)."""
    source = await open_store(LONG_TTL_S)
    await source.add_emails(sample_writes())
    await source.put_templates(b"a", b"tpl", "a@x.example", now_ms())
    await source.put_templates(WIDE, b"wide tpl", "w@x.example", now_ms() - 5)
    original = await dump(source)

    for ttl_s in (LONG_TTL_S, 2 * LONG_TTL_S):
        target = await open_store(ttl_s)
        await load(target, original)
        assert_same(await dump(target), original)
        for key in KEYS:
            assert sorted(await target.get_emails(key, 100)) == sorted(
                await source.get_emails(key, 100)
            )
        counts = await target.add_emails([], counted=KEYS)
        assert counts == await source.add_emails([], counted=KEYS)
        assert await target.get_templates([b"a", WIDE]) == {b"a": b"tpl", WIDE: b"wide tpl"}


async def test_an_expired_email_is_never_resurrected(open_store: OpenStore) -> None:
    """Restoring an email or user whose expiry has passed writes nothing: no read, count or
    scan shows it, while the live cells of the same restore are there."""
    store = await open_store(LONG_TTL_S)
    now = now_ms()
    gone = now - 1000
    live = now + 60_000
    await store.restore(
        [
            StoredEmail(key=b"old", email_id="e", payload=b"dead", expires_at_ms=gone),
            StoredEmail(key=b"mixed", email_id="dead", payload=b"dead", expires_at_ms=gone),
            StoredEmail(key=b"mixed", email_id="live", payload=b"live", expires_at_ms=live),
        ],
        [
            StoredUser(key=b"old", user=b"u", expires_at_ms=gone),
            StoredUser(key=b"mixed", user=b"dead", expires_at_ms=gone),
            StoredUser(key=b"mixed", user=b"live", expires_at_ms=live),
        ],
        [],
    )
    assert await store.get_emails(b"old", 10) == []
    assert await store.get_emails(b"mixed", 10) == [b"live"]
    assert await store.add_emails([], counted=[b"old", b"mixed"]) == {
        b"old": ClusterCounts(emails=0, users=0, template_at_ms=None),
        b"mixed": ClusterCounts(emails=1, users=1, template_at_ms=None),
    }
    got = await dump(store)
    assert got.emails.keys() == {(b"mixed", "live")}
    assert got.users.keys() == {(b"mixed", b"live")}
    assert abs(got.emails[(b"mixed", "live")].expires_at_ms - live) <= SLACK_MS


async def test_restoring_twice_is_once(open_store: OpenStore) -> None:
    """Loading the same dump twice (a load retried after a failure) leaves the store as one
    load did: no duplicate emails or users, the same expiries, counts and templates."""
    source = await open_store(LONG_TTL_S)
    await source.add_emails(sample_writes())
    await source.put_templates(b"a", b"tpl", "a@x.example", now_ms())
    original = await dump(source)

    once = await open_store(LONG_TTL_S)
    await load(once, original)
    twice = await open_store(LONG_TTL_S)
    await load(twice, original)
    await load(twice, original, page=3)
    assert_same(await dump(twice), await dump(once))
    assert_same(await dump(twice), original)
    assert await twice.add_emails([], counted=KEYS) == await once.add_emails([], counted=KEYS)


async def test_a_cell_keeps_the_later_expiry(open_store: OpenStore) -> None:
    """Restoring an email or user the store already has keeps whichever expires later (and
    that email's payload): an older dump never shortens a newer cell's life."""
    store = await open_store(LONG_TTL_S)
    now = now_ms()
    soon, late = now + 30_000, now + 90_000

    def email(payload: bytes, at: int) -> StoredEmail:
        return StoredEmail(key=b"k", email_id="e", payload=payload, expires_at_ms=at)

    await store.restore(
        [email(b"late", late)], [StoredUser(key=b"k", user=b"u", expires_at_ms=late)], []
    )
    await store.restore(
        [email(b"soon", soon)], [StoredUser(key=b"k", user=b"u", expires_at_ms=soon)], []
    )
    got = await dump(store)
    assert got.emails[(b"k", "e")].payload == b"late"
    assert abs(got.emails[(b"k", "e")].expires_at_ms - late) <= SLACK_MS
    assert abs(got.users[(b"k", b"u")].expires_at_ms - late) <= SLACK_MS
    assert await store.get_emails(b"k", 10) == [b"late"]

    later = late + 60_000
    await store.restore(
        [email(b"later", later)], [StoredUser(key=b"k", user=b"u", expires_at_ms=later)], []
    )
    got = await dump(store)
    assert got.emails[(b"k", "e")].payload == b"later"
    assert abs(got.emails[(b"k", "e")].expires_at_ms - later) <= SLACK_MS
    assert abs(got.users[(b"k", b"u")].expires_at_ms - later) <= SLACK_MS
    assert await store.get_emails(b"k", 10) == [b"later"]
    assert await store.add_emails([], counted=[b"k"]) == {
        b"k": ClusterCounts(emails=1, users=1, template_at_ms=None)
    }


async def test_the_newer_formation_of_templates_wins(open_store: OpenStore) -> None:
    """Restored templates replace a row's templates only when formed later than them: an
    older or equally old dump leaves the row's templates, sender and formation time as
    they are; a newer one replaces all three."""
    store = await open_store(LONG_TTL_S)
    formed = now_ms() - 60_000
    await store.put_templates(b"k", b"current", "now@x.example", formed)

    def tpl(data: bytes, sender: str, at: int) -> StoredTemplates:
        return StoredTemplates(key=b"k", data=data, sender=sender, formed_at_ms=at)

    current = tpl(b"current", "now@x.example", formed)
    for stale in (
        tpl(b"older", "old@x.example", formed - 1),
        tpl(b"same", "same@x.example", formed),
    ):
        await store.restore([], [], [stale])
        assert await store.get_templates([b"k"]) == {b"k": b"current"}
        assert (await dump(store)).templates == {b"k": current}
        assert await store.list_templates(None, 10, "now@x.example") == [(b"k", b"current")]

    newer = tpl(b"newer", "new@x.example", formed + 1)
    await store.restore([], [], [newer])
    await store.restore([], [], [newer])
    assert await store.get_templates([b"k"]) == {b"k": b"newer"}
    assert (await dump(store)).templates == {b"k": newer}
    assert await store.list_templates(None, 10, "new@x.example") == [(b"k", b"newer")]
    assert await store.list_templates(None, 10, "now@x.example") == []
    counts = await store.add_emails([], counted=[b"k"])
    assert counts[b"k"].template_at_ms == formed + 1

    # A row without templates takes them, however old.
    first = StoredTemplates(key=b"new-row", data=b"first", sender="f@x.example", formed_at_ms=1)
    await store.restore([], [], [first])
    assert (await dump(store)).templates[b"new-row"] == first


async def test_restored_cells_expire_at_their_expiry(open_store: OpenStore) -> None:
    """A restored email and user vanish from reads, counts and dumps once their restored
    expiry has passed, on a store whose own TTL is 2 s; one restored with a longer
    remaining life than that TTL outlives it and keeps its expiry."""
    store = await open_store(2.0)
    now = now_ms()
    short, long_ = now + 4000, now + 60_000
    await store.restore(
        [
            StoredEmail(key=b"k", email_id="short", payload=b"s", expires_at_ms=short),
            StoredEmail(key=b"k", email_id="long", payload=b"l", expires_at_ms=long_),
        ],
        [
            StoredUser(key=b"k", user=b"short", expires_at_ms=short),
            StoredUser(key=b"k", user=b"long", expires_at_ms=long_),
        ],
        [],
    )
    assert sorted(await store.get_emails(b"k", 10)) == [b"l", b"s"]
    await eventually(lambda: store.get_emails(b"k", 10), lambda got: got == [b"l"], timeout_s=30)
    assert now_ms() >= short - SLACK_MS  # not before its time
    assert await store.add_emails([], counted=[b"k"]) == {
        b"k": ClusterCounts(emails=1, users=1, template_at_ms=None)
    }
    got = await dump(store)
    assert got.emails.keys() == {(b"k", "long")}
    assert got.users.keys() == {(b"k", b"long")}
    assert abs(got.emails[(b"k", "long")].expires_at_ms - long_) <= SLACK_MS
    assert abs(got.users[(b"k", b"long")].expires_at_ms - long_) <= SLACK_MS
