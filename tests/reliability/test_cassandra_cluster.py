"""Loom on a real three-node Cassandra cluster (RF 3, one data centre, login and TLS), with a
node killed, frozen, or two of them down, under two `loom serve` replicas and a mixed load.

The cluster is `scripts/engines/cassandra-cluster.sh`: nodes on 127.0.0.11-13, started once
per run by `scripts/engines/up.sh`. These tests kill, freeze and restart its nodes, and each
leaves every node up again when it ends, whatever happened. What a caller must see:

* one node killed: no call fails for want of a replica (a quorum of three still holds), every
  method keeps succeeding, nothing acknowledged is lost, and once the node is back its
  replicas hold the rows (read at ALL, which needs it);
* one node frozen for 30 s (Yammer's "not dead but very slow"): every service stays
  SERVING, no breaker opens, and every method keeps succeeding within its deadline;
* two nodes down: calls that need a quorum fail fast with UNAVAILABLE naming the cause,
  never past their deadline; nothing acknowledged is lost; service resumes with one back.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import random
import signal
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import grpc
import pytest

from loadtest.cluster import cluster_env as deployment_env
from loadtest.cluster import node, node_pid
from server.config import Settings, load_settings
from storage import factory
from storage.ports import ThreadKey
from tests.engines import CLUSTER, require
from tests.reliability.cluster_load import INBOXES, Call, MixedLoad
from tests.replicas import channels
from tests.serving import Served, loom_process, run_loom

# Restarting a node replays its commit log and gossips while three JVMs share two cores: a
# test may take minutes on a busy machine (it asserts what happens, never how fast).
pytestmark = [pytest.mark.engine(CLUSTER), pytest.mark.timeout(1200)]

NODES = int(os.environ.get("LOOM_TEST_CASSANDRA_CLUSTER_NODES", "3"))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.fixture(autouse=True)
def whole_cluster() -> Iterator[None]:
    """Every node up (thawed, started) before and after each test, whatever it did."""
    require(CLUSTER)
    _heal()
    yield
    _heal()


def _heal() -> None:
    for i in range(1, NODES + 1):
        try:
            pid = node_pid(i)
        except (subprocess.CalledProcessError, ValueError):
            pid = 0
        if pid and _alive(pid):
            os.kill(pid, signal.SIGCONT)
        else:
            node("start-node", str(i))
    node("wait")


def cluster_env(**extra: str) -> dict[str, str]:
    """`loom serve` on the cluster (`loadtest.cluster`), with metrics on and the fan-out paced
    as an operator paces a cluster's: unpaced, three replicas of 20,000 deliveries on two
    shared cores starve every other call for seconds (isolation is the bulkhead tests'
    subject; these are about nodes failing)."""
    paced = {"LOOM_SERVER__METRICS_PORT": "0", "LOOM_INBOX__FANOUT_RATE_PER_S": "1000"}
    return deployment_env(**(paced | extra))


def settings_of(env: dict[str, str], **cassandra: Any) -> Settings:
    """The settings `loom serve` reads from `env`, with `cassandra` fields replaced."""
    settings = load_settings(env=env)
    return dataclasses.replace(
        settings, cassandra=dataclasses.replace(settings.cassandra, **cassandra)
    )


@asynccontextmanager
async def two_replicas(
    tmp: Path, env: dict[str, str]
) -> AsyncIterator[tuple[list[Served], list[grpc.aio.Channel]]]:
    """Two `loom serve` on the cluster and channels spread over both."""
    async with (
        loom_process(tmp / "a", env=env, data_dir=tmp / "a") as first,
        loom_process(tmp / "b", env=env, data_dir=tmp / "b") as second,
        AsyncExitStack() as stack,
    ):
        yield [first, second], await channels([first.target, second.target], stack)


@asynccontextmanager
async def running(load: MixedLoad, servers: list[Served]) -> AsyncIterator[asyncio.Event]:
    """The load and the health watch, from entry until exit."""
    stop = asyncio.Event()
    tasks = [
        asyncio.ensure_future(load.run(stop)),
        asyncio.ensure_future(load.watch_health([s.target for s in servers], stop)),
    ]
    try:
        yield stop
    finally:
        stop.set()
        await asyncio.gather(*tasks)


ONSET_S = 5.0
"""How long after a node dies or freezes a call may still fail: the driver marks a frozen node
down after one unanswered heartbeat (`heartbeat_s` = 1 s, probed once a second), and the
other nodes convict a dead one only after several seconds, so calls already waiting on it,
or on a live coordinator waiting on it as a replica, are given up at their deadline. Also
after a node comes back, cold and replaying, calls may fail for a while on two busy cores.
Each such failure must still be UNAVAILABLE, or DEADLINE_EXCEEDED when less than the engine
margin was left, and name its cause."""

DEAD_ONSET_S = 15.0
"""The same for a killed node: the driver drops it at once, but the other nodes keep choosing
it as a replica until their failure detector convicts it (about 20 s by default), and on a
starved machine a kill -9 stalled the whole cluster for a few seconds (a CI rehearsal with a
CPU burner)."""

LONGEST_S = 5.0
"""The longest deadline of the load's interactive calls: a call started this close to a node's
return may end in the recovery window."""

ANSWERED = {
    grpc.StatusCode.UNAVAILABLE,
    grpc.StatusCode.DEADLINE_EXCEEDED,
    grpc.StatusCode.RESOURCE_EXHAUSTED,
}
"""What a caller may see while nodes fail or four JVMs starve two cores: each means "retry"
(RESOURCE_EXHAUSTED is a full bulkhead refusing at once rather than queueing), none is a bug."""

QUORUM_LOST = ("Cannot achieve consistency level",)
"""How a coordinator says a call failed for want of live replicas (Cassandra's Unavailable,
decided by gossip before the statement runs). With one node of three down a quorum still
holds, so no call may fail so. A call may still time out, or the driver may give up on a
live node whose heartbeat went unanswered (NoHostAvailable), when three JVMs and the rest of
the suite starve two cores: that is the machine, not the dead node, and the suite asserts
behaviour, never speed (the latency with a node dead or frozen, and its error count, are
measured by `loadtest/benches/cassandra_cluster.py`)."""


def for_want_of_replicas(calls: list[Call]) -> list[Call]:
    """The calls in `calls` that failed because too few replicas answered."""
    return [c for c in calls if any(cause in c.details for cause in QUORUM_LOST)]


def silent_methods(load: MixedLoad, since: float, until: float) -> set[str]:
    """The load's methods none of whose calls succeeded within [since, until): a service that
    stopped serving them."""
    methods = {"WeaveMessage", "PostMessage", "GetUnreadCount", "GetUnifiedThread"}
    ok = {c.method for c in load.calls if since <= c.at < until and c.code == grpc.StatusCode.OK}
    return methods - ok


def not_serving(load: MixedLoad, since: float, until: float) -> list[tuple[float, int, str]]:
    """Health answers other than SERVING within [since, until): a breaker that opened."""
    return [entry for entry in load.not_serving if since <= entry[0] < until]


def _named(details: str) -> bool:
    """An error's text says what went wrong, not just which engine."""
    return bool(details.strip()) and details.strip().rstrip(":") != "cassandra"


