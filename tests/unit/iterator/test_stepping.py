"""One step of a range as a pure function: markers, children, chunks, splits and the
counters they move."""

from __future__ import annotations

from server.iterator import model
from server.iterator.stepping import StepInput, closed_parents, fan_out, parent_cut, plan_step
from storage.ports import TaskRecord

SPEC = model.JobSpec(0, (1,), (9,), 2, False, 30, "{}")
ROOT = TaskRecord(
    task_id="r",
    level=0,
    parents=(),
    first=(1,),
    last=(9,),
    after=(),
    upto=(),
    seq=0,
    done=False,
    rows=0,
    started_ms=0,
    spawned=(),
)


def _children(
    parents: tuple[int, ...],
    level: int = 1,
    after: tuple[int, ...] = (),
    upto: tuple[int, ...] = (),
) -> TaskRecord:
    return TaskRecord(
        task_id="r.0",
        level=level,
        parents=parents,
        first=(),
        last=(),
        after=after,
        upto=upto,
        seq=0,
        done=False,
        rows=0,
        started_ms=0,
        spawned=(),
    )


class TestPlanStep:
    def test_a_parent_chunk_creates_one_child_task_and_advances_the_marker(self) -> None:
        """Rows of a level above the emitted one become one children task for the next."""
        step = plan_step(ROOT, SPEC, StepInput([(1,), (2,), (5,)], limit=3, now_ms=7))
        assert step.task.after == (5,)
        assert step.task.seq == 1
        assert not step.task.done
        (child,) = step.new_tasks
        assert (child.task_id, child.level, child.parents) == ("r.0", 1, (1, 2, 5))
        assert step.counters == {"found.0": 3, "tasks.1": 1}
        assert step.chunk is None

    def test_a_short_read_closes_the_task(self) -> None:
        """Fewer rows than the LIMIT: the range is exhausted and counted closed."""
        step = plan_step(ROOT, SPEC, StepInput([(1,)], limit=3))
        assert step.task.done
        assert step.counters["tasks_done.0"] == 1

    def test_the_emitted_level_writes_a_chunk_with_a_stable_id(self) -> None:
        """Emitting rows packs them into a chunk named by task and step."""
        task = _children((1, 2), level=2)
        step = plan_step(task, SPEC, StepInput([(1, 10), (1, 11), (2, 12)], limit=5))
        assert step.chunk is not None
        assert step.chunk.chunk_id == "r.0/0"
        assert model.unpack(step.chunk.width, step.chunk.keys) == [1, 10, 1, 11, 2, 12]
        assert step.counters[model.EMITTED_OBJECTS] == 3
        assert step.counters["closed.1"] == 2  # both parents passed, the task is done

    def test_empty_parents_are_closed_when_passed(self) -> None:
        """Parents with no children count as closed once the read moves past them."""
        task = _children((1, 2, 3, 4))
        step = plan_step(task, SPEC, StepInput([(1, 5), (4, 9)], limit=2))
        assert step.counters["closed.0"] == 3  # 1, 2 and 3 are behind the marker (4, 9)
        done = plan_step(step.task, SPEC, StepInput([], limit=2))
        assert done.counters["closed.0"] == 1

    def test_split_cuts_the_rest_into_pieces_and_the_parent_closes_once(self) -> None:
        """A split keeps the first cut, creates pieces up to the old end, and only the last
        piece closes the split parent."""
        task = _children((7,))
        step = plan_step(
            task, SPEC, StepInput([(7, 1), (7, 2)], limit=2, split_points=[(7, 5), (7, 9)])
        )
        assert step.task.upto == (7, 5)
        pieces = [t for t in step.new_tasks if t.level == 1]
        assert [(t.after, t.upto) for t in pieces] == [((7, 5), (7, 9)), ((7, 9), ())]
        assert step.counters["tasks.1"] == 2
        first = plan_step(step.task, SPEC, StepInput([(7, 3), (7, 5)], limit=4))
        middle = plan_step(pieces[0], SPEC, StepInput([(7, 9)], limit=4))
        last = plan_step(pieces[1], SPEC, StepInput([(7, 12)], limit=4))
        closed = [s.counters.get("closed.0", 0) for s in (step, first, middle, last)]
        assert closed == [0, 0, 0, 1]

    def test_parents_fan_out_into_contiguous_tasks(self) -> None:
        """A chunk of parents becomes up to `fanout` children tasks of contiguous, near-equal
        parent lists, each counted as a range of the next level."""
        step = plan_step(ROOT, SPEC, StepInput([(i,) for i in range(1, 8)], limit=9, fanout=3))
        assert [t.parents for t in step.new_tasks] == [(1, 2, 3), (4, 5), (6, 7)]
        assert [t.task_id for t in step.new_tasks] == ["r.0c0", "r.0c1", "r.0c2"]
        assert step.counters["tasks.1"] == 3
        assert fan_out([1, 2], 8) == [[1], [2]]
        assert fan_out([], 4) == [[]]

    def test_a_parent_list_is_cut_between_parents_and_each_closes_once(self) -> None:
        """A prefix cut (p,) gives the second half of the parents away with no query; the
        range and the piece together close every parent exactly once."""
        task = _children((1, 3, 5, 7, 9), level=2, after=(1, 4))
        cut = parent_cut(task.parents, task.after, task.upto)
        assert cut == (7,)  # parents 3, 5 | 7, 9 remain after the marker's parent 1
        step = plan_step(task, SPEC, StepInput([(1, 5), (3, 1)], limit=2, split_points=[cut]))
        assert step.task.upto == (7,)
        (piece,) = [t for t in step.new_tasks if t.level == 2]
        assert (piece.after, piece.upto, piece.parents) == ((7,), (), task.parents)
        rest = plan_step(step.task, SPEC, StepInput([(3, 2), (5, 1)], limit=9))
        assert rest.task.done
        tail = plan_step(piece, SPEC, StepInput([(7, 1), (9, 4)], limit=9))
        closed = [s.counters.get("closed.1", 0) for s in (step, rest, tail)]
        assert closed == [1, 2, 2]  # 1 | 3, 5 | 7, 9: five parents, once each
        assert parent_cut((1, 3), (1, 4), ()) is None  # one parent ahead: nothing to give

    def test_closed_parents_counts_between_markers(self) -> None:
        """closed_parents counts parents whose end lies between old and new marker."""
        task = _children((1, 3, 5, 7), after=(3, 1))
        assert closed_parents(task, (5, 2), finished=False) == 1
        assert closed_parents(task, (5, 2), finished=True) == 3
