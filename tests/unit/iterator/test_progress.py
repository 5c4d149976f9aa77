"""Progress, completion, ledger agreement and ETA from a job's counters (pure)."""

from __future__ import annotations

from server.iterator import model
from server.iterator.progress import RateMeter, eta_seconds, ledger_disagreement, progress
from storage.ports import LedgerSummary

SPEC = model.JobSpec(0, (1,), (9,), 1, True, 30, "{}")
NAMES = ["user", "file"]
SPEC3 = model.JobSpec(0, (1,), (9,), 2, False, 30, "{}")
"""Three levels, emitting the third, without acks."""
DONE = {
    "tasks.0": 1, "tasks_done.0": 1, "found.0": 2, "closed.0": 2,
    "tasks.1": 2, "tasks_done.1": 2, "found.1": 50,
    "emitted_objects": 50, "emitted_chunks": 3, "acked_objects": 50, "acked_chunks": 3,
}  # fmt: skip


class TestProgress:
    def test_levels_report_discovery_completion_and_emission(self) -> None:
        """Upper levels complete by closed parents; the emitted level by what it emitted."""
        p = progress(SPEC, NAMES, DONE)
        user, file = p.levels
        assert (user.name, user.discovered, user.completed, user.emitted) == ("user", 2, 2, 0)
        assert (file.name, file.discovered, file.completed, file.emitted) == ("file", 50, 50, 50)
        assert file.acked == 50
        assert p.complete

    def test_acks_settle_only_jobs_that_require_them(self) -> None:
        """Without require_ack delivered chunks settle the job; with it only acked ones do."""
        delivered = {**DONE, "acked_chunks": 0, "delivered_chunks": 3}
        assert not progress(SPEC, NAMES, delivered).complete
        no_ack = model.JobSpec(0, (1,), (9,), 1, False, 30, "{}")
        assert progress(no_ack, NAMES, delivered).complete


class TestCompletion:
    def test_completion_needs_every_range_closed_and_every_chunk_settled(self) -> None:
        """Counters say complete only when ranges and settled chunks both add up."""
        counters = {"tasks.0": 1, "tasks_done.0": 1, "tasks.1": 2, "tasks_done.1": 2}
        counters |= {"tasks.2": 3, "tasks_done.2": 3, "emitted_chunks": 4, "found.2": 40}
        p = progress(SPEC3, ["e", "u", "f"], counters)
        assert p.iteration_complete
        assert not p.complete
        p = progress(SPEC3, ["e", "u", "f"], counters | {"delivered_chunks": 4})
        assert p.complete
        assert eta_seconds(p, 10.0) >= 0

    def test_eta_is_unknown_before_any_level_is_fully_discovered(self) -> None:
        """No level fully discovered: the ETA says unknown (negative)."""
        p = progress(SPEC3, ["e", "u", "f"], {"tasks.0": 1})
        assert eta_seconds(p, 100.0) < 0


class TestLedgerDisagreement:
    def test_a_ledger_that_agrees_says_nothing(self) -> None:
        """Counted ranges, chunks and objects match, nothing open or unsettled: ""."""
        p = progress(SPEC, NAMES, DONE)
        assert (
            ledger_disagreement(
                p, LedgerSummary(tasks=3, tasks_open=0, chunks=3, chunks_unsettled=0, objects=50)
            )
            == ""
        )

    def test_each_difference_is_named(self) -> None:
        """Every way the ledger differs from the counters is reported at once."""
        p = progress(SPEC, NAMES, DONE)
        why = ledger_disagreement(
            p, LedgerSummary(tasks=4, tasks_open=1, chunks=2, chunks_unsettled=1, objects=49)
        )
        assert why.split("; ") == [
            "4 ranges in the ledger, 3 counted",
            "1 ranges still open in the ledger",
            "2 chunks in the ledger, 3 counted",
            "49 objects in the ledger, 50 counted",
            "1 chunks unsettled in the ledger",
        ]


class TestRateMeter:
    def test_rate_follows_the_last_window_not_the_whole_history(self) -> None:
        """The slope from the last sample at or before the window to the newest."""
        meter = RateMeter(window_s=5.0)
        assert meter.rate() == 0.0
        for t in range(11):
            meter.add(100 * t, now=float(t))
        assert meter.rate() == 100.0
        for t in range(11, 21):
            meter.add(1000 + 1000 * (t - 10), now=float(t))
        assert meter.rate() == 1000.0


class TestEta:
    def test_after_iteration_the_rest_is_the_unsettled_objects(self) -> None:
        """Once every range is closed, the ETA is what remains to settle at the rate."""
        half = {**DONE, "acked_objects": 30}
        assert eta_seconds(progress(SPEC, NAMES, half), rate=10.0) == 2.0
        assert eta_seconds(progress(SPEC, NAMES, half), rate=0.0) < 0
