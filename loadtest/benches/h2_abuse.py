"""HTTP/2 abuse against one ``loom serve`` on SQLite, each attack while a legitimate caller
makes 20 GetUnreadCount calls/s (2 s deadline) on its own connection.

Each attack gets a fresh server (so its memory is its own). The attacks
(`loadtest.h2_attacks`) and the caller (`loadtest.h2_abuse`) are the ones
tests/reliability/test_h2_abuse.py asserts on. ``--tree`` serves from another source tree
(``PYTHONPATH`` puts it first), for the figures before a change::

    git archive <before> | tar -x -C /tmp/before
    .venv/bin/python -m loadtest.benches.h2_abuse --tree /tmp/before --json before.json
    .venv/bin/python -m loadtest.benches.h2_abuse --json after.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path
from typing import Any

from loadtest.h2_abuse import Outcome, measure
from loadtest.h2_attacks import ATTACKS, Scale
from loadtest.server import SERVER_PIDS, loom_server

__all__ = ["main"]

ROOT = Path(__file__).resolve().parents[2]


def _row(outcome: Outcome) -> str:
    during, after = outcome.during, outcome.after
    rss, fds = outcome.rss_kib, outcome.fds
    return (
        f"{outcome.attack:18} {outcome.attack_s:6.1f}s  during {during['ok']:3}/{during['calls']:<3}"
        f" p99 {during['p99_ms']:7.1f} ms  after {after['ok']:3}/{after['calls']:<3}"
        f"  rss +{(rss['peak'] - rss['before']) / 1024:6.1f} MiB peak,"
        f" +{(rss['after'] - rss['before']) / 1024:6.1f} after"
        f"  fds {fds['before']}->{fds['peak']}->{fds['after']}  server {outcome.server}"
    )


async def _one(name: str, tree: Path, scale: Scale, env: dict[str, str]) -> Outcome:
    async with loom_server(env={"PYTHONPATH": str(tree), **env}) as target:
        return await measure(name, target, SERVER_PIDS[target], scale)


async def _run(args: argparse.Namespace) -> list[dict[str, Any]]:
    env = dict(pair.split("=", 1) for pair in args.env)
    rows = []
    for name in args.attacks:
        outcome = await _one(name, args.tree, Scale(), env)
        print(_row(outcome), flush=True)
        rows.append(outcome.as_dict())
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tree", type=Path, default=ROOT, help="source tree to serve from")
    parser.add_argument("--attacks", nargs="+", default=list(ATTACKS), choices=list(ATTACKS))
    parser.add_argument("--env", nargs="*", default=[], help="LOOM_X__Y=value for the server")
    parser.add_argument("--json", type=Path, help="write every outcome here")
    args = parser.parse_args()
    rows = asyncio.run(_run(args))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
