"""`server.runtime.lifetime`: a child that asks to end with its parent ends when the parent is
gone, including when the parent was gone before it asked, by PDEATHSIG and by the parent
sentinel (the SIGKILL of `loom serve` end to end is `tests/reliability/test_orphans.py`)."""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
from multiprocessing.connection import Connection

from loadtest.processes import kill_all, tree, wait_gone
from server.runtime.lifetime import _watch_sentinel, exit_with_parent

_NOT_MY_PARENT = 1


def _child(parent: int) -> None:
    exit_with_parent(parent, signal.SIGTERM)
    time.sleep(30)
    os._exit(0)


class TestExitWithParent:
    def test_a_parent_already_gone_ends_the_child_at_once(self) -> None:
        """The pid check: a parent other than the one named (it died and the child was
        reparented before asking) sends the signal at once."""
        child = multiprocessing.get_context("fork").Process(target=_child, args=(_NOT_MY_PARENT,))
        child.start()
        child.join(timeout=20)
        assert child.exitcode == -signal.SIGTERM

    def test_a_living_parent_keeps_the_child(self) -> None:
        """The parent that forked it is alive: the child keeps running."""
        child = multiprocessing.get_context("fork").Process(target=_child, args=(os.getpid(),))
        child.start()
        child.join(timeout=1)
        alive = child.is_alive()
        child.terminate()
        child.join()
        assert alive


def _watching_grandchild(pids: Connection) -> None:
    """The middle process: forks a child that watches its parent sentinel (the way where
    there is no PDEATHSIG), reports its pid, then dies by SIGKILL."""
    child = multiprocessing.get_context("fork").Process(target=_watching)
    child.start()
    pids.send(child.pid)
    os.kill(os.getpid(), signal.SIGKILL)


def _watching() -> None:
    _watch_sentinel(signal.SIGTERM)  # nothing watching: it sleeps on, and the test fails
    time.sleep(30)
    os._exit(0)


class TestWatchSentinel:
    def test_a_sigkilled_parent_ends_the_watching_child(self) -> None:
        """The sentinel reads end-of-file once the parent is gone, and the child goes: the
        pool workers' way everywhere, and the `--workers` children's without PDEATHSIG."""
        receive, send = multiprocessing.Pipe(duplex=False)
        middle = multiprocessing.get_context("fork").Process(
            target=_watching_grandchild, args=(send,)
        )
        middle.start()
        grandchild = receive.recv()
        middle.join()
        assert middle.exitcode == -signal.SIGKILL
        left = wait_gone(tree(grandchild)[:1], 20)
        kill_all(left)
        assert left == []
