"""`LoomClient`: one channel, one typed wrapper per Loom service, shared call defaults.

::

    async with LoomClient.connect("127.0.0.1:50051", retry=RetryPolicy()) as client:
        reply = await client.threadweaver.weave_message(request, timeout=2.0)

`rpc_method` maps a fully qualified service and RPC name onto the wrapper method, which is
how the CLI's generic ``call`` reaches every RPC and how a test proves none is missing.

Retries and timeouts come from two places that stack, so only one is on by default:

- the channel's gRPC service config (``service_config=``, e.g. ``clients/service_config.json``):
  per-method timeout, wait-for-ready and a retry policy for the RPCs that are safe to repeat,
  applied by gRPC itself to every attempt, including transparent retries of calls that never
  reached the server;
- the wrapper's `RetryPolicy` (``retry=``, default `NO_RETRY`): opt-in retries around the
  whole gRPC call, for a channel without a service config. With both, each wrapper attempt
  is a full gRPC call with its own retries, so the attempts multiply.
"""

from __future__ import annotations

import enum
import json
import os
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Final

import grpc
from google.protobuf import descriptor, descriptor_pool
from grpc_health.v1 import health_pb2, health_pb2_grpc

from ._calls import CallDefaults, Metadata
from ._errors import translate_errors
from ._inbox import InboxClient
from ._iterator import IteratorClient
from ._retry import NO_RETRY, RetryPolicy
from ._summary import SummaryClient
from ._templates import TemplatesClient
from ._threadweaver import ThreadWeaverClient

__all__ = [
    "SERVICE_ATTRIBUTES",
    "LoomClient",
    "ServiceConfig",
    "rpc_method",
    "service_config_options",
    "snake_case",
]

SERVICE_ATTRIBUTES = {
    "loom.v1.ThreadWeaver": "threadweaver",
    "loom.v1.Iterator": "iterator",
    "loom.v1.TemplateInduction": "templates",
    "loom.v1.Inbox": "inbox",
    "loom.v1.Summary": "summary",
}
"""Which `LoomClient` attribute wraps each service."""

# Responses of Iterator.StreamObjects and ListInbox pages may be large.
_DEFAULT_OPTIONS = (("grpc.max_receive_message_length", 64 * 1024 * 1024),)

_DEFAULT_TIMEOUT_S = 10.0

ServiceConfig = str | os.PathLike[str] | Mapping[str, Any]
"""A gRPC service config: the path of its JSON file, or the parsed JSON."""


class _Unset(enum.Enum):
    TIMEOUT = "10 s without a service config; with one, its per-method timeouts"


_UNSET: Final = _Unset.TIMEOUT


class LoomClient:
    """An async Loom client: ``client.<service>.<snake_case_rpc>(request, ...)``.

    Every method takes the request proto and returns the response proto (server streams
    return an async iterator), accepts ``timeout``, ``metadata`` and ``retry``, and raises
    `LoomError` on failure. Use `connect` (an async context manager) or wrap a channel you
    own with the constructor.
    """

    __slots__ = (
        "_channel",
        "_owns_channel",
        "inbox",
        "iterator",
        "summary",
        "templates",
        "threadweaver",
    )

    threadweaver: ThreadWeaverClient
    """``loom.v1.ThreadWeaver``."""
    iterator: IteratorClient
    """``loom.v1.Iterator``."""
    templates: TemplatesClient
    """``loom.v1.TemplateInduction``."""
    inbox: InboxClient
    """``loom.v1.Inbox``."""
    summary: SummaryClient
    """``loom.v1.Summary``."""

    def __init__(
        self,
        channel: grpc.aio.Channel,
        *,
        default_timeout: float | None = 10.0,
        metadata: Metadata = (),
        retry: RetryPolicy = NO_RETRY,
        stream_timeout: float | None = None,
        owns_channel: bool = False,
        token: str | None = None,
    ) -> None:
        sent = (*tuple(metadata), *(_bearer(token) if token else ()))
        defaults = CallDefaults(default_timeout, sent, retry, stream_timeout)
        self._channel = channel
        self._owns_channel = owns_channel
        self.threadweaver = ThreadWeaverClient(channel, defaults)
        self.iterator = IteratorClient(channel, defaults)
        self.templates = TemplatesClient(channel, defaults)
        self.inbox = InboxClient(channel, defaults)
        self.summary = SummaryClient(channel, defaults)

    @classmethod
    def connect(
        cls,
        target: str,
        *,
        default_timeout: float | _Unset | None = _UNSET,
        metadata: Metadata = (),
        retry: RetryPolicy = NO_RETRY,
        stream_timeout: float | None = None,
        credentials: grpc.ChannelCredentials | None = None,
        options: Sequence[tuple[str, Any]] = _DEFAULT_OPTIONS,
        token: str | None = None,
        service_config: ServiceConfig | None = None,
    ) -> LoomClient:
        """A client on a new channel to `target` (TLS when `credentials` is given).

        `service_config` is a gRPC service config (a JSON file's path, or its parsed JSON),
        typically ``clients/service_config.json``: the channel then applies its per-method
        timeouts, wait-for-ready and retries (``grpc.service_config`` with
        ``grpc.enable_retries``). `default_timeout` bounds each unary call, retries included
        (None: no deadline); it defaults to 10 s, or to None with a service config so that
        the config's per-method timeouts govern (given both, the shorter one wins).
        `metadata` is sent with every call; `retry` is the wrapper's own retry policy for
        calls that pass none (the default retries nothing: with a service config, gRPC
        retries; adding a wrapper policy multiplies the attempts); `token` is a bearer token
        (``loom token``) sent as ``authorization`` metadata with every call. TLS:
        ``credentials=grpc.ssl_channel_credentials(root_ca_pem)`` (add the client key and
        certificate for mutual TLS). Closing the client closes the channel.
        Raises ValueError for a service config that is not a JSON object, OSError for an
        unreadable file.
        """
        channel_options = list(options)
        if service_config is not None:
            channel_options += service_config_options(service_config)
        if default_timeout is _UNSET:
            default_timeout = None if service_config is not None else _DEFAULT_TIMEOUT_S
        if credentials is None:
            channel = grpc.aio.insecure_channel(target, options=channel_options)
        else:
            channel = grpc.aio.secure_channel(target, credentials, options=channel_options)
        return cls(
            channel,
            default_timeout=default_timeout,
            metadata=metadata,
            retry=retry,
            stream_timeout=stream_timeout,
            owns_channel=True,
            token=token,
        )

    @property
    def channel(self) -> grpc.aio.Channel:
        """The underlying channel, for stubs this client does not wrap."""
        return self._channel

    async def health(self, service: str = "", *, timeout: float | None = 5.0) -> str:
        """The ``grpc.health.v1`` status of `service` ("" = the server), e.g. ``"SERVING"``."""
        stub = health_pb2_grpc.HealthStub(self._channel)
        with translate_errors():
            reply = await stub.Check(
                health_pb2.HealthCheckRequest(service=service), timeout=timeout
            )
        return str(health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status))

    async def close(self) -> None:
        """Closes the channel if this client opened it."""
        if self._owns_channel:
            await self._channel.close()

    async def __aenter__(self) -> LoomClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()


