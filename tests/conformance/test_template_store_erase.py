"""The TemplateStore's erasure calls (get_email_cells, erase_cells, delete_templates, scrub),
unchanged on every engine."""

from __future__ import annotations

from storage.clock import now_ms
from storage.ports import ClusterCounts, ClusterWrite, TemplateStore


def _w(key: bytes, email: str, user: str, payload: bytes = b"p") -> ClusterWrite:
    return ClusterWrite(key=key, email_id=email, user=user.encode(), payload=payload)


async def test_email_cells_name_their_ids(template_store: TemplateStore) -> None:
    """get_email_cells returns each live email of the row with its id, up to the limit."""
    await template_store.add_emails(
        [_w(b"r", "e1", "u1", b"one"), _w(b"r", "é2", "u2", b"two"), _w(b"s", "e3", "u1")]
    )
    assert sorted(await template_store.get_email_cells(b"r", 10)) == [
        ("e1", b"one"),
        ("é2", b"two"),
    ]
    assert len(await template_store.get_email_cells(b"r", 1)) == 1
    assert await template_store.get_email_cells(b"none", 10) == []


async def test_erase_cells_removes_only_the_named_cells(template_store: TemplateStore) -> None:
    """The named emails and users of one row go; other rows and other cells stay; counts follow."""
    await template_store.add_emails(
        [
            _w(b"r", "e1", "gone"),
            _w(b"r", "e2", "gone"),
            _w(b"r", "e3", "kept"),
            _w(b"other", "e1", "gone"),
        ]
    )
    await template_store.erase_cells(b"r", ["e1", "e2", "unknown"], [b"gone", b"nobody"])
    await template_store.erase_cells(b"r", ["e1", "e2"], [b"gone"])  # twice is once
    counts = await template_store.add_emails([], counted=[b"r", b"other"])
    assert counts[b"r"] == ClusterCounts(emails=1, users=1, template_at_ms=None)
    assert counts[b"other"] == ClusterCounts(emails=1, users=1, template_at_ms=None)
    assert [e for e, _ in await template_store.get_email_cells(b"r", 10)] == ["e3"]


async def test_an_erased_cell_written_again_is_new(template_store: TemplateStore) -> None:
    """After an erasure a new write of the same cell stores it again (new data)."""
    await template_store.add_emails([_w(b"r", "e1", "u", b"old")])
    await template_store.erase_cells(b"r", ["e1"], [b"u"])
    await template_store.add_emails([_w(b"r", "e1", "u", b"new")])
    assert await template_store.get_email_cells(b"r", 10) == [("e1", b"new")]


async def test_delete_templates_unforms_the_row(template_store: TemplateStore) -> None:
    """delete_templates removes the row's templates (lists and counts agree), idempotently."""
    await template_store.add_emails([_w(b"r", "e1", "u")])
    formed = now_ms()
    await template_store.put_templates(b"r", b"tpl", "shop@example.com", formed)
    await template_store.put_templates(b"q", b"tpl2", "shop@example.com", formed)
    await template_store.delete_templates(b"r")
    await template_store.delete_templates(b"r")
    await template_store.delete_templates(b"never")
    assert await template_store.get_templates([b"r", b"q"]) == {b"q": b"tpl2"}
    assert await template_store.list_templates(None, 10, None) == [(b"q", b"tpl2")]
    counts = await template_store.add_emails([], counted=[b"r"])
    assert counts[b"r"] == ClusterCounts(emails=1, users=1, template_at_ms=None)
    await template_store.put_templates(b"r", b"again", "shop@example.com", formed + 1)
    assert await template_store.get_templates([b"r"]) == {b"r": b"again"}


async def test_scrub_keeps_every_live_cell(template_store: TemplateStore) -> None:
    """Scrubbing removes nothing live and may run twice."""
    await template_store.add_emails([_w(b"r", "e1", "u")])
    await template_store.scrub()
    await template_store.scrub()
    assert await template_store.get_email_cells(b"r", 10) == [("e1", b"p")]
