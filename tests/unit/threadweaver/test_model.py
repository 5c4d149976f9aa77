"""Pure pieces of ThreadWeaver: ids, keys, Message-ID normalization, link-graph arithmetic."""

from __future__ import annotations

from urllib.parse import unquote

from hypothesis import given, settings

from server.threadweaver.graph import components, hint, missing_star_links, redundant_links
from server.threadweaver.model import (
    MAX_ID_BYTES,
    MAX_UT_BYTES,
    Message,
    default_ut,
    normalize_message_id,
    rfc_key,
)
from storage.bigtable import thread_cells
from storage.ports import ThreadKey
from tests.thread_ids import valid_ids


class TestUnifiedThreadIds:
    def test_ordinary_ids_read_as_they_are(self) -> None:
        """A new unified thread is named gid/thread; only '%', '/' and ':' are escaped."""
        assert default_ut(ThreadKey("g1", "t9")) == "g1/t9"
        assert default_ut(ThreadKey("ann@b.example", "18c2f")) == "ann@b.example/18c2f"
        assert default_ut(ThreadKey("google:123", "a/b%c")) == "google%3A123/a%2Fb%25c"

    def test_the_seeds_colliding_pair_gets_two_ids(self) -> None:
        """("a:b", "c") and ("a", "b:c") were both "a:b:c" in the seed's naming."""
        assert default_ut(ThreadKey("a:b", "c")) != default_ut(ThreadKey("a", "b:c"))

    @settings(max_examples=500)
    @given(gid=valid_ids(), thread_id=valid_ids())
    def test_each_part_comes_back_from_the_id(self, gid: str, thread_id: str) -> None:
        """Split at its one '/', each part percent-decodes to the id it came from, so no
        two threads share an id (the function is injective)."""
        head, tail = default_ut(ThreadKey(gid, thread_id)).split("/")
        assert (unquote(head), unquote(tail)) == (gid, thread_id)

    @settings(max_examples=500)
    @given(a=valid_ids(), b=valid_ids(), c=valid_ids(), d=valid_ids())
    def test_distinct_threads_never_share_an_id(self, a: str, b: str, c: str, d: str) -> None:
        """Whatever the ids hold, two threads get one id only when they are one thread, even
        when a separator moves from the gid into the thread id."""
        for first, second in [
            (ThreadKey(a, b), ThreadKey(c, d)),
            (ThreadKey(f"{a}:{b}", c), ThreadKey(a, f"{b}:{c}")),
            (ThreadKey(f"{a}/{b}", c), ThreadKey(a, f"{b}/{c}")),
            (ThreadKey(f"{a}%2F{b}", c), ThreadKey(a, f"{b}%2F{c}")),
        ]:
            parts = (first.gid, first.thread_id, second.gid, second.thread_id)
            if max(len(x.encode()) for x in parts) > MAX_ID_BYTES:
                continue
            assert (default_ut(first) == default_ut(second)) == (first == second)

    @settings(max_examples=500)
    @given(a=valid_ids(), b=valid_ids(), c=valid_ids(), d=valid_ids())
    def test_a_new_id_never_equals_a_stored_old_one(self, a: str, b: str, c: str, d: str) -> None:
        """Ids stored before were "gid:thread" and all hold a ':'; new ids hold none, so a
        new unified thread can never land on a stored one."""
        new = default_ut(ThreadKey(a, b))
        assert ":" not in new
        assert new != f"{c}:{d}"
        assert new != f"{a}:{b}"

    def test_the_longest_id_fits_every_engine(self) -> None:
        """Two 512-byte ids of escaped characters make the longest id: 3,073 bytes, under
        Bigtable's 4 KiB row-key limit (the tightest of the engines), and the bound the
        Bigtable adapter sizes its responses for."""
        longest = default_ut(ThreadKey(":" * MAX_ID_BYTES, "%" * MAX_ID_BYTES))
        assert len(longest.encode()) == MAX_UT_BYTES == 3073
        assert MAX_UT_BYTES < 4096
        assert thread_cells.LONGEST_UT == MAX_UT_BYTES


class TestKeys:
    def test_same_message_id_gives_the_same_key_in_every_mailbox(self) -> None:
        """The Message-ID alone keys a message, so copies in two mailboxes meet."""
        a = Message(ThreadKey("a", "1"), "<m@x>", 5)
        b = Message(ThreadKey("b", "2"), "<m@x>", 7)
        assert rfc_key(a) == rfc_key(b)
        assert len(rfc_key(a)) == 16

    def test_missing_message_ids_never_collide_across_threads(self) -> None:
        """Without a Message-ID the key is private to (gid, thread, sent_at)."""
        keys = {
            rfc_key(Message(ThreadKey("a", "1"), "", 5)),
            rfc_key(Message(ThreadKey("a", "2"), "", 5)),
            rfc_key(Message(ThreadKey("b", "1"), "", 5)),
            rfc_key(Message(ThreadKey("a", "1"), "", 6)),
        }
        assert len(keys) == 4


