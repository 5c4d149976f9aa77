"""``loom serve --workers N``: N server processes sharing one port, for more than one core.

A ``grpc.aio`` server is one event loop, so one process uses one core. Like grpc's own
multiprocessing example, the parent reserves the port with an ``SO_REUSEPORT`` socket, then
forks the workers *before any gRPC object exists* (grpc's core does not survive a fork with
live channels or servers); each worker builds its own server on the same port with
``grpc.so_reuseport`` and the kernel spreads new connections over them.

What the workers share is only what lives in the stores: the SQLite files (WAL, a busy
timeout and ``BEGIN IMMEDIATE`` writes serialize the writers of every process), or the
distributed engines. What is per process: bulkheads, caches, metrics (worker *i* serves
metrics on ``metrics_port + i``), and in-process background stages — an Inbox fan-out runs
in the process that accepted it (its progress is in the store, so GetDelivery answers from
any worker).

The parent forwards SIGTERM/SIGINT (graceful drain) and SIGHUP (certificate reload) to every
worker. When a worker dies on its own, the parent stops the others and exits non-zero: a
supervisor (systemd, Kubernetes) restarts the whole server, rather than this process
quietly running with fewer cores. When the parent itself dies, even by SIGKILL, every worker
gets SIGTERM and drains (`server.runtime.lifetime`): none keeps serving the port unsupervised.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import socket
from collections.abc import Callable, Iterator
from dataclasses import replace
from types import FrameType

from server.config import Settings
from server.runtime.lifetime import exit_with_parent

__all__ = ["serve_workers"]

_FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


@contextlib.contextmanager
def _reserved_port(host: str, port: int) -> Iterator[int]:
    """Binds `host:port` (0 picks one) with SO_REUSEPORT for as long as the workers run."""
    family = socket.AF_INET6 if ":" in host.strip("[]") else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind((host.strip("[]"), port))
        yield int(sock.getsockname()[1])
    finally:
        sock.close()


def serve_workers(settings: Settings, workers: int, run: Callable[[Settings, int], int]) -> int:
    """Runs `run(settings, index)` in `workers` forked processes on one port; their worst
    exit code (0 when every worker drained cleanly after a signal)."""
    with _reserved_port(settings.server.host, settings.server.port) as port:
        shared = replace(settings, server=replace(settings.server, port=port, reuse_port=True))
        context = multiprocessing.get_context("fork")
        children: list[multiprocessing.process.BaseProcess] = []
        parent = os.getpid()
        for index in range(workers):
            worker = shared
            if shared.server.metrics_port:
                metrics = shared.server.metrics_port + index
                worker = replace(shared, server=replace(shared.server, metrics_port=metrics))
            child = context.Process(
                target=_child, args=(run, worker, index, parent), name=f"loom-worker-{index}"
            )
            child.start()
            children.append(child)
        stopping = False

        def forward(signum: int, _frame: FrameType | None) -> None:
            nonlocal stopping
            stopping = stopping or signum != signal.SIGHUP
            for child in children:
                if child.pid is not None and child.is_alive():
                    os.kill(child.pid, signum)

        previous = {sig: signal.signal(sig, forward) for sig in _FORWARDED}
        try:
            return _supervise(children, lambda: stopping)
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)


def _child(
    run: Callable[[Settings, int], int], settings: Settings, index: int, parent: int
) -> None:
    exit_with_parent(parent, signal.SIGTERM)  # a SIGKILLed parent: drain, then exit
    os._exit(run(settings, index))  # no atexit work inherited from the parent


def _supervise(
    children: list[multiprocessing.process.BaseProcess], stopping: Callable[[], bool]
) -> int:
    """Waits for every worker; one exiting unasked takes the others down (exit code >= 1)."""
    worst = 0
    remaining = list(children)
    while remaining:
        for child in list(remaining):
            child.join(timeout=0.2)
            code = child.exitcode
            if code is None:
                continue
            remaining.remove(child)
            if code != 0:
                worst = max(worst, code if code > 0 else 1)  # < 0: killed by a signal
            if not stopping():
                worst = max(worst, 1)
                for other in remaining:
                    other.terminate()  # SIGTERM: they drain
    return worst
