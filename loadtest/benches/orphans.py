"""What a SIGKILLed ``loom serve`` leaves behind: its processes still alive, and their memory.

``python -m loadtest.benches.orphans [--workers 2] [--wait-s 10] [--json OUT]``

Starts ``loom serve`` on the embedded engine (with ``--workers N`` when given), submits
emails so TemplateInduction's CPU pool has started its processes, reads the whole process
tree from ``/proc`` (the server, its ``--workers`` children, each one's forkserver, pool
workers and resource tracker), then SIGKILLs the top process only — what an OOM kill, an
operator's ``kill -9`` or systemd with ``KillMode=process`` does. It reports the tree, and
how many of its processes are still alive, with their resident memory, ``--wait-s`` seconds
later. Whatever is left is SIGKILLed before the bench exits. Linux only (``/proc``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import time
from pathlib import Path

import grpc
from loom.v1 import templates_pb2, templates_pb2_grpc

from loadtest.processes import Proc, kill_all, rss_bytes, tree, wait_gone
from loadtest.server import SERVER_PIDS, loom_server

__all__ = ["main", "measure", "submit"]

_MB = 1024 * 1024


async def submit(target: str, emails: int) -> None:
    """`emails` emails through SubmitEmails: the CPU pool's workers run (and exist)."""
    async with grpc.aio.insecure_channel(target) as channel:
        stub = templates_pb2_grpc.TemplateInductionStub(channel)
        for start in range(0, emails, 100):
            batch = [
                templates_pb2.Email(
                    email_id=f"orphan-{i}",
                    sender="shop@orphans.example",
                    recipient_id=f"r{i % 7}",
                    subject=f"Order {i}",
                    html_body=f"<html><body><p>Order {i}</p><p>Thanks</p></body></html>",
                )
                for i in range(start, min(start + 100, emails))
            ]
            await stub.SubmitEmails(templates_pb2.SubmitEmailsRequest(emails=batch), timeout=30)


def _describe(procs: list[Proc]) -> list[dict[str, object]]:
    return [
        {"pid": p.pid, "rss_mb": round(rss_bytes(p) / _MB, 1), "command": p.command[:120]}
        for p in procs
    ]


async def measure(workers: int, wait_s: float, emails: int) -> dict[str, object]:
    """One SIGKILL of a fresh server: its tree before, what is alive `wait_s` later."""
    extra = ["--workers", str(workers)] if workers > 1 else []
    left: list[Proc] = []
    async with loom_server(extra_args=extra) as target:
        await submit(target, emails)
        top = SERVER_PIDS[target]
        procs = tree(top)
        before = _describe(procs)
        os.kill(top, signal.SIGKILL)
        killed = time.monotonic()
        left = await asyncio.to_thread(wait_gone, procs[1:], wait_s)
        gone_after_s = time.monotonic() - killed
        after = _describe(left)
    kill_all(left)
    return {
        "workers": workers,
        "wait_s": wait_s,
        "processes": len(procs),
        "rss_mb_before": round(sum(float(str(p["rss_mb"])) for p in before), 1),
        "left": len(after),
        "rss_mb_left": round(sum(float(str(p["rss_mb"])) for p in after), 1),
        "all_gone_after_s": None if after else round(gone_after_s, 2),
        "tree": before,
        "left_alive": after,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=1, help="loom serve --workers N")
    parser.add_argument("--wait-s", type=float, default=10.0, help="how long after the kill")
    parser.add_argument("--emails", type=int, default=1000, help="emails submitted first")
    parser.add_argument("--json", type=Path, help="write the result here")
    args = parser.parse_args(argv)
    result = asyncio.run(measure(args.workers, args.wait_s, args.emails))
    print(
        f"--workers {result['workers']}: {result['processes']} processes, "
        f"{result['rss_mb_before']} MB; SIGKILL of the top one; {args.wait_s:g} s later "
        f"{result['left']} alive, {result['rss_mb_left']} MB"
        + (f" (all gone after {result['all_gone_after_s']} s)" if not result["left"] else "")
    )
    for p in result["left_alive"]:  # type: ignore[attr-defined]
        print(f"  left: {p}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
