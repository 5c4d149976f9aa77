"""Processes as Linux's ``/proc`` shows them: a process tree, who is still alive, their RSS.

What the orphan bench (``loadtest/benches/orphans.py``), the SIGKILL test
(``tests/reliability/test_orphans.py``) and ``make test``'s leftover check
(``tests/leftovers.py``) read. A process is named by its pid *and* its start time, so a pid
the kernel reused for something else never counts as the same process.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "Proc",
    "alive",
    "descendants",
    "kill_all",
    "marked",
    "rss_bytes",
    "tree",
    "wait_gone",
]

PROC = Path("/proc")


@dataclass(frozen=True, kw_only=True)
class Proc:
    """One process: its pid, its start time (clock ticks since boot) and its command line."""

    pid: int
    started: int
    command: str


def _stat(pid: int) -> tuple[int, int] | None:
    """(parent pid, start time) of `pid`, or None when it is gone or a zombie."""
    try:
        text = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()  # the name may hold spaces and parentheses
    if fields[0] in {"Z", "X"}:
        return None  # exited, not yet reaped: it holds no memory and serves nothing
    return int(fields[1]), int(fields[19])


def _proc(pid: int) -> Proc | None:
    stat = _stat(pid)
    if stat is None:
        return None
    try:
        raw = (PROC / str(pid) / "cmdline").read_bytes()
    except OSError:
        return None
    command = raw.replace(b"\0", b" ").decode(errors="replace").strip()
    return Proc(pid=pid, started=stat[1], command=command)


def _pids() -> list[int]:
    return [int(p.name) for p in PROC.iterdir() if p.name.isdigit()]


def descendants(root: int) -> list[Proc]:
    """Every living process below `root` (children, their children, ...)."""
    parents: dict[int, list[int]] = {}
    for pid in _pids():
        stat = _stat(pid)
        if stat is not None:
            parents.setdefault(stat[0], []).append(pid)
    found: list[Proc] = []
    todo = list(parents.get(root, []))
    while todo:
        pid = todo.pop()
        proc = _proc(pid)
        if proc is not None:
            found.append(proc)
        todo.extend(parents.get(pid, []))
    return found


def tree(root: int) -> list[Proc]:
    """`root` and its descendants."""
    top = _proc(root)
    return ([top] if top else []) + descendants(root)


def alive(procs: list[Proc]) -> list[Proc]:
    """Those of `procs` still running (the same pid with the same start time, not a zombie)."""
    living = []
    for proc in procs:
        stat = _stat(proc.pid)
        if stat is not None and stat[1] == proc.started:
            living.append(proc)
    return living


def wait_gone(procs: list[Proc], timeout_s: float) -> list[Proc]:
    """Polls until none of `procs` is alive or `timeout_s` has passed; those still alive."""
    deadline = time.monotonic() + timeout_s
    while (living := alive(procs)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return living


def rss_bytes(proc: Proc) -> int:
    """Resident memory of `proc` (0 once it is gone)."""
    try:
        status = (PROC / str(proc.pid) / "status").read_text()
    except OSError:
        return 0
    for line in status.splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def marked(variable: str, value: str) -> list[Proc]:
    """Processes of this user whose environment holds ``variable=value`` (this one excepted)."""
    needle = f"{variable}={value}".encode()
    found = []
    for pid in _pids():
        if pid == os.getpid():
            continue
        try:
            environ = (PROC / str(pid) / "environ").read_bytes()
        except OSError:
            continue  # another user's process, or gone
        if needle in environ.split(b"\0"):
            proc = _proc(pid)
            if proc is not None:
                found.append(proc)
    return found


def kill_all(procs: list[Proc]) -> None:
    """SIGKILLs those of `procs` still alive."""
    for proc in alive(procs):
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGKILL)
