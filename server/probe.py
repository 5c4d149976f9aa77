"""``loom probe``: a container's or an orchestrator's health check, over ``grpc.health.v1``.

``--live`` asks the server's own status (service ""), which never follows an engine's
outage: a liveness check that fails restarts the process, and restarting it cannot bring a
database back. ``--ready`` asks "" and every Loom service (or only the ``--service``\\ s
given), each NOT_SERVING while a circuit breaker toward one of its engines is open: a
readiness check that fails takes the replica out of a load balancer until it recovers.

Exit 0 only when every answer is SERVING; 1 otherwise (NOT_SERVING, UNKNOWN,
SERVICE_UNKNOWN, unreachable, timeout), with one line on stderr per service that is not
serving. Never 2 for a failed check: Docker reserves that exit code of a HEALTHCHECK.

It reads the server's own environment, so the same ``loom probe --ready`` works inside the
server's container: the port from ``LOOM_SERVER__PORT``, and TLS when
``LOOM_SERVER__TLS_CERT_FILE`` is set (then the certificate itself is the trust root unless
a CA is given: a self-signed certificate verifies against itself). Health is an open
service (``auth.open_services``), so no token is needed.

The ``LOOM_PROBE__*`` variables may sit in the server's own environment (its container's):
``loom serve`` leaves that section to the probe (`server.config.CLIENT_SECTIONS`).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from server import registry

__all__ = ["Answer", "add_command", "check", "run"]

SERVING = health_pb2.HealthCheckResponse.SERVING
_ENV_PORT = "LOOM_SERVER__PORT"
_ENV_SERVER_CERT = "LOOM_SERVER__TLS_CERT_FILE"
_ENV_CA = "LOOM_PROBE__CA_FILE"
_ENV_CLIENT_CERT = "LOOM_PROBE__CLIENT_CERT_FILE"
_ENV_CLIENT_KEY = "LOOM_PROBE__CLIENT_KEY_FILE"


@dataclass(frozen=True, slots=True)
class Answer:
    """One service's answer: its status name (SERVING, NOT_SERVING, UNKNOWN,
    SERVICE_UNKNOWN, UNREACHABLE, TIMEOUT) and what the transport said, if anything."""

    service: str
    status: str
    detail: str = ""

    @property
    def serving(self) -> bool:
        return self.status == "SERVING"

    def __str__(self) -> str:
        name = self.service or '"" (the server)'
        return f"{name}: {self.status}" + (f" ({self.detail})" if self.detail else "")


def add_command(sub: Any) -> None:
    """Adds ``probe`` to the ``loom`` subcommands (`sub`: argparse's subparsers action)."""
    p = sub.add_parser(
        "probe",
        help="health check: exit 0 when the server (--live) or its services (--ready) serve",
    )
    mode = p.add_mutually_exclusive_group(required=True)
    mode.add_argument("--live", action="store_true", help='the server\'s own status ("")')
    mode.add_argument(
        "--ready", action="store_true", help='"" and every Loom service (or the --service ones)'
    )
    p.add_argument(
        "--service",
        action="append",
        default=[],
        help=f"with --ready: only this service (repeat for several; one of {', '.join(registry.proto_names())})",
    )
    p.add_argument(
        "--target",
        default=f"127.0.0.1:{os.environ.get(_ENV_PORT) or 50051}",
        help=f"host:port (default 127.0.0.1:${_ENV_PORT}, else 50051)",
    )
    p.add_argument(
        "--timeout", type=float, default=2.0, help="seconds for every answer (default 2)"
    )
    p.add_argument(
        "--ca-file",
        default=os.environ.get(_ENV_CA, ""),
        help=f"PEM CA bundle to trust (also {_ENV_CA}; implies TLS). "
        f"Default under TLS: ${_ENV_SERVER_CERT} itself",
    )
    p.add_argument(
        "--client-cert",
        default=os.environ.get(_ENV_CLIENT_CERT, ""),
        help=f"PEM client certificate for mutual TLS (also {_ENV_CLIENT_CERT})",
    )
    p.add_argument(
        "--client-key",
        default=os.environ.get(_ENV_CLIENT_KEY, ""),
        help=f"PEM key of --client-cert (also {_ENV_CLIENT_KEY})",
    )
    p.add_argument(
        "--authority",
        default="localhost",
        help="name the server's certificate must carry (default localhost)",
    )


def run(args: argparse.Namespace) -> int:
    """Runs ``loom probe``: 0 when every answer is SERVING, else 1 (2 for a bad flag)."""
    if args.live and args.service:
        print("loom probe: --service goes with --ready", file=sys.stderr)
        return 2
    if bool(args.client_cert) != bool(args.client_key):
        print("loom probe: --client-cert and --client-key go together", file=sys.stderr)
        return 2
    if args.timeout <= 0:
        print("loom probe: --timeout must be positive", file=sys.stderr)
        return 2
    services = [""] if args.live else ["", *(args.service or registry.proto_names())]
    try:
        credentials = _credentials(args)
    except OSError as exc:
        # Unreadable trust or client files: the check failed (1), whatever the server's state.
        print(f"loom probe: cannot read {exc.filename}: {exc.strerror}", file=sys.stderr)
        return 1
    answers = check(args.target, services, args.timeout, credentials, args.authority)
    for answer in answers:
        if not answer.serving:
            print(f"loom probe: {answer}", file=sys.stderr)
    return 0 if all(a.serving for a in answers) else 1


def check(
    target: str,
    services: Sequence[str],
    timeout_s: float,
    credentials: grpc.ChannelCredentials | None = None,
    authority: str = "localhost",
) -> list[Answer]:
    """Asks `target` for each service's health at once, all within `timeout_s`."""
    # Never through an HTTP proxy from the environment: the probe asks this host's server.
    options: list[tuple[str, Any]] = [("grpc.enable_http_proxy", 0)]
    if credentials is None:
        channel = grpc.insecure_channel(target, options=options)
    else:
        options.append(("grpc.ssl_target_name_override", authority))
        channel = grpc.secure_channel(target, credentials, options=options)
    with channel:
        stub = health_pb2_grpc.HealthStub(channel)
        calls = [
            (s, stub.Check.future(health_pb2.HealthCheckRequest(service=s), timeout=timeout_s))
            for s in services
        ]
        return [_answer(service, call) for service, call in calls]


def _answer(service: str, call: Any) -> Answer:
    try:
        reply = call.result()
    except grpc.RpcError as exc:
        code, detail = exc.code(), (exc.details() or "").splitlines()[:1]
        # Check answers NOT_FOUND for a name the server never registered.
        status = {
            grpc.StatusCode.NOT_FOUND: "SERVICE_UNKNOWN",
            grpc.StatusCode.UNAVAILABLE: "UNREACHABLE",
            grpc.StatusCode.DEADLINE_EXCEEDED: "TIMEOUT",
        }.get(code, code.name)
        return Answer(service, status, detail[0] if detail else "")
    return Answer(service, health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status))


def _credentials(args: argparse.Namespace) -> grpc.ChannelCredentials | None:
    """TLS credentials when the server serves TLS (its certificate is set in this
    environment) or a CA is given; None for plaintext."""
    server_cert = os.environ.get(_ENV_SERVER_CERT, "")
    if not (server_cert or args.ca_file):
        return None
    root = Path(args.ca_file or server_cert).read_bytes()
    key = cert = None
    if args.client_cert:
        cert = Path(args.client_cert).read_bytes()
        key = Path(args.client_key).read_bytes()
    return grpc.ssl_channel_credentials(root, key, cert)
