"""`storage.versions`: the plan a store's recorded version and contents give, every input
included that no Loom writes."""

from __future__ import annotations

import pytest

from storage.versions import Layout, Step, StoreTooNew, plan


def _nothing(handle: object) -> None:
    del handle


LAYOUT = Layout(
    store="probe",
    current=3,
    steps=(Step(to=2, does="two", run=_nothing), Step(to=3, does="three", run=_nothing)),
)


class TestPlan:
    """`plan` for each kind of store."""

    def test_a_new_store_is_created_at_the_current_version(self) -> None:
        """Nothing stored, nothing recorded: no steps, created at 3."""
        found = plan(LAYOUT, "here", recorded=None, has_data=False)
        assert (found.new, found.start, found.steps, found.writes) == (True, 3, (), True)
        assert found.describe() == "here: not created yet; would be created at version 3"

    def test_data_without_a_record_is_version_1(self) -> None:
        """1.0.0's stores: every step runs."""
        found = plan(LAYOUT, "here", recorded=None, has_data=True)
        assert (found.start, [s.to for s in found.steps]) == (1, [2, 3])
        assert found.describe() == (
            "here: version 1 (unrecorded); would migrate to 3 (to 2: two; to 3: three)"
        )

    def test_a_recorded_version_runs_only_later_steps(self) -> None:
        """Recorded 2 (a killed migration, or an earlier release): step 3 only."""
        found = plan(LAYOUT, "here", recorded=2, has_data=True)
        assert [s.to for s in found.steps] == [3]

    def test_the_current_version_writes_nothing(self) -> None:
        """Recorded 3: nothing to do, nothing written."""
        found = plan(LAYOUT, "here", recorded=3, has_data=True)
        assert (found.steps, found.writes) == ((), False)
        assert found.describe() == "here: version 3, up to date"

    def test_a_newer_version_is_refused_naming_both(self) -> None:
        """Recorded 4 > 3: StoreTooNew with the store and both versions."""
        with pytest.raises(StoreTooNew) as refused:
            plan(LAYOUT, "sqlite file x (probe)", recorded=4, has_data=True)
        assert (refused.value.where, refused.value.found, refused.value.known) == (
            "sqlite file x (probe)",
            4,
            3,
        )
        assert "schema version 4" in str(refused.value)
        assert "(version 3)" in str(refused.value)

    @pytest.mark.parametrize("recorded", [0, -1], ids=["zero", "negative"])
    def test_a_version_below_1_is_an_error(self, recorded: int) -> None:
        """No Loom records 0 or less: a ValueError, not a plan."""
        with pytest.raises(ValueError, match="is not a version"):
            plan(LAYOUT, "here", recorded=recorded, has_data=True)


class TestLayout:
    """`Layout` checks its steps."""

    @pytest.mark.parametrize(
        "tos", [(2,), (3, 2), (2, 3, 4), (2, 2)], ids=["short", "reversed", "long", "repeated"]
    )
    def test_steps_must_lead_to_each_version_in_order(self, tos: tuple[int, ...]) -> None:
        """Steps to 2..current exactly, in order, or a ValueError."""
        steps = tuple(Step(to=t, does="x", run=_nothing) for t in tos)
        with pytest.raises(ValueError, match="steps must lead to versions"):
            Layout(store="probe", current=3, steps=steps)
