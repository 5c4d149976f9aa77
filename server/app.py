"""Builds and runs the Loom server: every service, health, reflection, graceful drain."""

from __future__ import annotations

import asyncio
import gc
import signal
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from server import registry
from server.config import ConfigError, Settings
from server.runtime import tracing
from server.runtime.auth import Authenticator
from server.runtime.erasures import open_recorder
from server.runtime.health import Health, HealthMonitor
from server.runtime.interceptor import RpcInterceptor
from server.runtime.limits import check_limits, limit_options
from server.runtime.logs import get_logger
from server.runtime.metrics import Metrics
from server.runtime.mounting import Resources
from server.runtime.policies import PolicyTable
from server.runtime.reflection import enable_reflection
from server.runtime.tls import CertificateReloader, check_tls, is_loopback, server_credentials
from storage.upgrades import EngineUnreadable, check_stores
from storage.versions import StoreTooNew

__all__ = ["LoomServer", "build_server", "check_startup", "serve"]

METADATA_LIMIT = 16 * 1024
"""Request metadata (headers, the bearer token among them) accepted per call, bytes."""

_log = get_logger("server")


DRAIN_REFUSE_S = 0.25
"""How long a draining server keeps refusing calls after its last running call finished."""
DRAIN_RETRY_AFTER_S = 1.0
"""The pause a drain refusal asks of the caller's retry policy (grpc-retry-pushback-ms):
longer than `DRAIN_REFUSE_S` plus the port's closing, so a retry never meets the shutdown."""


@dataclass
class LoomServer:
    """A started server and what must be closed with it."""

    server: grpc.aio.Server
    port: int
    health: Health
    grace_s: float
    closers: list[Callable[[], Awaitable[None]]] = field(default_factory=list)
    certificates: CertificateReloader | None = None
    """Present when serving TLS: SIGHUP calls its `request_reload`."""
    metrics: Metrics = field(default_factory=Metrics)
    metrics_port: int = 0
    """Where the Prometheus exposition listens (0: not served)."""
    monitor: HealthMonitor | None = None
    interceptor: RpcInterceptor | None = None
    drainers: list[Callable[[], None]] = field(default_factory=list)
    """What ends the services' long-lived streams once new calls are refused."""

    async def stop(self) -> None:
        """Graceful drain within `grace_s`: health NOT_SERVING, new calls UNAVAILABLE,
        running calls finish, then the port closes and background work and stores stop.

        New calls are refused by the interceptor rather than by grpc's own shutdown, which
        cancels calls that reached the server but had not started yet (CANCELLED is not
        retryable; UNAVAILABLE tells the client to go to another replica). Each refusal
        asks the caller's gRPC retry policy to wait `DRAIN_RETRY_AFTER_S` before its next
        attempt, and the port stays open `DRAIN_REFUSE_S` more after the last running call:
        calls already on their way are refused rather than cancelled, and the refused
        callers' retries reach the next server (or another replica), not this shutdown.
        """
        deadline = time.monotonic() + self.grace_s
        if self.monitor is not None:
            await self.monitor.stop()
        await self.health.enter_graceful_shutdown()
        if self.interceptor is not None:
            self.interceptor.drain(retry_after_s=DRAIN_RETRY_AFTER_S)
        for drain in self.drainers:
            drain()
        await self.metrics.wait_idle(deadline - time.monotonic())
        await asyncio.sleep(max(0.0, min(DRAIN_REFUSE_S, deadline - time.monotonic())))
        await self.server.stop(max(0.0, deadline - time.monotonic()))
        for close in reversed(self.closers):
            await close()
        self.metrics.close()


def _tune_runtime(settings: Settings) -> None:
    sys.setswitchinterval(settings.server.gil_switch_interval_s)
    # Large requests (20,000-recipient posts) allocate many objects; with CPython's default
    # gen-0 threshold (700) the collector runs constantly and its full passes stall the loop
    # for tens of ms. Everything alive at start-up is frozen out of the collector's walk.
    gc.set_threshold(settings.server.gc_gen0_threshold, 20, 50)
    gc.freeze()


async def _mount_all(
    server: grpc.aio.Server, settings: Settings, resources: Resources
) -> list[Callable[[], Awaitable[None]]]:
    """Mounts every service (closing what was opened if one fails).

    A `ValueError` while mounting is a store refusing its settings (the factory's
    unsupported engine, a keyspace of an earlier Cassandra inbox layout): it becomes a
    `ConfigError`, so `loom serve` stops with exit 2 and the message instead of a traceback.
    """
    closers: list[Callable[[], Awaitable[None]]] = []
    try:
        resources.erasures = await open_recorder(settings.erasure, settings.sqlite)
        closers.append(resources.erasures.close)
        for service in registry.SERVICES:
            view = resources.for_service(service.proto)
            closers += (await service.mount(server, settings, view)).closers
    except BaseException as exc:
        for close in reversed(closers):
            await close()
        if isinstance(exc, ValueError) and not isinstance(exc, ConfigError):
            raise ConfigError(str(exc)) from exc
        raise
    return closers