async def test_a_wrong_login_or_certificate_stops_start_up_naming_the_setting(
    tmp_path: Path,
) -> None:
    """A refused password, a CA that did not sign the nodes, or no client certificate where
    the cluster requires one: `loom serve` exits 2 naming the setting, and never serves."""
    tls = Path(os.environ["LOOM_TEST_CASSANDRA_CLUSTER_TLS_DIR"])
    cases = {
        "cassandra.password: the cluster refused role": {"LOOM_CASSANDRA__PASSWORD": "wrong"},
        "cassandra.tls_ca_file: the nodes' certificate is not trusted": {
            "LOOM_CASSANDRA__TLS_CA_FILE": str(tls / "wrong-ca.pem")
        },
        # A node sends TLS's "certificate required" alert, or just closes the socket.
        "cassandra.tls_cert_file: ": {
            "LOOM_CASSANDRA__TLS_CERT_FILE": "",
            "LOOM_CASSANDRA__TLS_KEY_FILE": "",
        },
    }
    for expected, wrong in cases.items():
        env = cluster_env(**wrong)
        done = await asyncio.to_thread(
            run_loom, "serve", "--port", "0", "--data-dir", str(tmp_path / "d"), env=env
        )
        assert done.returncode == 2, done.stderr
        assert f"loom: cannot start: {expected}" in done.stderr, done.stderr
        assert '"event": "serving"' not in done.stderr


