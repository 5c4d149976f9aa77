"""`server.runtime.lifetime`: a child that asks to end with its parent ends when the parent is
gone, including when the parent was gone before it asked (the SIGKILL end to end is
`tests/reliability/test_orphans.py`)."""

from __future__ import annotations

import multiprocessing
import os
import signal
import time

from server.runtime.lifetime import exit_with_parent

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
