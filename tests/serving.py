"""The two ways a test runs Loom, one per need, and what tests share around them.

* `running_server`: the server in this process, on a free port, with a grpc.aio channel —
  for everything that does not need a process of its own.
* `loom_process`: a real `loom serve` process — for what only a process shows: SIGKILL and
  SIGTERM, `--workers`, replicas, TLS reloads on SIGHUP, start-up refusals, its own log.

Every test starts its server one of these two ways; ports come from the load harness's
`free_port`, the one in the repository.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import grpc
from google.rpc import error_details_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_status import rpc_status
from prometheus_client.parser import text_string_to_metric_families

from loadtest.server import free_port
from server.app import LoomServer, build_server
from server.config import Settings

__all__ = [
    "Running",
    "Served",
    "eventually",
    "free_port",
    "loom_process",
    "run_loom",
    "running_server",
    "scrape_metrics",
    "violations",
]

T = TypeVar("T")


@dataclass
class Running:
    """A started server and a channel to it."""

    loom: LoomServer
    channel: grpc.aio.Channel
    settings: Settings

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.loom.port}"


@asynccontextmanager
async def running_server(settings: Settings) -> AsyncIterator[Running]:
    """Starts the server from `settings`, yields it with a channel, drains it afterwards."""
    loom = await build_server(settings)
    channel = grpc.aio.insecure_channel(
        f"127.0.0.1:{loom.port}",
        options=[("grpc.max_receive_message_length", 64 * 1024 * 1024)],
    )
    try:
        yield Running(loom, channel, settings)
    finally:
        await channel.close()
        await loom.stop()


async def eventually(
    probe: Callable[[], Awaitable[T]],
    ok: Callable[[T], bool],
    *,
    timeout_s: float = 30.0,
    interval_s: float = 0.05,
    what: str = "condition",
) -> T:
    """Polls `probe` until `ok(result)`; fails with `what` and the last result after
    `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while True:
        result = await probe()
        if ok(result):
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not met within {timeout_s}s; last: {result!r}")
        await asyncio.sleep(interval_s)


def violations(error: grpc.aio.AioRpcError) -> dict[str, str]:
    """The google.rpc.BadRequest field violations carried by an INVALID_ARGUMENT error."""
    status = rpc_status.from_call(error)
    assert status is not None
    found: dict[str, str] = {}
    for detail in status.details:
        bad = error_details_pb2.BadRequest()
        if detail.Unpack(bad):
            found.update({v.field: v.description for v in bad.field_violations})
    return found


@dataclass
class Served:
    """A `loom serve` process, where it listens, and what it has written to stderr so far."""

    process: subprocess.Popen[bytes]
    target: str
    log: Path

    def stderr(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")

    def log_lines(self) -> list[dict[str, object]]:
        """Its structured (JSON) log lines."""
        return [json.loads(x) for x in self.stderr().splitlines() if x.startswith("{")]


async def _serving(channel: grpc.aio.Channel) -> bool:
    try:
        reply = await health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(service=""), timeout=2.0
        )
    except grpc.aio.AioRpcError:
        return False
    return bool(reply.status == health_pb2.HealthCheckResponse.SERVING)


@asynccontextmanager
async def loom_process(
    tmp: Path,
    *args: str,
    env: dict[str, str] | None = None,
    credentials: grpc.ChannelCredentials | None = None,
    port: int | None = None,
    data_dir: Path | None = None,
    program: tuple[str, ...] = (),
) -> AsyncIterator[Served]:
    """`loom serve` as a real process on a free port, SIGTERMed (then killed) at the end.

    The environment is this process's minus LOOM_* (so a test's settings are its own),
    plus `env`. Health is polled over TLS when `credentials` are given. `program` replaces
    the ``loom`` command (an earlier release's tree: `tests/upgrade/release.py`).
    """
    port = port or free_port()
    log = tmp / f"loom-{port}.log"
    base = {k: v for k, v in os.environ.items() if not k.startswith("LOOM_")}
    command = [*(program or (str(Path(sys.executable).with_name("loom")),))]
    command += ["serve", "--port", str(port)]
    command += ["--data-dir", str(data_dir or tmp / f"data-{port}"), *args]
    process = _spawn(command, log, {**base, **(env or {})})
    served = Served(process, f"127.0.0.1:{port}", log)
    try:
        target = f"localhost:{port}" if credentials else served.target
        channel = (
            grpc.aio.secure_channel(target, credentials)
            if credentials
            else grpc.aio.insecure_channel(target)
        )
        async with channel:
            await eventually(
                lambda: _serving(channel) if process.poll() is None else _exited(),
                bool,
                timeout_s=60.0,
                interval_s=0.1,
            )
        if process.poll() is not None:
            raise AssertionError(f"loom serve exited {process.returncode}:\n{served.stderr()}")
        # With --workers, health answers from the first process to listen; a test that means
        # to reach every worker waits until each has logged that it serves.
        workers = int(args[args.index("--workers") + 1]) if "--workers" in args else 0
        if workers > 1:
            await eventually(
                lambda: _workers_serving(served), lambda n: n >= workers, timeout_s=60.0
            )
        yield served
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                await asyncio.to_thread(process.wait, 60)
            except subprocess.TimeoutExpired:
                process.kill()
                await asyncio.to_thread(process.wait)


def _spawn(command: list[str], log: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as sink:  # O_APPEND: every worker process's lines land whole
        return subprocess.Popen(command, stdout=sink, stderr=sink, env=env)


async def _workers_serving(served: Served) -> int:
    lines = served.log_lines()
    return len({x.get("worker") for x in lines if x.get("event") == "serving"})


async def _exited() -> bool:
    return True


def run_loom(
    *args: str, env: dict[str, str] | None = None, timeout_s: float = 60.0
) -> subprocess.CompletedProcess[str]:
    """`loom <args>` to completion (e.g. a `serve` that must refuse to start, or `token`);
    `timeout_s` only bounds a hung process (a long `loom load` gets more)."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("LOOM_")}
    return subprocess.run(
        [str(Path(sys.executable).with_name("loom")), *args],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        env={**base, **(env or {})},
        check=False,
    )


def scrape_metrics(port: int) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Every sample of the Prometheus exposition on `port`: (name, labels) -> value."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as reply:
        text = reply.read().decode()
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }
