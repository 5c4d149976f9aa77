"""``python -m tests.leftovers VARIABLE=VALUE``: fails when a Loom process of a finished test run
is still alive, and kills it.

``make test`` runs pytest with a marker of its own in the environment (``LOOMTEST_RUN=<id>``),
which every process the suite starts inherits: `loom serve` and its ``--workers`` children,
each one's forkserver, CPU pool workers and resource tracker, the in-process servers' pools,
``loom dump``, the load harness. Once pytest has exited, a Python process still carrying the
marker is one the suite left behind: this waits ``--wait-s`` for such processes to go (a
forkserver follows its server within moments), then names those left with their memory,
SIGKILLs them and exits 1. Engines and clients in other languages are not Loom's and are not
counted. Linux only (``/proc``); elsewhere it says so and passes.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from loadtest.processes import Proc, kill_all, marked, rss_bytes, wait_gone

__all__ = ["left_behind", "main"]


def _is_python(proc: Proc) -> bool:
    program = Path(proc.command.split(" ", 1)[0]).name
    return program.startswith("python") or program == "loom"


def left_behind(variable: str, value: str, wait_s: float) -> list[Proc]:
    """The marked Python processes still alive after up to `wait_s`."""
    return wait_gone([p for p in marked(variable, value) if _is_python(p)], wait_s)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("marker", metavar="VARIABLE=VALUE", help="the run's environment marker")
    parser.add_argument("--wait-s", type=float, default=15.0, help="grace for exiting ones")
    args = parser.parse_args(argv)
    variable, _, value = str(args.marker).partition("=")
    if not variable or not value:
        parser.error("the marker is VARIABLE=VALUE, both non-empty")
    if not Path("/proc/self/environ").exists():
        print("leftovers: no /proc here, not checked")
        return 0
    left = left_behind(variable, value, args.wait_s)
    if not left:
        print("leftovers: the test run left no Loom process behind")
        return 0
    total = sum(rss_bytes(p) for p in left) / (1024 * 1024)
    print(f"leftovers: the test run left {len(left)} Loom processes alive ({total:.0f} MB):")
    for proc in left:
        print(f"  pid {proc.pid} ({rss_bytes(proc) / (1024 * 1024):.0f} MB): {proc.command[:160]}")
    kill_all(left)
    print("leftovers: killed them (SIGKILL)")
    return 1


if __name__ == "__main__":
    sys.exit(main())
