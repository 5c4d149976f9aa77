"""Start a real ``loom serve`` for a workload, or check an already running one.

A load test against a server started by hand measures whatever that server was doing; a
workload that starts its own server on a fresh port and data directory is repeatable. The
server's output goes to a log file (never to the report's stdout), readiness is the
standard ``grpc.health.v1`` check, and shutdown is SIGTERM first — the server drains
gracefully on it — and SIGKILL only after a timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import socket
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

__all__ = [
    "SERVER_PIDS",
    "ServerStartError",
    "free_port",
    "loom_command",
    "loom_server",
    "wait_for_health",
]

SERVER_PIDS: dict[str, int] = {}
"""Target -> PID of each running server this process started (soak samples its RSS and fds)."""


class ServerStartError(RuntimeError):
    """The server exited or never reported SERVING; the message ends with its log tail."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (the kernel picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def loom_command() -> list[str]:
    """``loom`` from this interpreter's venv, else from PATH."""
    beside = Path(sys.executable).with_name("loom")
    if beside.exists():
        return [str(beside)]
    found = shutil.which("loom")
    if found is None:
        raise ServerStartError("no `loom` executable: install the project (pip install -e .)")
    return [found]


Connect = Callable[[str], grpc.aio.Channel]
"""Opens a channel to a target (``ChannelSecurity.channel`` for a secured ``--target``)."""


async def _check_once(target: str, timeout_s: float, connect: Connect) -> bool:
    async with connect(target) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        try:
            resp = await stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=timeout_s)
        except grpc.aio.AioRpcError:
            return False
        return bool(resp.status == health_pb2.HealthCheckResponse.SERVING)


async def wait_for_health(
    target: str,
    *,
    timeout_s: float = 30.0,
    process: asyncio.subprocess.Process | None = None,
    connect: Connect | None = None,
) -> None:
    """Poll the health service until SERVING; fail early if ``process`` exits.

    ``connect`` opens the channel (default: plaintext, what a server started here serves).
    """
    opener: Connect = connect if connect is not None else grpc.aio.insecure_channel
    deadline = time.monotonic() + timeout_s
    while True:
        if process is not None and process.returncode is not None:
            raise ServerStartError(f"server exited with code {process.returncode}")
        if await _check_once(target, 1.0, opener):
            return
        if time.monotonic() >= deadline:
            raise ServerStartError(f"{target} not SERVING after {timeout_s:.0f}s")
        await asyncio.sleep(0.1)


def _log_tail(path: Path, lines: int = 30) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


async def _stop(process: asyncio.subprocess.Process, timeout_s: float) -> None:
    if process.returncode is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        process.send_signal(signal.SIGTERM)
    try:
        await asyncio.wait_for(process.wait(), timeout_s)
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            process.kill()
        await process.wait()


@contextlib.asynccontextmanager
async def loom_server(
    port: int | None = None,
    data_dir: Path | None = None,
    extra_args: Sequence[str] = (),
    *,
    command: Sequence[str] | None = None,
    log_path: Path | None = None,
    env: Mapping[str, str] | None = None,
    startup_timeout_s: float = 30.0,
    stop_timeout_s: float = 10.0,
) -> AsyncIterator[str]:
    """Run ``<command> serve --port P --data-dir D <extra_args>`` and yield ``127.0.0.1:P``.

    ``env`` is added to this process's environment for the server only (engine addresses,
    table prefixes); the caller's own environment is left alone.

    ``port`` defaults to a free one, ``data_dir`` to a fresh temporary directory deleted
    afterwards, ``command`` to :func:`loom_command`, ``log_path`` to ``loom-server.log`` in
    the temporary directory (stdout and stderr both go there).
    """
    with tempfile.TemporaryDirectory(prefix="loom-loadtest-") as tmp:
        port = port if port is not None else free_port()
        data = data_dir if data_dir is not None else Path(tmp) / "data"
        data.mkdir(parents=True, exist_ok=True)
        log = log_path if log_path is not None else Path(tmp) / "loom-server.log"
        argv = [
            *(command if command is not None else loom_command()),
            "serve",
            "--port",
            str(port),
            "--data-dir",
            str(data),
            *extra_args,
        ]
        target = f"127.0.0.1:{port}"
        with log.open("ab") as log_file:
            process = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=log_file,
                stderr=log_file,
                env={**os.environ, **env} if env else None,
            )
            try:
                try:
                    await wait_for_health(target, timeout_s=startup_timeout_s, process=process)
                except ServerStartError as exc:
                    raise ServerStartError(f"{exc}; log {log}:\n{_log_tail(log)}") from None
                SERVER_PIDS[target] = process.pid
                yield target
            finally:
                SERVER_PIDS.pop(target, None)
                await _stop(process, stop_timeout_s)
