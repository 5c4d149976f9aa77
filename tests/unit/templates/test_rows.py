"""The clustering server's cached row state: Algorithm 2's decisions without a store count."""

from __future__ import annotations

from server.templates.rows import FULL_ROW_FACTOR, Decision, RowState, RowStates, decide
from storage.ports import ClusterCounts

K, S, A = 5, 200, 3_600_000


class TestDecide:
    def test_below_k_nothing_happens(self) -> None:
        """Fewer than k recipients: no formation, whatever else the row holds."""
        assert decide(RowState(500, K - 1, None), K, S, A, 0) == Decision()
        assert decide(RowState(500, K - 1, 10), K, S, A, 0) == Decision()

    def test_kth_recipient_without_template_forms(self) -> None:
        """n >= k and no template: form at once (Algorithm 2, line 12)."""
        assert decide(RowState(K, K, None), K, S, A, 0) == Decision(form=True)

    def test_template_ages_and_fills(self) -> None:
        """Re-form at age >= A; full at s >= S; a formed row is checked for explanation."""
        young = decide(RowState(S - 1, 50, 1_000), K, S, A, 2_000)
        assert young == Decision(formed=True)
        old = decide(RowState(S, 50, 1_000), K, S, A, 1_000 + A)
        assert old == Decision(reform=True, full=True, formed=True)

    def test_a_loom_row_reforms_as_it_grows(self) -> None:
        """Loom's row re-forms at x1.5 recipients (and +k) until it holds 4 x S emails; one
        whose formation left emails out keeps re-forming beyond; the paper's never does."""
        st = RowState(40, 20, 1_000, formed_users=20, regrow=True)
        assert not decide(st, K, S, A, 2_000).reform
        st.users = 29
        assert not decide(st, K, S, A, 2_000).reform
        st.users = 30
        assert decide(st, K, S, A, 2_000).reform
        st.emails = FULL_ROW_FACTOR * S
        assert not decide(st, K, S, A, 2_000).reform
        st.left_out = True
        assert decide(st, K, S, A, 2_000).reform
        st.regrow = False
        assert not decide(st, K, S, A, 2_000).reform


class TestRowStates:
    def test_only_undecided_rows_need_a_count(self) -> None:
        """Unknown rows and rows without a template at n >= k are counted; formed rows not."""
        now = [0.0]
        rows = RowStates(10, 60.0, K, lambda: now[0])
        assert rows.needs_count(b"r")
        rows.counted(b"r", ClusterCounts(emails=3, users=3, template_at_ms=None))
        assert rows.needs_count(b"r")
        rows.formed(b"r", emails=6, users=K, template_at_ms=99, left_out=False)
        assert not rows.needs_count(b"r")
        st = rows.stored(b"r", 4)
        assert st is not None
        assert (st.emails, st.users, st.template_at_ms) == (10, K + 4, 99)
        now[0] = 61.0  # another replica may have changed the row: count it again
        assert rows.needs_count(b"r")
        assert rows.stored(b"r", 1) is None

    def test_a_count_keeps_what_this_server_formed(self) -> None:
        """A count refreshes s and n; the formation's n and left-out flag stay."""
        rows = RowStates(10, 60.0, K, lambda: 0.0)
        rows.formed(b"r", emails=8, users=8, template_at_ms=None, left_out=True)
        st = rows.counted(b"r", ClusterCounts(emails=12, users=9, template_at_ms=500))
        assert (st.emails, st.users, st.template_at_ms) == (12, 9, 500)
        assert (st.formed_users, st.left_out) == (8, True)

    def test_emails_stored_during_a_formation_still_count(self) -> None:
        """A formation read 20 recipients while 15 more were stored: the row keeps 35 (its
        upper bound), so its next re-formation (at x1.5 of 20) is due, not forgotten."""
        rows = RowStates(10, 60.0, K, lambda: 0.0)
        rows.formed(b"r", emails=20, users=20, template_at_ms=1, left_out=False, regrow=True)
        st = rows.stored(b"r", 15)
        assert st is not None
        rows.formed(b"r", emails=20, users=20, template_at_ms=2, left_out=False, regrow=True)
        st = rows.get(b"r")
        assert st is not None
        assert (st.emails, st.users, st.formed_users) == (35, 35, 20)
        assert decide(st, K, S, A, 3).reform
