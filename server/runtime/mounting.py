"""What a service module gives the server, and what the server lends it.

Each implemented service has a ``server/<service>/mount.py`` with ``SERVICE`` (full proto
name), ``POLICIES`` (its per-method defaults) and ``async def mount(server, settings,
resources) -> Mounted``. `server.app` knows only this shape, so adding a service is one line.
"""

from __future__ import annotations

import copy
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from server.config import BreakerSettings
from server.runtime.breaker import CircuitBreaker
from server.runtime.erasures import ErasureRecorder
from server.runtime.metrics import Metrics

__all__ = ["Mounted", "Resources"]


@dataclass
class Mounted:
    """What a mounted service needs done at shutdown, after the server has drained."""

    closers: list[Callable[[], Awaitable[None]]] = field(default_factory=list)
    """Called in reverse order on shutdown (stop background work, close stores)."""


class Resources:
    """Shared by every service: one circuit breaker per engine, the server's metrics, and
    the erasure log."""

    def __init__(self, breaker_settings: BreakerSettings, metrics: Metrics | None = None) -> None:
        self._settings = breaker_settings
        self._breakers: dict[str, CircuitBreaker] = {}
        self.metrics = metrics or Metrics()
        """Where background stages register their queues (`Metrics.queue`)."""
        self.metrics.breakers = self.breakers
        self._service = ""
        self.engines_of: dict[str, set[str]] = {}
        """Service -> the engines whose breakers it has taken (its health follows them)."""
        self.drainers: list[Callable[[], None]] = []
        """Called when the server starts draining, before it waits for running calls: how
        a service ends its long-lived streams (shared by every service's view)."""
        self.erasures: ErasureRecorder | None = None
        """The erasure log, where subject erasures record themselves before they run
        (opened by the server before it mounts anything)."""

    def erasure_log(self) -> ErasureRecorder:
        """The erasure log; a service that erases subjects takes it when it mounts."""
        if self.erasures is None:
            raise RuntimeError("the erasure log is opened before any service mounts")
        return self.erasures

    def breakers(self) -> list[CircuitBreaker]:
        """Every breaker created so far."""
        return list(self._breakers.values())

    def for_service(self, service: str) -> Resources:
        """A view for one service's mount: the breakers it takes are recorded as its own."""
        view = copy.copy(self)  # shares the breaker and dependency maps
        view._service = service
        return view

    def breaker(self, engine: str) -> CircuitBreaker:
        """The breaker guarding `engine` (shared by every store on that engine).

        Taken through `for_service`, it records that the service depends on `engine`, so
        the service's health status follows this breaker.
        """
        if self._service:
            self.engines_of.setdefault(self._service, set()).add(engine)
        found = self._breakers.get(engine)
        if found is None:
            s = self._settings
            found = CircuitBreaker(
                engine,
                failure_threshold=s.failure_threshold,
                reset_timeout_s=s.reset_timeout_s,
                half_open_max_calls=s.half_open_max_calls,
            )
            self._breakers[engine] = found
        return found
