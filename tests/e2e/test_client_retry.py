"""A client with the service config rides through a server restart; without it, it does not.

`loom serve` runs as a process on SQLite. Three workers of one `LoomClient` weave a message
and read its unified thread back, call after call, while the server is SIGTERMed (it drains
and exits) and started again on the same port and data directory. With
``clients/service_config.json`` (wait-for-ready, retries on UNAVAILABLE for these idempotent
RPCs) no call fails; the same client without it sees UNAVAILABLE. Either way every
acknowledged weave is in the restarted server's store.

Calls are tagged with the phase they started and ended in (up, restarting, up again), so the
test knows some calls really were made while no server could answer: it never measures time.
"""

from __future__ import annotations

import asyncio
import signal
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import pytest
from google.protobuf.timestamp_pb2 import Timestamp
from loom.v1 import common_pb2, threadweaver_pb2
from loom_client import LoomClient, LoomError

from loadtest.server import free_port
from tests.serving import loom_process

REPO = Path(__file__).resolve().parents[2]
SERVICE_CONFIG = REPO / "clients" / "service_config.json"
WORKERS = 3
PROGRESS = 20
"""Weaves each phase with a server must acknowledge before the test moves on."""

UP, RESTARTING, UP_AGAIN = 0, 1, 2


@dataclass
class Ride:
    """What the workers did, tagged by phase."""

    phase: int = UP
    stop: bool = False
    acknowledged: list[common_pb2.ThreadRef] = field(default_factory=list)
    failures: Counter[grpc.StatusCode] = field(default_factory=Counter)
    ok: Counter[tuple[int, int]] = field(default_factory=Counter)
    """(phase at start, phase at end) of each call that succeeded."""
    messages: list[str] = field(default_factory=list)
    """Each failure's code, message and phase, for the assertion's report."""
    acked_in: Counter[int] = field(default_factory=Counter)
    """Acknowledged weaves by the phase their answer came in."""

    def crossed(self) -> int:
        """Successful calls made while no server could answer, or spanning the restart."""
        return sum(
            n for (start, end), n in self.ok.items() if start == RESTARTING or end > start + 1
        )


async def _worker(client: LoomClient, ride: Ride, worker: int) -> None:
    """Weave message i, read its thread back; a failure is counted and the next i follows."""
    i = 0
    while not ride.stop:
        i += 1
        ref = common_pb2.ThreadRef(gid=f"ride-{worker}", thread_id=f"t{i}")
        message = threadweaver_pb2.WovenMessage(
            gid=ref.gid,
            thread_id=ref.thread_id,
            rfc_message_id=f"<ride-{worker}-{i}@retry.example>",
            sent_at=Timestamp(seconds=1_700_000_000 + i),
        )
        started = ride.phase
        try:
            await client.threadweaver.weave_message(
                threadweaver_pb2.WeaveMessageRequest(message=message)
            )
            ride.acknowledged.append(ref)
            ride.acked_in[ride.phase] += 1
            ride.ok[started, ride.phase] += 1
            started = ride.phase
            reply = await client.threadweaver.get_unified_thread(
                threadweaver_pb2.GetUnifiedThreadRequest(gid=ref.gid, thread_id=ref.thread_id)
            )
            assert [(t.gid, t.thread_id) for t in reply.threads] == [(ref.gid, ref.thread_id)]
            ride.ok[started, ride.phase] += 1
        except LoomError as exc:
            ride.failures[exc.code] += 1
            ride.messages.append(f"{exc.code.name}: {exc.message} (phase {ride.phase})")
            await asyncio.sleep(0.05)  # a failing call returns at once: do not spin


async def _progress(ride: Ride, phase: int) -> None:
    """Waits (bounded, generously) until the workers acknowledged PROGRESS weaves in `phase`."""
    for _ in range(2400):
        if ride.acked_in[phase] >= PROGRESS:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"phase {phase}: {ride.acked_in[phase]} weaves; {dict(ride.failures)}")


async def _restart_under_load(tmp_path: Path, *, service_config: Path | None) -> Ride:
    """Runs the workers across SIGTERM + restart; returns what they saw, all checked stored."""
    port, data = free_port(), tmp_path / "data"
    ride = Ride()
    async with LoomClient.connect(f"127.0.0.1:{port}", service_config=service_config) as client:
        async with loom_process(tmp_path, port=port, data_dir=data) as first:
            workers = [asyncio.create_task(_worker(client, ride, w)) for w in range(WORKERS)]
            await _progress(ride, UP)
            ride.phase = RESTARTING
            first.process.send_signal(signal.SIGTERM)
            assert await asyncio.to_thread(first.process.wait, 120) == 0, first.stderr()
        async with loom_process(tmp_path, port=port, data_dir=data) as second:
            ride.phase = UP_AGAIN
            await _progress(ride, UP_AGAIN)
            ride.stop = True
            await asyncio.gather(*workers)
            assert any(e.get("event") == "stopped" for e in first.log_lines())

            # Every acknowledged weave is in the restarted server's store.
            acknowledged = list(ride.acknowledged)
            for start in range(0, len(acknowledged), 100):
                reply = await client.threadweaver.resolve_threads(
                    threadweaver_pb2.ResolveThreadsRequest(
                        threads=acknowledged[start : start + 100]
                    )
                )
                missing = [r.thread for r in reply.threads if not r.found]
                assert not missing, f"acknowledged but lost: {missing[:5]}"
            assert second.process.poll() is None
    return ride


@pytest.mark.timeout(300)
async def test_the_service_config_rides_through_a_restart(tmp_path: Path) -> None:
    """With clients/service_config.json: 0 failed calls, some made while no server ran."""
    ride = await _restart_under_load(tmp_path, service_config=SERVICE_CONFIG)

    assert not ride.failures, f"calls failed across the restart: {ride.messages}"
    assert ride.crossed() > 0, f"no call was made during the restart: {dict(ride.ok)}"


@pytest.mark.timeout(300)
async def test_without_the_service_config_calls_fail_unavailable(tmp_path: Path) -> None:
    """The same client and restart without the config: UNAVAILABLE reaches the caller."""
    ride = await _restart_under_load(tmp_path, service_config=None)

    assert ride.failures[grpc.StatusCode.UNAVAILABLE] > 0, ride.messages
    # A call that reaches the port in the instant it closes is cancelled by gRPC itself; a
    # client without retries may see that too (with the config, the drain's pushback keeps
    # retries away from that instant). Nothing else may reach the caller.
    unexpected = set(ride.failures) - {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED}
    assert not unexpected, ride.messages
