"""Rule 4's leave-one-source-out choice: both subject modes count, the left-out source none."""

from __future__ import annotations

from loadtest.benches.templates_crossing import choose
from loadtest.benches.templates_loso import SourceFigures


def _f(precision: float, recall: float = 1.0, unformed: int = 0) -> SourceFigures:
    return SourceFigures(precision, recall, 1.0, unformed, 10)


def test_the_worst_source_of_either_mode_decides_and_the_left_out_one_never_does() -> None:
    """Ratio 2 lifts source b with real subjects but lowers c with one subject per sender
    below b's old figure: off wins while c counts; with c left out, 2 wins."""
    table = {
        0.0: {"real": {"a": _f(1.0), "b": _f(0.6)}, "sender": {"a": _f(1.0), "c": _f(0.7)}},
        2.0: {"real": {"a": _f(1.0), "b": _f(0.9)}, "sender": {"a": _f(1.0), "c": _f(0.5)}},
    }
    assert choose(table, None, default=2.0) == 0.0
    assert choose(table, "c", default=0.0) == 2.0
    assert choose(table, "b", default=2.0) == 0.0


def test_a_tie_goes_to_fewer_unformed_then_to_the_default() -> None:
    same = {"real": {"a": _f(0.8)}, "sender": {"a": _f(0.8)}}
    fewer = {"real": {"a": _f(0.8)}, "sender": {"a": _f(0.8, unformed=0)}}
    more = {"real": {"a": _f(0.8, unformed=2)}, "sender": {"a": _f(0.8)}}
    assert choose({0.0: same, 2.0: same}, None, default=2.0) == 2.0
    assert choose({0.0: same, 2.0: same}, None, default=0.0) == 0.0
    assert choose({0.0: more, 2.0: fewer}, None, default=0.0) == 2.0
