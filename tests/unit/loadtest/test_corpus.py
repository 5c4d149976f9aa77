"""The synthetic Gmail corpus: multi-centi-threads, same-subject mail, ground truth."""

from __future__ import annotations

from collections import Counter

import pytest

from loadtest.corpora.threadweaver import (
    Corpus,
    CorpusParams,
    GroundTruth,
    chain,
    generate,
    shuffled,
)

PARAMS = CorpusParams(
    users=8,
    discussions=2,
    messages_per_discussion=650,
    externals_per_discussion=1,
    automated_senders=2,
    automated_messages=60,
    short_threads=40,
    seed=3,
)


@pytest.fixture(scope="module")
def corpus() -> Corpus:
    return generate(PARAMS)


class TestCorpus:
    def test_no_thread_exceeds_gmails_cap(self, corpus: Corpus) -> None:
        """Gmail splits at 100 messages, so no (gid, thread) holds more than 100."""
        assert max(corpus.thread_sizes().values()) == 100

    def test_discussion_is_one_component_across_all_participants(self, corpus: Corpus) -> None:
        """Every centi-thread of every participant of a discussion unifies into ONE thread."""
        truth = corpus.ground_truth()
        for d in corpus.discussions:
            threads = {(gid, tid) for gid, tids in d.threads.items() for tid in tids}
            assert all(len(tids) >= 6 for tids in d.threads.values())
            gid, tid = next(iter(threads))
            assert threads == truth.component(gid, tid)

    def test_split_points_are_staggered_between_users(self, corpus: Corpus) -> None:
        """Each participant joined at a different offset, so their thread boundaries differ."""
        for d in corpus.discussions:
            offsets = list(d.join_offsets.values())
            assert len(set(offsets)) == len(offsets)

    def test_same_subject_mail_threads_unrelated_messages(self, corpus: Corpus) -> None:
        """Automated notifications share per-user threads though their Message-IDs differ."""
        by_thread: dict[tuple[str, str], set[str]] = {}
        for m in corpus:
            if "@notify." in m.rfc_message_id:
                by_thread.setdefault((m.gid, m.thread_id), set()).add(m.rfc_message_id)
        assert max(len(ids) for ids in by_thread.values()) > 1

    def test_messages_are_in_send_order_and_each_copy_shares_one_message_id(
        self, corpus: Corpus
    ) -> None:
        """Output is sorted by send time; one Message-ID never lands twice in one mailbox."""
        times = [m.sent_at_ms for m in corpus]
        assert times == sorted(times)
        copies = Counter((m.gid, m.rfc_message_id) for m in corpus)
        assert max(copies.values()) == 1

    def test_team_and_externals_are_disjoint(self, corpus: Corpus) -> None:
        """Externals have mailboxes but are never in the team gid list."""
        assert len(corpus.team_gids) == 8
        assert not set(corpus.team_gids) & set(corpus.external_gids)

    def test_deterministic_from_seed(self) -> None:
        """The same parameters give the same corpus; another seed gives another."""
        small = CorpusParams(users=3, messages_per_discussion=150, short_threads=5, seed=1)
        assert generate(small).messages == generate(small).messages
        other = CorpusParams(users=3, messages_per_discussion=150, short_threads=5, seed=2)
        assert generate(small).messages != generate(other).messages

    def test_shuffled_keeps_every_message(self, corpus: Corpus) -> None:
        """Shuffling reorders (deterministically) without losing or adding copies."""
        mixed = shuffled(corpus, seed=9)
        assert mixed != corpus.messages
        assert Counter(mixed) == Counter(corpus.messages)
        assert mixed == shuffled(corpus, seed=9)


class TestChains:
    @pytest.mark.parametrize("length", [1, 5, 20, 80])
    def test_a_chain_is_one_conversation_of_the_same_threads(self, length: int) -> None:
        """Whatever its length, a chain is the same 80 threads, all one component."""
        c = chain(length)
        assert len(c.threads) == 80
        assert {(m.gid, m.thread_id) for m in c.messages} == set(c.threads)
        truth = GroundTruth(c.messages)
        assert truth.component(*c.threads[0]) == frozenset(c.threads)
        assert len(c.groups) == length
        assert len(c.links) == length - 1

    def test_each_group_shares_one_message_and_links_join_neighbours(self) -> None:
        """Without the links the groups are `length` separate conversations."""
        c = chain(5)
        truth = GroundTruth(m for group in c.groups for m in group)
        assert len(truth.components()) == 5
        for link in c.links:
            assert len({m.rfc_message_id for m in link}) == 1
            assert len({m.gid for m in link}) == 2

    def test_a_length_that_does_not_divide_the_threads_is_refused(self) -> None:
        """A chain length must divide the chain's threads."""
        with pytest.raises(ValueError, match="multiple"):
            chain(7)
