"""Every process Loom starts ends once the process that started it is gone, however it went.

Loom starts two kinds of process, and multiprocessing starts two helpers for them:

* the ``--workers N`` children (``server/processes.py``), forked from ``loom serve``;
* TemplateInduction's CPU pool workers (``server/templates/mount.py``), forked by
  multiprocessing's *forkserver*, itself started by the server next to multiprocessing's
  *resource tracker*.

A SIGKILL (an OOM kill, ``kill -9``, systemd's ``KillMode=process``) runs nothing in the dying
process, so each child has to notice on its own:

* A ``--workers`` child, on Linux, asks the kernel for SIGTERM when its parent dies
  (``prctl(PR_SET_PDEATHSIG)``: sent when the *thread* that forked it exits, here the parent's
  main thread, which lives as long as the parent) and then checks that its parent is still the
  one that forked it: a parent gone before the request was made sends nothing. SIGTERM drains
  the worker as a forwarded one would. Where there is no PDEATHSIG it watches instead, as a
  pool worker does.
* A pool worker's kernel parent is the forkserver, not the server, so PDEATHSIG would tie it to
  the wrong process. multiprocessing hands every child a *parent sentinel*: the read end of a
  pipe whose only writer is the process that asked for the child (the server). A daemon thread
  waits on it; end-of-file means the server is gone, and the worker SIGKILLs itself (it holds
  nothing to save). Already-closed at start means already gone: there is no race to close.
* The forkserver exits by itself once every holder of its "alive" pipe is gone (the server and
  the pool workers, which inherit it), and the resource tracker once every holder of its pipe
  is gone: both follow within moments of the pool workers.

The pool's way is plain POSIX (pipes and a thread) and holds wherever multiprocessing's
forkserver exists (Linux, macOS, the BSDs). Windows has neither ``fork`` nor ``forkserver``,
and ``loom serve`` does not run there.
"""

from __future__ import annotations

import ctypes
import multiprocessing
import os
import signal
import sys
import threading
from multiprocessing.connection import wait

__all__ = ["exit_with_parent", "exit_with_server"]

_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
_LIBC = ctypes.CDLL(None, use_errno=True) if sys.platform.startswith("linux") else None
"""Loaded at import, in the parent: a child forked from a threaded process calls, never loads."""


def _pdeathsig(signum: int) -> bool:
    """Linux: the kernel sends `signum` here when the thread that forked this process exits."""
    if _LIBC is None:
        return False
    return bool(_LIBC.prctl(_PR_SET_PDEATHSIG, signum, 0, 0, 0) == 0)


def _watch_sentinel(signum: int) -> bool:
    """A daemon thread sends `signum` here once multiprocessing's parent sentinel reads
    end-of-file (the parent is gone); False when this process has no such sentinel."""
    parent = multiprocessing.parent_process()
    sentinel = None if parent is None else parent.sentinel
    if sentinel is None:
        return False

    def watch() -> None:
        wait([sentinel])
        os.kill(os.getpid(), signum)

    threading.Thread(target=watch, name="loom-parent-watch", daemon=True).start()
    return True


def exit_with_parent(parent: int, signum: int) -> bool:
    """In a process forked by `parent`: `signum` to this process once `parent` is gone
    (PDEATHSIG and a pid check on Linux, else the parent sentinel). False when neither
    mechanism is available."""
    if _pdeathsig(signum):
        if os.getppid() != parent:  # the parent died before the request: no signal will come
            os.kill(os.getpid(), signum)
        return True
    return _watch_sentinel(signum)


def exit_with_server() -> None:
    """A pool worker's initializer: SIGKILL once the server that asked for it is gone."""
    _watch_sentinel(signal.SIGKILL)