def _server_options(settings: Settings) -> list[tuple[str, int]]:
    """The grpc channel arguments of the listening server."""
    return [
        ("grpc.max_receive_message_length", settings.server.max_message_bytes),
        ("grpc.max_send_message_length", settings.server.max_message_bytes),
        ("grpc.so_reuseport", 1 if settings.server.reuse_port else 0),
        ("grpc.server.max_pending_requests", settings.server.max_pending_calls),
        ("grpc.server.max_pending_requests_hard_limit", settings.server.max_pending_calls),
        # grpc refuses metadata between its soft (8 KiB) and hard (16 KiB) limits at
        # random; one limit makes a large token's fate the same on every call.
        ("grpc.max_metadata_size", METADATA_LIMIT),
        ("grpc.absolute_max_metadata_size", METADATA_LIMIT),
        *limit_options(settings.server),
    ]


async def _serving(health: Health, resources: Resources) -> HealthMonitor:
    """Marks the server and every service SERVING, and starts following each service's
    engine breakers (the ones its mount took) with its health status."""
    for name in ("", *registry.proto_names()):
        await health.set(name, health_pb2.HealthCheckResponse.SERVING)
    monitor = HealthMonitor(
        health,
        {
            service: [resources.breaker(engine) for engine in sorted(engines)]
            for service, engines in resources.engines_of.items()
        },
    )
    monitor.start()
    return monitor


def check_startup(settings: Settings) -> None:
    """Raises `ConfigError` for unusable TLS or auth settings, creating no gRPC object (so a
    parent can check before it forks its workers)."""
    check_tls(settings.server)
    check_limits(settings.server)
    if settings.auth.enabled:
        Authenticator(settings.auth)


async def build_server(settings: Settings) -> LoomServer:
    """Opens the stores, registers every service and starts listening.

    TLS and auth settings are checked first (`ConfigError` naming the setting), so a
    misconfigured server never opens a store or a port.
    """
    tls = server_credentials(settings.server)
    auth = Authenticator(settings.auth) if settings.auth.enabled else None
    if tls is None and not is_loopback(settings.server.host):
        _log.warning(
            "PLAINTEXT on a non-loopback interface: anyone on the network can read and "
            "forge calls; set server.tls_cert_file and server.tls_key_file",
            host=settings.server.host,
        )
    _tune_runtime(settings)
    metrics = Metrics()
    policies = PolicyTable(registry.default_policies(), settings.policies)
    interceptor = RpcInterceptor(policies, auth, metrics)
    server = grpc.aio.server(
        interceptors=[interceptor],
        options=_server_options(settings),
        maximum_concurrent_rpcs=settings.server.max_concurrent_rpcs,
    )
    resources = Resources(settings.breaker, metrics)
    try:  # the data directory's files, all checked before any store opens (or is created)
        await check_stores(settings, only=("sqlite",))
    except StoreTooNew as exc:
        raise ConfigError(str(exc)) from exc
    except EngineUnreadable:
        pass  # a file that does not open: the store opening it says so, as it always did
    closers = await _mount_all(server, settings, resources)
    health = Health()
    health_pb2_grpc.add_HealthServicer_to_server(health, server)
    health_name = health_pb2.DESCRIPTOR.services_by_name["Health"].full_name
    enable_reflection(server, (*registry.proto_names(), health_name))
    address = f"{settings.server.host}:{settings.server.port}"
    port = server.add_secure_port(address, tls[0]) if tls else server.add_insecure_port(address)
    if port == 0:
        for close in reversed(closers):
            await close()
        raise OSError(f"cannot bind {address}")
    metrics_port = 0
    if settings.server.metrics_port:
        metrics_port = metrics.serve(settings.server.metrics_host, settings.server.metrics_port)
    await server.start()
    monitor = await _serving(health, resources)
    return LoomServer(
        server,
        port,
        health,
        settings.server.grace_s,
        closers,
        tls[1] if tls else None,
        metrics,
        metrics_port,
        monitor,
        interceptor,
        resources.drainers,
    )


async def serve(settings: Settings) -> None:
    """Runs until SIGTERM or SIGINT, then drains gracefully."""
    try:
        tracing.configure()  # in each serving process: the exporter's thread is not forked
    except ValueError as exc:
        raise ConfigError(str(exc)) from exc
    try:
        loom = await build_server(settings)
    except BaseException:
        tracing.shutdown()
        raise
    _log.info(
        "serving",
        port=loom.port,
        stores=str(settings.storage),
        tls="mutual" if loom.certificates and loom.certificates.mutual else bool(loom.certificates),
        auth=settings.auth.enabled,
        metrics_port=loom.metrics_port or None,
        tracing=tracing.enabled(),
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    if loom.certificates is not None:
        loop.add_signal_handler(signal.SIGHUP, loom.certificates.request_reload)
    await stop.wait()
    _log.info("draining", grace_s=settings.server.grace_s)
    await loom.stop()
    tracing.shutdown()  # exports the spans still buffered
    _log.info("stopped")