class TestMessageIdNormalization:
    def test_brackets_and_whitespace_as_mail_apis_send_them_key_alike(self) -> None:
        """`<a@b.example>`, `a@b.example` and ` <a@b.example> ` are one message."""
        forms = ["<a@b.example>", "a@b.example", " <a@b.example> ", "\t<a@b.example>\r\n"]
        keys = {rfc_key(Message(ThreadKey("g", str(i)), f, 5)) for i, f in enumerate(forms)}
        assert len(keys) == 1
        assert {normalize_message_id(f) for f in forms} == {"a@b.example"}

    def test_only_one_pair_of_brackets_and_nothing_else_is_dropped(self) -> None:
        """Case, inner brackets and lone brackets are kept: they can tell messages apart."""
        assert normalize_message_id("<<a@b>>") == "<a@b>"
        assert normalize_message_id("< a@b >") == "a@b"
        assert normalize_message_id("<a@b") == "<a@b"
        assert normalize_message_id("a@b>") == "a@b>"
        assert normalize_message_id("<A@B.example>") == "A@B.example"
        assert rfc_key(Message(ThreadKey("g", "t"), "<A@b>", 1)) != rfc_key(
            Message(ThreadKey("g", "t"), "<a@b>", 1)
        )

    def test_a_value_that_normalizes_to_nothing_is_no_message_id(self) -> None:
        """Blank or `<>` unifies nothing: the key is private to the mailbox thread."""
        for blank in ("", "   ", "<>", "< >"):
            assert normalize_message_id(blank) == ""
            mine = rfc_key(Message(ThreadKey("a", "1"), blank, 5))
            assert mine == rfc_key(Message(ThreadKey("a", "1"), "", 5))
            assert mine != rfc_key(Message(ThreadKey("b", "1"), blank, 5))


class TestLinkGraph:
    def test_components_follow_links_transitively(self) -> None:
        """a-b, b-c join into one component; d stays alone; members share one set."""
        found = components({"a": {"b"}, "b": {"a", "c"}, "c": {"b"}, "e": set()}, ["d"])
        assert found["a"] == found["c"] == frozenset({"a", "b", "c"})
        assert found["a"] is found["b"]
        assert found["d"] == frozenset({"d"})
        assert found["e"] == frozenset({"e"})

    def test_links_named_only_on_one_side_still_join(self) -> None:
        """A link known from one end (the other UT never read) joins both UTs."""
        found = components({"x": {"y"}})
        assert found["y"] == frozenset({"x", "y"})

    def test_hint_is_the_smallest_of_a_ut_and_its_links(self) -> None:
        """In a star-complete component one lookup gives the canonical id."""
        links = {"b": frozenset({"a", "c"}), "a": frozenset({"b"})}
        assert hint("b", links) == "a"
        assert hint("a", links) == "a"
        assert hint("z", links) == "z"

    def test_missing_star_links_point_every_member_at_the_smallest(self) -> None:
        """A chain a-b-c-d lacks a-c and a-d; a complete star lacks nothing."""
        chain = {
            "a": frozenset({"b"}),
            "b": frozenset({"a", "c"}),
            "c": frozenset({"b", "d"}),
            "d": frozenset({"c"}),
        }
        assert missing_star_links(frozenset(chain), chain) == [("a", "c"), ("a", "d")]
        star = {"a": frozenset({"b", "c"}), "b": frozenset({"a"}), "c": frozenset({"a"})}
        assert missing_star_links(frozenset(star), star) == []

    def test_only_links_with_a_detour_through_the_smallest_are_redundant(self) -> None:
        """b-c goes (both linked to a); b-d stays while d is not linked to a; a's never go."""
        links = {
            "a": frozenset({"b", "c"}),
            "b": frozenset({"a", "c", "d"}),
            "c": frozenset({"a", "b"}),
            "d": frozenset({"b"}),
        }
        assert redundant_links(frozenset(links), links) == [("b", "c")]
        links["d"] |= {"a"}
        links["a"] |= {"d"}
        assert redundant_links(frozenset(links), links) == [("b", "c"), ("b", "d")]
