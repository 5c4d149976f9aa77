"""``loom``: the command-line entry point (``serve``, ``token``, ``probe`` (`server.probe`),
and the data commands of `server.portable.cli`)."""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import structlog

from server import probe, registry
from server.app import check_startup, serve
from server.config import ConfigError, Settings, load_settings
from server.portable import cli as data_commands
from server.processes import serve_workers
from server.runtime.auth import mint_token
from server.runtime.logs import configure_logging
from storage.engines import Port
from storage.upgrades import EngineUnreadable, check_stores
from storage.versions import StoreTooNew

__all__ = ["main"]


_STORE_FLAGS: tuple[tuple[Port[Any], str], ...] = tuple(
    (s.data.port, f"{s.proto.rsplit('.', 1)[-1]}'s state") for s in registry.SERVICES
)
"""The ports `loom serve` takes an engine flag for (``--inbox-store`` sets
``storage.inbox_store``), each offering its port's engines (`storage.engines`)."""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="loom", description="Loom messaging back-end server")
    sub = parser.add_subparsers(dest="command", required=True)
    s = sub.add_parser("serve", help="serve every Loom service over gRPC")
    s.add_argument("--config", type=Path, help="TOML settings file (also LOOM_CONFIG)")
    s.add_argument("--host", help="interface to bind (default 127.0.0.1)")
    s.add_argument("--port", type=int, help="TCP port (default 50051; 0 picks a free one)")
    s.add_argument("--data-dir", help="directory of the embedded SQLite files (default ./data)")
    for port, what in _STORE_FLAGS:
        s.add_argument(
            f"--{port.field.replace('_', '-')}",
            choices=port.names,
            help=f"engine of {what} (default {port.names[0]}; "
            f"{port.names[-1]} reads its [{port.names[-1]}] settings)",
        )
    s.add_argument("--log-level", help="debug, info, warning or error")
    s.add_argument("--tls-cert", help="PEM certificate chain: serve TLS (with --tls-key)")
    s.add_argument("--tls-key", help="PEM private key of --tls-cert")
    s.add_argument("--tls-client-ca", help="PEM CA bundle: require client certificates (mTLS)")
    s.add_argument("--metrics-port", type=int, help="Prometheus metrics port (0 = off)")
    s.add_argument(
        "--workers", type=int, help="server processes sharing the port, one per core (default 1)"
    )
    s.add_argument(
        "--check-only",
        action="store_true",
        help="print each store's schema version and what start-up would migrate; write nothing",
    )

    t = sub.add_parser("token", help="mint a bearer token the configured server accepts")
    t.add_argument("--config", type=Path, help="TOML settings file (also LOOM_CONFIG)")
    t.add_argument(
        "--scope",
        action="append",
        required=True,
        help="a scope such as inbox:read or iterator:admin (repeat for several)",
    )
    t.add_argument("--ttl", default="1h", help="lifetime: seconds, or 30m, 12h, 7d (default 1h)")
    t.add_argument("--subject", default="loom-cli", help="the token's sub claim")
    t.add_argument("--private-key", default="", help="PEM RSA/EC private key (RS256/ES256 issuers)")
    probe.add_command(sub)
    data_commands.add_commands(sub)
    return parser


def _seconds(text: str) -> float:
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    text = text.strip().lower()
    factor = units.get(text[-1:], 0)
    value = float(text[:-1] if factor else text) * (factor or 1)
    if value <= 0:
        raise ValueError(f"--ttl must be positive (got {text!r})")
    return value


def _token(args: argparse.Namespace) -> int:
    try:
        settings = load_settings(args.config)
        token = mint_token(
            settings.auth,
            args.scope,
            _seconds(args.ttl),
            subject=args.subject,
            private_key_file=args.private_key,
        )
    except (ValueError, OSError) as exc:
        print(f"loom token: {exc}", file=sys.stderr)
        return 2
    print(token)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Parses arguments and runs the command."""
    args = _parser().parse_args(argv)
    if args.command == "token":
        return _token(args)
    if args.command == "probe":
        return probe.run(args)
    if args.command != "serve":
        return data_commands.run(args)
    return _serve(args)


def _serve(args: argparse.Namespace) -> int:
    """Loads settings (flags win over env over TOML) and serves."""
    overrides: dict[str, dict[str, Any]] = {
        "server": {
            "host": args.host,
            "port": args.port,
            "log_level": args.log_level,
            "tls_cert_file": args.tls_cert,
            "tls_key_file": args.tls_key,
            "tls_client_ca_file": args.tls_client_ca,
            "metrics_port": args.metrics_port,
            "workers": args.workers,
        },
        "sqlite": {"data_dir": args.data_dir},
        "storage": {port.field: getattr(args, port.field) for port, _ in _STORE_FLAGS},
    }
    try:
        settings = load_settings(args.config, overrides=overrides)
    except (ValueError, OSError) as exc:
        print(f"loom: bad settings: {exc}", file=sys.stderr)
        return 2
    configure_logging(settings.server.log_level)
    if args.check_only:
        return _check_only(settings)
    if settings.server.workers < 1:
        print("loom: bad settings: server.workers must be >= 1", file=sys.stderr)
        return 2
    if settings.server.workers == 1:
        return run_server(settings)
    try:
        check_startup(settings)  # in the parent, once, before any worker is forked
    except ConfigError as exc:
        print(f"loom: cannot start: {exc}", file=sys.stderr)
        return 2
    return serve_workers(settings, settings.server.workers, run_server)


def _check_only(settings: Settings) -> int:
    """``--check-only``: each store's version and pending steps, read without writing; exit
    2 when a store is newer than this release (start-up would refuse it), 1 when an engine
    cannot be read."""
    try:
        queues = [level.name for level in settings.iterator.levels]
        lines = asyncio.run(check_stores(settings, queues=queues))
    except StoreTooNew as exc:
        print(f"loom: cannot start: {exc}", file=sys.stderr)
        return 2
    except EngineUnreadable as exc:
        print(f"loom: cannot check the stores: {exc}", file=sys.stderr)
        return 1
    print("\n".join(lines))
    return 0


def run_server(settings: Settings, worker: int | None = None) -> int:
    """One server process until SIGTERM/SIGINT: 0 after a clean drain."""
    if worker is not None:
        structlog.contextvars.bind_contextvars(worker=worker)
    if settings.server.use_uvloop:
        import uvloop

        runner = asyncio.Runner(loop_factory=uvloop.new_event_loop)
    else:
        runner = asyncio.Runner()
    try:
        with runner:
            runner.run(serve(settings))
    except ConfigError as exc:
        print(f"loom: cannot start: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"loom: cannot start: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
