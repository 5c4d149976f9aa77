"""The in-memory background operations shared by Summary and TemplateInduction."""

from __future__ import annotations

import asyncio

import pytest

from server.runtime.errors import NotFound
from server.summary.operations import OperationRecord, Operations, OperationState


async def test_an_operation_reports_progress_then_done() -> None:
    """RUNNING while its work runs, with the progress the work sets; DONE after."""
    ops = Operations()
    gate = asyncio.Event()

    async def work(op: OperationRecord) -> None:
        op.done, op.total = 3, 10
        await gate.wait()
        op.done = 10

    started = ops.start("erase_recipients", work)
    await asyncio.sleep(0)
    seen = ops.get(started.operation_id)
    assert (seen.state, seen.done, seen.total) == (OperationState.RUNNING, 3, 10)
    gate.set()
    ended = await ops.wait(started.operation_id)
    assert (ended.state, ended.done, ended.error) == (OperationState.DONE, 10, "")


async def test_a_failing_operation_says_why() -> None:
    """An exception of the work ends the operation FAILED with its type and message."""
    ops = Operations()

    async def work(op: OperationRecord) -> None:
        raise RuntimeError("engine down")

    op = ops.start("erase_recipients", work)
    ended = await ops.wait(op.operation_id)
    assert ended.state is OperationState.FAILED
    assert ended.error == "RuntimeError: engine down"


async def test_ended_operations_are_forgotten_after_keep_s() -> None:
    """An ended operation is kept `keep_s`, then unknown (NOT_FOUND)."""
    now = [0.0]
    ops = Operations(keep_s=60, clock=lambda: now[0])

    async def work(op: OperationRecord) -> None:
        return

    op = ops.start("k", work)
    await ops.wait(op.operation_id)
    now[0] = 59
    assert ops.get(op.operation_id).state is OperationState.DONE
    now[0] = 61
    with pytest.raises(NotFound):
        ops.get(op.operation_id)


async def test_stop_cancels_running_operations() -> None:
    """Stopping the server ends a running operation FAILED (re-issuing it is safe)."""
    ops = Operations()

    async def work(op: OperationRecord) -> None:
        await asyncio.Event().wait()

    op = ops.start("k", work)
    await asyncio.sleep(0)
    await ops.stop()
    assert op.state is OperationState.FAILED
    assert op.error == "the server stopped"