def service_config_options(config: ServiceConfig) -> list[tuple[str, Any]]:
    """The channel options that make a channel follow the gRPC service config `config`.

    `config` is a JSON file's path or the parsed JSON. gRPC parses it when the channel is
    created and fails the channel's calls on an invalid config, so its shape is checked here
    first: a JSON object whose ``methodConfig`` (if any) is a list.
    """
    if isinstance(config, Mapping):
        parsed: object = dict(config)
        where = "service config"
    else:
        parsed = json.loads(Path(config).read_text(encoding="utf-8"))
        where = f"service config {os.fspath(config)}"
    if not isinstance(parsed, dict):
        raise ValueError(f"{where}: expected a JSON object")
    if not isinstance(parsed.get("methodConfig", []), list):
        raise ValueError(f"{where}: methodConfig must be a list")
    return [("grpc.service_config", json.dumps(parsed)), ("grpc.enable_retries", 1)]


def _bearer(token: str) -> tuple[tuple[str, str]]:
    return (("authorization", f"Bearer {token}"),)


def snake_case(rpc_name: str) -> str:
    """The wrapper method name of an RPC: ``"GetUnifiedThread"`` -> ``"get_unified_thread"``."""
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", rpc_name).lower()


def rpc_method(
    client: LoomClient, service: str, method: str
) -> tuple[descriptor.MethodDescriptor, Callable[..., Any]]:
    """The descriptor and bound wrapper method of ``service``'s RPC ``method``.

    `service` may be fully qualified (``loom.v1.Inbox``), bare (``Inbox``) or the client
    attribute (``inbox``); `method` the RPC name (``ListInbox``) or its snake_case form.
    Raises LookupError naming what is missing.
    """
    full_name = _service_name(service)
    service_descriptor = descriptor_pool.Default().FindServiceByName(full_name)
    by_name = {m.name: m for m in service_descriptor.methods}
    by_name.update({snake_case(m.name): m for m in service_descriptor.methods})
    found = by_name.get(method)
    if found is None:
        known = ", ".join(m.name for m in service_descriptor.methods)
        raise LookupError(f"{full_name} has no RPC {method!r} (it has: {known})")
    wrapper = getattr(client, SERVICE_ATTRIBUTES[full_name])
    bound = getattr(wrapper, snake_case(found.name), None)
    if bound is None:
        raise LookupError(
            f"LoomClient.{SERVICE_ATTRIBUTES[full_name]} lacks {snake_case(found.name)}"
        )
    return found, bound


def _service_name(service: str) -> str:
    for full_name, attribute in SERVICE_ATTRIBUTES.items():
        if service in (full_name, full_name.rsplit(".", 1)[-1], attribute):
            return full_name
    raise LookupError(f"unknown service {service!r} (known: {', '.join(SERVICE_ATTRIBUTES)})")