async def test_one_node_killed_mid_load_fails_no_call_and_loses_nothing(tmp_path: Path) -> None:
    """kill -9 of one node under weaves, posts and reads, after a 20,000-recipient
    announcement: once the driver has seen it go, no call fails for want of a replica and
    every method keeps succeeding while it is dead; every failure is a retryable status naming
    its cause; nothing acknowledged is lost; the announcement reaches all 20,000; the
    restarted node holds every row (read at ALL)."""
    env = cluster_env()
    async with two_replicas(tmp_path, env) as (servers, chans):
        load = MixedLoad(chans, random.Random(23))
        async with running(load, servers):
            await asyncio.sleep(2)
            await load.announce()
            await load.check_announcement()
            killed_at = time.monotonic()
            os.kill(node_pid(3), signal.SIGKILL)
            await asyncio.sleep(DEAD_ONSET_S + 20)
            restart_at = time.monotonic()
        # The restart (commit log replay, gossip) starves under load on two cores; the load
        # resumes once the node is back, while hints and read repair catch it up.
        await asyncio.to_thread(node, "start-node", "3")
        async with running(load, servers):
            await asyncio.sleep(10)
        failed = load.failures()
        assert {c.code for c in failed} <= ANSWERED, load.report(failed)
        assert all(_named(c.details) for c in failed), load.report(failed)
        dead = load.failures(since=killed_at + DEAD_ONSET_S, until=restart_at - LONGEST_S)
        assert for_want_of_replicas(dead) == [], load.report(dead)
        assert silent_methods(load, killed_at + DEAD_ONSET_S, restart_at) == set()
        assert not_serving(load, killed_at + DEAD_ONSET_S, restart_at) == []
        await load.check_announcement()
        resolved = await _acknowledged_are_kept(load)
    await _replicas_hold_every_row(env, load, resolved)


async def _replicas_hold_every_row(
    env: dict[str, str], load: MixedLoad, resolved: dict[tuple[str, str], str]
) -> None:
    """Read at ALL (every replica must answer, the restarted one included): every thread's
    unified thread and every inbox's unread count are what the service answered."""
    settings = settings_of(env, read_consistency="ALL", speculative_delay_s=0.0)
    threads = await factory.open_thread_store(settings)
    try:
        keys = [ThreadKey(gid, thread) for gid, thread in resolved]
        stored = await threads.get_thread_uts(keys)
        resolved_uts = {ThreadKey(g, t): ut for (g, t), ut in resolved.items()}
        # Every woven thread's mapping answers at ALL: each replica has it.
        assert set(stored) == set(resolved_uts)
    finally:
        await threads.close()
    store = await factory.open_inbox_store(settings)
    try:
        counts = {i: await store.unread_count(i) for i in INBOXES}
    finally:
        await store.close()
    for inbox, (least, most) in load.unread_bounds().items():
        assert least <= counts[inbox] <= most, (inbox, counts[inbox], least, most)


