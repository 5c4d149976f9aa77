"""The Iterator's values: stored job specs, queue messages, counter names, packed keys."""

from __future__ import annotations

import pytest

from server.iterator import model


class TestJobSpec:
    def test_the_stored_form_round_trips_with_tuple_keys(self) -> None:
        """A spec read back from its JSON equals the one written (keys come back as tuples)."""
        spec = model.JobSpec(1, (3, 7), (9, 2), 3, True, 45, '{"level":"file"}')
        assert model.JobSpec.loads(spec.dumps()) == spec


class TestWorkMessage:
    def test_a_message_round_trips(self) -> None:
        """The body names job, task and step, and nothing else."""
        message = model.WorkMessage("j1", "r.0.2", 5)
        assert message.dumps() == '["j1","r.0.2",5]'
        assert model.WorkMessage.loads(message.dumps()) == message

    @pytest.mark.parametrize(
        "body",
        ["", "not json", "{}", "[1, 2, 3]", '["j", "t"]', '["j", "t", "5"]', '["j", 4, 5]'],
        ids=["empty", "text", "object", "numbers", "short", "string-seq", "int-task"],
    )
    def test_a_body_that_is_not_ours_is_none(self, body: str) -> None:
        """A foreign or corrupt message is dropped, never raised into the worker."""
        assert model.WorkMessage.loads(body) is None


class TestCounters:
    def test_names_are_the_contract_between_steps_and_progress(self) -> None:
        """Per-level counters carry the level; settled counters follow require_ack."""
        assert [model.found(2), model.closed(2), model.tasks(2), model.tasks_done(2)] == [
            "found.2",
            "closed.2",
            "tasks.2",
            "tasks_done.2",
        ]
        assert model.settled(True, "chunks") == "acked_chunks"
        assert model.settled(False, "objects") == "delivered_objects"


class TestPacking:
    def test_positions_pack_to_int64s_and_unpack_flat(self) -> None:
        """Keys of equal width become little-endian int64s; unpacking gives them flat."""
        width, data = model.pack([(1, -2), (2**62, 0)])
        assert (width, len(data)) == (2, 32)
        assert model.unpack(width, data) == [1, -2, 2**62, 0]

    def test_no_positions_pack_to_nothing(self) -> None:
        """An empty chunk stores no bytes and unpacks to no ids."""
        assert model.pack([]) == (0, b"")
        assert model.unpack(0, b"") == []
