"""Fan-out planning, delivery ids and page selection: the pure rules of the inbox."""

from __future__ import annotations

import base64
import hashlib
from typing import ClassVar

from server.inbox import pagetoken
from server.inbox.listing import select_page
from server.inbox.model import (
    InboxFilter,
    Post,
    delivery_id_for,
    legacy_delivery_id_for,
    plan_fanout,
)
from storage.ports import InboxEntry


def post(recipients: list[str], sender: str = "alice") -> Post:
    return Post("t", 1, sender, recipients)


class TestPlanFanout:
    def test_recipients_deduplicated_and_sorted(self) -> None:
        """Duplicates are delivered once, in sorted order, so retries agree whatever order
        they list the recipients in."""
        plan = plan_fanout(post(["c", "b", "c", "a", "b"]), sync_max=10)
        assert plan.recipients == ["a", "b", "c"]
        assert plan_fanout(post(["a", "c", "b"]), sync_max=10).recipients == plan.recipients

    def test_sender_is_never_an_unread_recipient(self) -> None:
        """A sender listed among the recipients gets the thread read only."""
        plan = plan_fanout(post(["alice", "bob"]), sync_max=10)
        assert (plan.sender, plan.recipients) == ("alice", ["bob"])

    def test_background_only_above_the_threshold(self) -> None:
        """Up to sync_max distinct recipients deliver in the call; one more does not."""
        at = [f"u{i}" for i in range(1000)]
        assert not plan_fanout(post(at), sync_max=1000).background
        assert plan_fanout(post([*at, "extra"]), sync_max=1000).background
        assert not plan_fanout(post([*at, *at]), sync_max=1000).background


class TestDeliveryId:
    def test_deterministic_per_request(self) -> None:
        """A retry derives the same id; another message, thread, sender or recipient set
        gets another id, and so does the key alone (1.0.0's id)."""
        ids = {
            delivery_id_for("t", 1, "s", ["a", "b"]),
            delivery_id_for("t", 2, "s", ["a", "b"]),
            delivery_id_for("t1", 1, "s", ["a", "b"]),
            delivery_id_for("t", 11, "s", ["a", "b"]),
            delivery_id_for("t", 1, "z", ["a", "b"]),
            delivery_id_for("t", 1, "s", ["a", "c"]),
            delivery_id_for("t", 1, "s", ["ab"]),
            delivery_id_for("t", 1, "s", ["a"]),
            legacy_delivery_id_for("t", 1),
        }
        assert len(ids) == 9
        assert delivery_id_for("t", 1, "s", ["a", "b"]) == delivery_id_for("t", 1, "s", ["a", "b"])
        assert all(len(i.encode()) <= 256 and i.startswith("dlv_") for i in ids)

    def test_the_plan_names_the_same_delivery_whatever_the_order(self) -> None:
        """Reordered, duplicated, or with the sender listed: the same request, the same id;
        a post delivered in the call has none."""
        one = plan_fanout(Post("t", 1, "s", ["b", "a", "c"]), sync_max=2)
        two = plan_fanout(Post("t", 1, "s", ["c", "a", "b", "a", "s"]), sync_max=2)
        assert one.delivery_id == two.delivery_id == delivery_id_for("t", 1, "s", ["a", "b", "c"])
        assert plan_fanout(Post("t", 1, "s", ["a", "b"]), sync_max=2).delivery_id == ""

    def test_legacy_id_is_the_one_1_0_0_gave(self) -> None:
        """The id 1.0.0 derived from (thread, message) alone, pinned: a retry of a post it
        accepted must find that delivery."""
        assert legacy_delivery_id_for("t1", 9) == "dlv_" + base64.urlsafe_b64encode(
            hashlib.sha256(b"t1\x009").digest()[:15]
        ).decode("ascii")


class TestSelectPage:
    entries: ClassVar[list[InboxEntry]] = [
        InboxEntry(thread_id="a", last_message_id=5, is_read=False),
        InboxEntry(thread_id="b", last_message_id=9, is_read=True),
        InboxEntry(thread_id="c", last_message_id=5, is_read=True),
        InboxEntry(thread_id="d", last_message_id=1, is_read=False),
        InboxEntry(thread_id="e", last_message_id=7, is_read=False),
    ]

    def test_newest_first_with_thread_id_breaking_ties(self) -> None:
        """Order is last_message_id descending, then thread_id ascending."""
        page = select_page(
            self.entries, inbox_id="i", flt=InboxFilter.ALL, after=None, page_size=10
        )
        assert [e.thread_id for e in page.entries] == ["b", "e", "a", "c", "d"]
        assert page.next_page_token == ""

    def test_filters(self) -> None:
        """UNREAD and READ keep only their kind."""
        unread = select_page(
            self.entries, inbox_id="i", flt=InboxFilter.UNREAD, after=None, page_size=10
        )
        read = select_page(
            self.entries, inbox_id="i", flt=InboxFilter.READ, after=None, page_size=10
        )
        assert [e.thread_id for e in unread.entries] == ["e", "a", "d"]
        assert [e.thread_id for e in read.entries] == ["b", "c"]

    def test_pages_walk_the_whole_inbox_exactly_once(self) -> None:
        """Following tokens visits every entry once, across equal last_message_ids."""
        seen: list[str] = []
        after = None
        while True:
            page = select_page(
                self.entries, inbox_id="i", flt=InboxFilter.ALL, after=after, page_size=2
            )
            seen += [e.thread_id for e in page.entries]
            if not page.next_page_token:
                break
            after = pagetoken.decode(page.next_page_token, "i")
        assert seen == ["b", "e", "a", "c", "d"]

    def test_new_activity_neither_repeats_nor_skips(self) -> None:
        """Threads that move to the top after page 1 do not disturb page 2."""
        first = select_page(
            self.entries, inbox_id="i", flt=InboxFilter.ALL, after=None, page_size=2
        )
        after = pagetoken.decode(first.next_page_token, "i")
        moved = [
            *self.entries[:3],
            InboxEntry(thread_id="d", last_message_id=20, is_read=False),
            InboxEntry(thread_id="new", last_message_id=21, is_read=False),
            self.entries[4],
        ]
        second = select_page(moved, inbox_id="i", flt=InboxFilter.ALL, after=after, page_size=10)
        assert [e.thread_id for e in second.entries] == ["a", "c"]
