"""``python -m loadtest <workload> [--json OUT] [--png OUT] [--target HOST:PORT] [options]``.

Parsing is two-pass so a workload's options exist only once that workload is chosen (and
imported): the first pass finds the workload name, the second parses everything.

``--target`` may be a deployment served over TLS (``--tls-ca``; mutual TLS with
``--tls-cert``/``--tls-key``) that wants a bearer token (``--token``, ``--token @FILE`` or
``$LOOM_TOKEN``). The token never reaches the report: neither its parameters nor its
command line.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from pathlib import Path

import grpc

from loadtest.channels import (
    PLAINTEXT,
    TOKEN_ENV,
    ChannelSecurity,
    SecurityError,
    usage_problem,
)
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
    secured = parser.add_argument_group(
        "a secured --target", "TLS, mutual TLS and bearer tokens, for --target only"
    )
    secured.add_argument(
        "--tls-ca", metavar="CA.pem", help="PEM CA bundle of the target's certificate: use TLS"
    )
    secured.add_argument(
        "--tls-cert", metavar="CERT.pem", help="PEM client certificate (mutual TLS; --tls-key)"
    )
    secured.add_argument("--tls-key", metavar="KEY.pem", help="the client certificate's PEM key")
    secured.add_argument(
        "--token",
        metavar="TOKEN|@FILE",
        help=f"bearer token sent with every call, or @FILE holding it (default: ${TOKEN_ENV})",
    )


def _security(parser: argparse.ArgumentParser, args: argparse.Namespace) -> ChannelSecurity:
    """What the TLS and token flags ask for; a usage error (exit 2) when they cannot apply."""
    given = [
        flag
        for flag, value in (
            ("--tls-ca", args.tls_ca),
            ("--tls-cert", args.tls_cert),
            ("--tls-key", args.tls_key),
            ("--token", args.token),
        )
        if value
    ]
    if args.target is None:
        if given:
            parser.error(
                f"{', '.join(given)}: for --target only (a server started here is plaintext "
                "on loopback, without auth)"
            )
        return PLAINTEXT
    problem = usage_problem(args.tls_ca, args.tls_cert, args.tls_key)
    if problem is not None:
        parser.error(problem)
    token = args.token if args.token is not None else os.environ.get(TOKEN_ENV) or None
    return ChannelSecurity.load(
        tls_ca=args.tls_ca, tls_cert=args.tls_cert, tls_key=args.tls_key, token=token
    )


def _redacted(argv: list[str], security: ChannelSecurity) -> list[str]:
    """The command line as the report records it: a token given on it becomes REDACTED."""
    secret = security.token
    if not secret:
        return argv
    return [arg.replace(secret, "REDACTED") for arg in argv]


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
    try:
        security = _security(parser, args)
    except SecurityError as exc:
        print(f"{parser.prog}: error: {exc}", file=sys.stderr)
        return 2

    report = Report(known.workload, ["loadtest", *_redacted(args_in, security)])
    report.params = {k: v for k, v in vars(args).items() if k not in ("json", "png", "token")} | {
        "connection": security.describe()
    }
    harness = Harness(report, target=args.target, server_log=args.server_log, security=security)
    failure: str | None = None
    try:
        asyncio.run(workload.run(args, harness))
    except grpc.aio.AioRpcError as exc:
        # A call outside the measured phases failed (they count their errors themselves):
        # the report so far is still written, and the exit code and stderr say why it ended.
        failure = f"{exc.code().name}: {exc.details()}"
        report.add_figure("failed", failure)

    print(report.table())
    if args.json is not None:
        report.write_json(args.json)
        print(f"wrote {args.json}")
    if args.png is not None:
        from loadtest.plots import render_png  # matplotlib loads only when a PNG is asked for

        render_png(report, args.png)
        print(f"wrote {args.png}")
    if failure is not None:
        hints = {
            "UNAUTHENTICATED": f" (the target wants a valid bearer token: --token or ${TOKEN_ENV})",
            "PERMISSION_DENIED": " (the token lacks the scope this workload's calls need)",
        }
        hint = hints.get(failure.split(":", 1)[0], "")
        print(f"{parser.prog}: failed: {failure}{hint}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
