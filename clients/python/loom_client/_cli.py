"""``python -m loom_client``: poke a Loom server from a shell; every answer is printed as JSON.

::

    python -m loom_client --target 127.0.0.1:50051 health
    python -m loom_client weave --gid alice --thread t1 --rfc '<m1@example.com>'
    python -m loom_client unified --gid alice --thread t1 --team alice,bob
    python -m loom_client call Inbox GetUnreadCount --json '{"inbox_id": "alice"}'
    python -m loom_client list
    python -m loom_client --service-config clients/service_config.json unified --gid a --thread t

``call`` reaches every RPC: the JSON is parsed into the RPC's request type (proto field
names), a server stream prints one JSON document per message. A failed RPC prints its
code, message and field violations as one line of JSON on stderr and exits 1.

``--service-config PATH`` makes the channel follow a gRPC service config (per-method
timeouts, wait-for-ready, retries of the RPCs that are safe to repeat); ``--retries`` adds
the client's own retries on top, so use one or the other.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import grpc
from google.protobuf import descriptor_pool, json_format, message_factory
from google.protobuf.message import Message
from google.protobuf.timestamp_pb2 import Timestamp
from loom.v1 import threadweaver_pb2

from ._client import SERVICE_ATTRIBUTES, LoomClient, rpc_method
from ._errors import LoomError
from ._retry import NO_RETRY, RetryPolicy

__all__ = ["main"]

_DEFAULT_TIMEOUT_S = 10.0


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the CLI; returns the process exit code."""
    args = _parser().parse_args(argv)
    if args.command == "list":
        for full_name, method in _rpcs():
            print(f"{full_name} {method}")
        return 0
    try:
        return asyncio.run(_run(args))
    except LoomError as exc:
        print(json.dumps(_error_json(exc)), file=sys.stderr)  # one line: grep- and jq-able
        return 1
    except (LookupError, ValueError, OSError, json_format.ParseError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m loom_client",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--target",
        default=os.environ.get("LOOM_TARGET", "127.0.0.1:50051"),
        help="server address (default: $LOOM_TARGET or 127.0.0.1:50051)",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=None,
        help="deadline per call, seconds (default 10; with --service-config, the config's)",
    )
    parser.add_argument(
        "--retries",
        type=int,
        default=0,
        help="client retries on UNAVAILABLE / RESOURCE_EXHAUSTED (default 0)",
    )
    parser.add_argument(
        "--service-config",
        default=os.environ.get("LOOM_SERVICE_CONFIG", ""),
        metavar="PATH",
        help="gRPC service config JSON, e.g. clients/service_config.json "
        "(default: $LOOM_SERVICE_CONFIG)",
    )
    parser.add_argument(
        "--metadata",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="metadata sent with the call (repeatable)",
    )
    parser.add_argument(
        "--token",
        default=os.environ.get("LOOM_TOKEN", ""),
        help="bearer token (`loom token --scope ...`; default: $LOOM_TOKEN)",
    )
    parser.add_argument("--tls-ca", default="", help="PEM CA bundle: connect with TLS")
    parser.add_argument("--tls-cert", default="", help="PEM client certificate (mutual TLS)")
    parser.add_argument("--tls-key", default="", help="PEM client private key (mutual TLS)")
    commands = parser.add_subparsers(dest="command", required=True)

    health = commands.add_parser("health", help="grpc.health.v1 check")
    health.add_argument("--service", default="", help="service name ('' = whole server)")

    weave = commands.add_parser("weave", help="ThreadWeaver.WeaveMessage")
    weave.add_argument("--gid", required=True, help="mailbox owner")
    weave.add_argument("--thread", required=True, help="thread id in that mailbox")
    weave.add_argument("--rfc", default="", help="RFC 822 Message-ID, e.g. '<m1@example.com>'")
    weave.add_argument(
        "--sent-at", default=None, help="ISO 8601 time or Unix seconds (default: now)"
    )

    unified = commands.add_parser("unified", help="ThreadWeaver.GetUnifiedThread")
    unified.add_argument("--gid", required=True, help="mailbox owner of the thread")
    unified.add_argument("--thread", required=True, help="thread id in that mailbox")
    unified.add_argument("--team", default="", help="comma-separated gids to restrict to")
    unified.add_argument("--max-threads", type=int, default=0, help="spam guard (0 = default)")

    call = commands.add_parser("call", help="any RPC, request and response as JSON")
    call.add_argument("service", help="e.g. Inbox, loom.v1.Inbox or inbox")
    call.add_argument("method", help="e.g. ListInbox or list_inbox")
    call.add_argument("--json", default="{}", dest="body", help="request as JSON ('-' = stdin)")

    commands.add_parser("list", help="every SERVICE METHOD that `call` accepts")
    return parser


