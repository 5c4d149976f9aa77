"""Pure pieces of ThreadWeaver: keys and merge components."""

from __future__ import annotations

from server.threadweaver.closure import _components
from server.threadweaver.model import Message, default_ut, rfc_key
from storage.ports import ThreadKey


class TestKeys:
    def test_default_ut_is_the_seeds_gid_colon_thread(self) -> None:
        """A new unified thread is named "$gid:$threadId" as in the seed."""
        assert default_ut(ThreadKey("g1", "t9")) == "g1:t9"

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


class TestComponents:
    def test_components_follow_edges_transitively(self) -> None:
        """a-b, b-c join into one component; d stays alone."""
        edges = {"a": {"b"}, "b": {"a", "c"}, "c": {"b"}}
        found = _components({"a", "b", "c", "d"}, edges)
        assert found["a"] == found["c"] == frozenset({"a", "b", "c"})
        assert found["d"] == frozenset({"d"})
