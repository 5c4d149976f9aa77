"""The announcement-probe bench's grouping of slow calls into windows (no engine)."""

from loadtest.benches.announcement_probe import slow_windows


def test_fast_calls_make_no_window() -> None:
    """Calls under the slow threshold open no window."""
    assert slow_windows([(10.0, 0.002), (10.1, 0.029)]) == []


def test_slow_calls_close_together_share_a_window_and_a_gap_splits_them() -> None:
    """Slow calls within the gap share a window (start, end, worst, count); a longer gap starts
    another."""
    calls = [
        (100.0, 0.003),
        (100.5, 0.040),
        (100.6, 0.120),  # 0.1 s after the last slow one: same window
        (100.7, 0.004),
        (101.5, 0.050),  # 0.9 s later: a new window
    ]
    windows = slow_windows(calls)
    assert [(round(s, 2), round(e, 2), w, n) for s, e, w, n in windows] == [
        (0.5, 0.6, 0.120, 2),
        (1.5, 1.5, 0.050, 1),
    ]


def test_thresholds_are_the_callers() -> None:
    """The slow threshold and the gap are parameters."""
    calls = [(0.0, 0.010), (1.0, 0.020)]
    assert len(slow_windows(calls, slow_s=0.005, gap_s=2.0)) == 1
    assert len(slow_windows(calls, slow_s=0.005, gap_s=0.5)) == 2