def _credentials(args: argparse.Namespace) -> grpc.ChannelCredentials | None:
    if not args.tls_ca:
        return None
    key = Path(args.tls_key).read_bytes() if args.tls_key else None
    cert = Path(args.tls_cert).read_bytes() if args.tls_cert else None
    return grpc.ssl_channel_credentials(Path(args.tls_ca).read_bytes(), key, cert)


async def _run(args: argparse.Namespace) -> int:
    metadata = tuple(_pair(item) for item in args.metadata)
    retry = RetryPolicy(max_attempts=args.retries + 1) if args.retries > 0 else NO_RETRY
    config = args.service_config or None
    timeout = args.timeout if args.timeout is not None or config else _DEFAULT_TIMEOUT_S
    async with LoomClient.connect(
        args.target,
        default_timeout=timeout,
        metadata=metadata,
        retry=retry,
        token=args.token or None,
        credentials=_credentials(args),
        service_config=config,
    ) as client:
        if args.command == "health":
            status = await client.health(args.service, timeout=timeout or _DEFAULT_TIMEOUT_S)
            print(json.dumps({"status": status}))
        elif args.command == "weave":
            message = threadweaver_pb2.WovenMessage(
                gid=args.gid,
                thread_id=args.thread,
                rfc_message_id=args.rfc,
                sent_at=_timestamp(args.sent_at),
            )
            request = threadweaver_pb2.WeaveMessageRequest(message=message)
            _print(await client.threadweaver.weave_message(request))
        elif args.command == "unified":
            teams = [gid.strip() for gid in args.team.split(",") if gid.strip()]
            _print(
                await client.threadweaver.get_unified_thread(
                    threadweaver_pb2.GetUnifiedThreadRequest(
                        gid=args.gid,
                        thread_id=args.thread,
                        team_gids=teams,
                        max_threads=args.max_threads,
                    )
                )
            )
        else:
            await _call(client, args.service, args.method, args.body)
    return 0


async def _call(client: LoomClient, service: str, method: str, body: str) -> None:
    found, bound = rpc_method(client, service, method)
    request = message_factory.GetMessageClass(found.input_type)()
    json_format.Parse(sys.stdin.read() if body == "-" else body, request)
    if found.server_streaming:
        async for item in bound(request):
            _print(item)
    else:
        _print(await bound(request))


def _rpcs() -> list[tuple[str, str]]:
    pool = descriptor_pool.Default()
    return [
        (name, m.name) for name in SERVICE_ATTRIBUTES for m in pool.FindServiceByName(name).methods
    ]


def _print(message: Message) -> None:
    print(json_format.MessageToJson(message, preserving_proto_field_name=True, indent=2))


def _error_json(exc: LoomError) -> dict[str, Any]:
    return {
        "code": exc.code.name,
        "message": exc.message,
        "field_violations": [
            {"field": v.field, "description": v.description} for v in exc.field_violations
        ],
        "request_id": exc.request_id,
    }


def _pair(item: str) -> tuple[str, str]:
    key, sep, value = item.partition("=")
    if not sep or not key:
        raise ValueError(f"metadata must be KEY=VALUE, got {item!r}")
    return key.strip().lower(), value


def _timestamp(text: str | None) -> Timestamp:
    stamp = Timestamp()
    if text is None:
        stamp.FromDatetime(datetime.now(UTC))
    elif text.replace(".", "", 1).isdigit():
        stamp.FromNanoseconds(int(float(text) * 1e9))
    else:
        moment = datetime.fromisoformat(text)
        stamp.FromDatetime(moment if moment.tzinfo else moment.replace(tzinfo=UTC))
    return stamp
