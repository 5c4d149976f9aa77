"""A stand-in for ``loom serve``: grpc.health.v1 only, SIGTERM drains and exits 0.

Lets the server helper be tested before (and independently of) the real server.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc


async def _serve(port: int) -> None:
    server = grpc.aio.server()
    servicer = health.aio.HealthServicer()
    await servicer.set("", health_pb2.HealthCheckResponse.SERVING)
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    print("fake loom serving", flush=True)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await stop.wait()
    print("fake loom draining", flush=True)
    await server.stop(grace=1)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("cmd", choices=["serve"])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--fail", action="store_true")
    args = parser.parse_args()
    if args.fail:
        print("fake loom: refusing to start", file=sys.stderr)
        return 3
    asyncio.run(_serve(args.port))
    return 0


if __name__ == "__main__":
    sys.exit(main())
