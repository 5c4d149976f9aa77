"""``loom serve``: the command-line entry point."""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from server.app import serve
from server.config import load_settings
from server.runtime.logs import configure_logging

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="loom", description="Loom messaging back-end server")
    sub = parser.add_subparsers(dest="command", required=True)
    s = sub.add_parser("serve", help="serve every Loom service over gRPC")
    s.add_argument("--config", type=Path, help="TOML settings file (also LOOM_CONFIG)")
    s.add_argument("--host", help="interface to bind (default 127.0.0.1)")
    s.add_argument("--port", type=int, help="TCP port (default 50051; 0 picks a free one)")
    s.add_argument("--data-dir", help="directory of the embedded SQLite files (default ./data)")
    s.add_argument(
        "--threadweaver-store",
        choices=["sqlite", "bigtable", "cassandra"],
        help="engine of ThreadWeaver's state (default sqlite)",
    )
    s.add_argument(
        "--summary-store",
        choices=["sqlite", "dynamodb"],
        help="engine of Summary's state (default sqlite; dynamodb reads [dynamodb] settings)",
    )
    s.add_argument(
        "--inbox-store",
        choices=["sqlite", "cassandra"],
        help="engine of Inbox's state (default sqlite; cassandra reads [cassandra] settings)",
    )
    s.add_argument(
        "--templates-store",
        choices=["sqlite", "bigtable"],
        help="engine of TemplateInduction's state (default sqlite; bigtable reads [bigtable])",
    )
    s.add_argument("--log-level", help="debug, info, warning or error")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Parses arguments, loads settings (flags win over env over TOML) and serves."""
    args = _parser().parse_args(argv)
    overrides: dict[str, dict[str, Any]] = {
        "server": {"host": args.host, "port": args.port, "log_level": args.log_level},
        "sqlite": {"data_dir": args.data_dir},
        "storage": {
            "threadweaver_store": args.threadweaver_store,
            "summary_store": args.summary_store,
            "inbox_store": args.inbox_store,
            "templates_store": args.templates_store,
        },
    }
    try:
        settings = load_settings(args.config, overrides=overrides)
    except (ValueError, OSError) as exc:
        print(f"loom: bad settings: {exc}", file=sys.stderr)
        return 2
    configure_logging(settings.server.log_level)
    if settings.server.use_uvloop:
        import uvloop

        runner = asyncio.Runner(loop_factory=uvloop.new_event_loop)
    else:
        runner = asyncio.Runner()
    with runner:
        runner.run(serve(settings))
    return 0


if __name__ == "__main__":
    sys.exit(main())
