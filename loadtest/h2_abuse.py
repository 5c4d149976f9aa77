"""A legitimate caller measured beside an HTTP/2 attack (`loadtest.h2_attacks`), and the
server's resident memory and sockets read from /proc before, during and after it.

Shared by ``tests/reliability/test_h2_abuse.py`` (assertions) and
``loadtest/benches/h2_abuse.py`` (the figures in docs/benchmarks.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import grpc
from loom.v1 import inbox_pb2, inbox_pb2_grpc

from loadtest.h2_attacks import ATTACKS, Scale

__all__ = ["Legit", "Outcome", "descriptors", "measure", "resident_kib"]


def resident_kib(pid: int) -> int:
    """VmRSS of process `pid`, KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def _alive(pid: int) -> bool:
    return Path(f"/proc/{pid}").exists()


def descriptors(pid: int, kind: str = "socket:") -> int:
    """Open descriptors of process `pid` whose target starts with `kind` (sockets: what a
    peer can make the server hold; "" counts every one, the stores' files too, whose pools
    open connections on first use)."""
    count = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        with contextlib.suppress(OSError):
            count += os.readlink(f"/proc/{pid}/fd/{fd}").startswith(kind)
    return count


@dataclass(frozen=True, kw_only=True)
class _Call:
    started: float
    ok: bool
    code: str
    latency_s: float


class Legit:
    """GetUnreadCount `rate` times a second, each with a `deadline_s` deadline, on a
    channel (one connection) of its own; every call started is recorded."""

    def __init__(self, target: str, rate: float = 20.0, deadline_s: float = 2.0) -> None:
        self._channel = grpc.aio.insecure_channel(
            target, options=[("grpc.use_local_subchannel_pool", 1)]
        )
        self._stub = inbox_pb2_grpc.InboxStub(self._channel)
        self._rate, self._deadline_s = rate, deadline_s
        self.calls: list[_Call] = []
        self._pending: set[asyncio.Task[None]] = set()
        self._loop: asyncio.Task[None] | None = None

    async def _one(self) -> None:
        started = time.monotonic()
        request = inbox_pb2.GetUnreadCountRequest(inbox_id="legit")
        try:
            await self._stub.GetUnreadCount(request, timeout=self._deadline_s)
            code = "OK"
        except grpc.aio.AioRpcError as exc:
            code = exc.code().name
        self.calls.append(
            _Call(started=started, ok=code == "OK", code=code, latency_s=time.monotonic() - started)
        )

    async def _run(self) -> None:
        next_at = time.monotonic()
        while True:
            task = asyncio.create_task(self._one())
            self._pending.add(task)
            task.add_done_callback(self._pending.discard)
            next_at += 1 / self._rate
            await asyncio.sleep(max(0.0, next_at - time.monotonic()))

    async def __aenter__(self) -> Legit:
        await self._stub.GetUnreadCount(inbox_pb2.GetUnreadCountRequest(inbox_id="legit"))
        self._loop = asyncio.create_task(self._run())
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._loop is not None:
            self._loop.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._loop
        await asyncio.gather(*self._pending)
        await self._channel.close()

    def between(self, start: float, end: float) -> dict[str, Any]:
        """Success and latency of the calls started in [start, end)."""
        calls = [c for c in self.calls if start <= c.started < end]
        latencies = sorted(c.latency_s for c in calls if c.ok)
        codes: dict[str, int] = {}
        for c in calls:
            codes[c.code] = codes.get(c.code, 0) + 1
        p99 = latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))] if latencies else 0
        return {
            "calls": len(calls),
            "ok": sum(c.ok for c in calls),
            "codes": codes,
            "p99_ms": round(p99 * 1000, 1),
        }


@dataclass(kw_only=True)
class Outcome:
    """One attack's effect: the legitimate caller during and after it, the server's memory
    and sockets before, at their peak, and once settled, and what the server did."""

    attack: str
    during: dict[str, Any]
    after: dict[str, Any]
    rss_kib: dict[str, int]
    fds: dict[str, int]
    server: dict[str, Any]
    attack_s: float
    alive: bool = True

    def success(self, window: dict[str, Any]) -> float:
        return float(window["ok"] / window["calls"]) if window["calls"] else 0.0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


async def _sample(pid: int, peaks: dict[str, int]) -> None:
    while True:
        peaks["rss"] = max(peaks["rss"], resident_kib(pid))
        peaks["fds"] = max(peaks["fds"], descriptors(pid))
        await asyncio.sleep(0.05)


async def _settle(pid: int, fds_before: int, timeout_s: float) -> None:
    """Waits (at most `timeout_s`) for the server's sockets to come back."""
    for _ in range(int(timeout_s / 0.1)):
        if descriptors(pid) <= fds_before:
            return
        await asyncio.sleep(0.1)


async def measure(
    name: str, target: str, pid: int, scale: Scale, *, after_s: float = 2.0, settle_s: float = 10.0
) -> Outcome:
    """Runs attack `name` against `target` (served by process `pid`) while a `Legit`
    caller runs on its own connection; the caller goes on `after_s` once the attack ends."""
    host, port = target.rsplit(":", 1)
    async with Legit(target) as legit:
        await asyncio.sleep(0.5)
        before = {"rss": resident_kib(pid), "fds": descriptors(pid), "all": descriptors(pid, "")}
        peaks = dict(before)
        sampler = asyncio.create_task(_sample(pid, peaks))
        start = time.monotonic()
        server = await ATTACKS[name](host, int(port), scale)
        end = time.monotonic()
        await asyncio.sleep(after_s)
        sampler.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await sampler
    await _settle(pid, before["fds"], settle_s)
    alive = _alive(pid)
    return Outcome(
        attack=name,
        during=legit.between(start, end),
        after=legit.between(end, end + after_s),
        rss_kib={
            "before": before["rss"],
            "peak": peaks["rss"],
            "after": resident_kib(pid) if alive else 0,
        },
        fds={
            "before": before["fds"],
            "peak": peaks["fds"],
            "after": descriptors(pid) if alive else 0,
            "all_before": before["all"],
            "all_after": descriptors(pid, "") if alive else 0,
        },
        server=server,
        attack_s=round(end - start, 2),
        alive=alive,
    )
