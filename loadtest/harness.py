"""What a workload sees: the report, the server target, and the two load modes.

A workload module only decides *what* to call and *how much*; the harness owns timing,
error accounting, server lifecycle and reporting, so five services' workloads measure the
same way and their numbers can be compared.

A workload is a module ``loadtest/workloads/<name>.py`` that satisfies :class:`Workload`::

    def add_arguments(parser: argparse.ArgumentParser) -> None: ...
    async def run(args: argparse.Namespace, harness: Harness) -> None: ...

and opens every channel with :meth:`Harness.channel`, so a ``--target`` served over TLS (or
mutual TLS) that wants a bearer token is loaded the same way as a server started here.
"""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import grpc

from loadtest.channels import PLAINTEXT, ChannelSecurity
from loadtest.modes import Operation, run_closed_loop, run_fixed_rate
from loadtest.recorder import LatencyRecorder, PhaseStats
from loadtest.report import Report
from loadtest.server import loom_server, wait_for_health

__all__ = ["Harness", "Workload"]


class Workload(Protocol):
    """The contract of a workload module (modules satisfy Protocols structurally)."""

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        """Add this workload's options to the command line."""

    async def run(self, args: argparse.Namespace, harness: Harness) -> None:
        """Drive the load, recording phases and figures into ``harness.report``."""


class Harness:
    """Shared services for one run of one workload."""

    def __init__(
        self,
        report: Report,
        *,
        target: str | None = None,
        server_log: Path | None = None,
        security: ChannelSecurity | None = None,
    ) -> None:
        self.report = report
        self.target = target
        """``--target host:port``: use this running server instead of starting one."""
        self.server_log = server_log
        self.security = security if security is not None else PLAINTEXT
        """TLS and bearer token for ``--target`` (``--tls-*``, ``--token``); off otherwise."""

    def channel(self, target: str, options: Sequence[tuple[str, Any]] = ()) -> grpc.aio.Channel:
        """A channel to ``target`` (what :meth:`server` yielded) with the run's TLS and token."""
        return self.security.channel(target, options)

    @contextlib.asynccontextmanager
    async def server(
        self,
        *,
        data_dir: Path | None = None,
        extra_args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
    ) -> AsyncIterator[str]:
        """Yield the address to load: ``--target`` (health-checked) or a fresh ``loom serve``.

        ``data_dir``, ``extra_args`` and ``env`` (added to the server's environment) only
        apply to a server started here.
        """
        if self.target is not None:
            await wait_for_health(self.target, timeout_s=10.0, connect=self.channel)
            yield self.target
            return
        async with loom_server(
            data_dir=data_dir, extra_args=extra_args, log_path=self.server_log, env=env
        ) as target:
            yield target

    async def fixed_rate(
        self,
        phase: str,
        op: Operation,
        *,
        rate: float,
        duration_s: float | None = None,
        count: int | None = None,
        max_in_flight: int = 1000,
    ) -> PhaseStats:
        """Open-loop phase (see :func:`loadtest.modes.run_fixed_rate`), recorded as ``phase``."""
        rec = LatencyRecorder()
        stats = await run_fixed_rate(
            op,
            rate=rate,
            duration_s=duration_s,
            count=count,
            max_in_flight=max_in_flight,
            recorder=rec,
        )
        return self.report.add_phase(phase, stats, rec.samples_ms())

    async def closed_loop(
        self,
        phase: str,
        op: Operation,
        *,
        concurrency: int = 1,
        duration_s: float | None = None,
        count: int | None = None,
    ) -> PhaseStats:
        """Closed-loop phase (see :func:`loadtest.modes.run_closed_loop`), recorded as ``phase``."""
        rec = LatencyRecorder()
        stats = await run_closed_loop(
            op, concurrency=concurrency, duration_s=duration_s, count=count, recorder=rec
        )
        return self.report.add_phase(phase, stats, rec.samples_ms())