async def test_one_node_frozen_for_30_s_keeps_every_service_serving(tmp_path: Path) -> None:
    """SIGSTOP of one node for 30 s mid-load: once the driver has routed around it, no call
    fails for want of a replica, every method keeps succeeding, conditional writes included,
    and every service stays SERVING on both replicas (no breaker opens); every failure is a
    retryable status naming its cause; nothing acknowledged is lost."""
    async with two_replicas(tmp_path, cluster_env()) as (servers, chans):
        load = MixedLoad(chans, random.Random(29))
        async with running(load, servers):
            await asyncio.sleep(5)
            frozen = node_pid(2)
            frozen_at = time.monotonic()
            os.kill(frozen, signal.SIGSTOP)
            try:
                await asyncio.sleep(30)
            finally:
                thawed_at = time.monotonic()
                os.kill(frozen, signal.SIGCONT)
            await asyncio.sleep(10)
        failed = load.failures()
        assert {c.code for c in failed} <= ANSWERED, load.report(failed)
        assert all(_named(c.details) for c in failed), load.report(failed)
        frozen_phase = load.failures(since=frozen_at + ONSET_S, until=thawed_at - LONGEST_S)
        assert for_want_of_replicas(frozen_phase) == [], load.report(frozen_phase)
        assert not_serving(load, frozen_at + ONSET_S, thawed_at) == []
        assert silent_methods(load, frozen_at + ONSET_S, thawed_at) == set()
        await _acknowledged_are_kept(load)


async def test_two_nodes_down_fail_fast_and_resume_with_one_back(tmp_path: Path) -> None:
    """Two of three nodes killed: quorum calls fail UNAVAILABLE within their deadlines naming
    the cause; with one node back calls succeed again; nothing acknowledged is lost."""
    async with two_replicas(tmp_path, cluster_env()) as (servers, chans):
        load = MixedLoad(chans, random.Random(31))
        async with running(load, servers):
            await asyncio.sleep(5)
            down_at = time.monotonic()
            os.kill(node_pid(2), signal.SIGKILL)
            os.kill(node_pid(3), signal.SIGKILL)
            await asyncio.sleep(15)
        await asyncio.to_thread(node, "start-node", "2")
        back_at = time.monotonic()
        # Service resumes: load in 5 s windows until one passes without a failure (the node
        # that came back first replays hints and warms up, slowly on two busy cores).
        for _ in range(36):
            window = time.monotonic()
            async with running(load, servers):
                await asyncio.sleep(5)
            if not load.failures(since=window):
                break
        during = load.failures(since=down_at, until=back_at)
        assert during, "no call failed with two of three nodes down"
        # Never DEADLINE_EXCEEDED: a call that hung past its deadline would be.
        assert {c.code for c in during} <= ANSWERED - {grpc.StatusCode.DEADLINE_EXCEEDED}, (
            load.report(during)
        )
        assert all(_named(c.details) for c in during), load.report(during)
        assert not load.failures(since=window), load.report(load.failures(since=back_at))
        healthy = load.failures(until=down_at)
        assert {c.code for c in healthy} <= ANSWERED, load.report(healthy)
        assert all(_named(c.details) for c in healthy), load.report(healthy)
        await _acknowledged_are_kept(load)


async def _acknowledged_are_kept(load: MixedLoad) -> dict[tuple[str, str], str]:
    """Every acknowledged weave's conversation is one unified thread (union-find over them), no
    unified thread joins what no weave linked, and every inbox holds at
    least its acknowledged posts and at most all posts sent to it; returns the threads'
    unified threads."""
    resolved = await load.resolved()
    for component in load.acknowledged_weaves().values():
        assert len({resolved[t] for t in component}) == 1, f"split: {component}"
    # Nor merged beyond what the weaves sent (acknowledged or not) link.
    sent = load.conversations(load.weaves)
    roots: dict[str, set[tuple[str, str]]] = {}
    for thread, unified in resolved.items():
        roots.setdefault(unified, set()).add(sent.find(thread))
    assert all(len(r) == 1 for r in roots.values()), "conversations were merged"
    counts = await load.unread_counts()
    for inbox, (least, most) in load.unread_bounds().items():
        assert least <= counts[inbox] <= most, (inbox, counts[inbox], least, most)
    return resolved
