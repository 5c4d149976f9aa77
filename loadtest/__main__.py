"""``python -m loadtest <workload> [--json OUT] [--png OUT] [--target HOST:PORT] [options]``.

Parsing is two-pass so a workload's options exist only once that workload is chosen (and
imported): the first pass finds the workload name, the second parses everything.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

from loadtest.harness import Harness
from loadtest.registry import available, load
from loadtest.report import Report

__all__ = ["main"]


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", type=Path, metavar="OUT.json", help="write the JSON report")
    parser.add_argument("--png", type=Path, metavar="OUT.png", help="write latency plots")
    parser.add_argument(
        "--target", metavar="HOST:PORT", help="load this running server instead of starting one"
    )
    parser.add_argument(
        "--server-log", type=Path, metavar="PATH", help="where a started server's output goes"
    )


def main(argv: list[str] | None = None) -> int:
    """Run one workload and emit its report; the exit code is 0 unless the run failed."""
    args_in = sys.argv[1:] if argv is None else argv
    names = available()
    first = argparse.ArgumentParser(prog="python -m loadtest", add_help=False)
    first.add_argument("workload", nargs="?")
    known, _ = first.parse_known_args(args_in)
    if known.workload is None or known.workload not in names:
        print(f"usage: python -m loadtest {{{','.join(names)}}} [--help] ...", file=sys.stderr)
        if known.workload is not None:
            print(f"unknown workload {known.workload!r}", file=sys.stderr)
        return 0 if any(a in ("-h", "--help") for a in args_in) else 2

    workload = load(known.workload)
    parser = argparse.ArgumentParser(
        prog=f"python -m loadtest {known.workload}", description=workload.__doc__
    )
    parser.add_argument("workload", choices=[known.workload])
    _common(parser)
    workload.add_arguments(parser)
    args = parser.parse_args(args_in)

    report = Report(known.workload, ["loadtest", *args_in])
    report.params = {k: v for k, v in vars(args).items() if k not in ("json", "png")}
    harness = Harness(report, target=args.target, server_log=args.server_log)
    asyncio.run(workload.run(args, harness))

    print(report.table())
    if args.json is not None:
        report.write_json(args.json)
        print(f"wrote {args.json}")
    if args.png is not None:
        from loadtest.plots import render_png  # matplotlib loads only when a PNG is asked for

        render_png(report, args.png)
        print(f"wrote {args.png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
