"""Loom on a real three-node Cassandra cluster (RF 3, one data centre, login and TLS), with a
node killed, frozen, or two of them down, under two `loom serve` replicas and a mixed load.

The cluster is `scripts/engines/cassandra-cluster.sh`: nodes on 127.0.0.11-13, started once
per run by `scripts/engines/up.sh`. These tests kill, freeze and restart its nodes, and each
leaves every node up again when it ends, whatever happened. What a caller must see:

* one node killed: no call fails (a quorum of three still holds), every method keeps
  succeeding, nothing acknowledged is lost, and once the node is back its replicas hold the
  rows (read at ALL, which needs it);
* one node frozen for 30 s (Yammer's "not dead but very slow"): no call fails, every method
  keeps succeeding, every service stays SERVING, no breaker opens;
* two nodes down: calls that need a quorum fail fast with UNAVAILABLE naming the cause,
  never past their deadline; nothing acknowledged is lost; service resumes with one back.

The first two ("no call fails") are marked `cluster_alone`: they hold with the cluster alone on
a two-core machine (`make cluster-faults`), not beside the other five engines and an hour of
suite on it, where the landing gate's runs failed 40, 183 and 5 calls of ~1,500 around the
fault (docs/benchmarks.md). `make test` deselects them and runs
`test_a_node_killed_then_one_frozen_loses_nothing_and_fails_only_retryably` instead: the same
faults, asserting what the shared machine carries every time.
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
from loadtest.cluster_load import INBOXES, MixedLoad
from server.config import Settings, load_settings
from storage import factory
from storage.ports import ThreadKey
from tests.engines import CLUSTER, require
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


async def until_a_clean_window(load: MixedLoad, servers: list[Served]) -> float:
    """Service resuming after a fault: the load in 5 s windows until one passes without a
    failure, or for three minutes (a node that came back replays hints and warms up, slowly
    on two busy cores); returns the last window's start."""
    for _ in range(36):
        window = time.monotonic()
        async with running(load, servers):
            await asyncio.sleep(5)
        if not load.failures(since=window):
            break
    return window


RATE = 10.0
"""The load's calls/s in these tests (about 4 weaves, 2 posts, 4 reads a second over two
replicas): what two cores carry next to three JVMs and the rest of `make test`. With a CPU
burner on one of them the frozen-node test fails calls (the live nodes starve too). The
cluster bench (`loadtest/benches/cassandra_cluster.py`, phase `mixed`) counts the same
failures at higher rates on one server: none at 20 calls/s on a quiet machine; at 35 and 50
this rig fails calls with every node up (docs/benchmarks.md)."""

SLICE_S = 10.0
""""Keeps succeeding" means: in every slice this long of a fault, each method (and a weave
of a new Message-ID, a conditional write) had a call that succeeded. At `RATE` the rarest,
GetDelivery, is sent about 8 times a slice."""

LONGEST_S = 5.0
"""The longest deadline of the load's interactive calls: a call started this close to a node's
return may end in the recovery window."""

ANSWERED = {
    grpc.StatusCode.UNAVAILABLE,
    grpc.StatusCode.DEADLINE_EXCEEDED,
    grpc.StatusCode.RESOURCE_EXHAUSTED,
}
"""What a caller may see while two nodes are down, or while a restarted node replays its
commit log cold: each means "retry", none is a bug. With one node of three frozen or dead no
call may fail at all."""

METHODS = {"WeaveMessage", "PostMessage", "GetUnreadCount", "GetUnifiedThread", "GetDelivery"}


def silent_methods(load: MixedLoad, since: float, until: float) -> set[str]:
    """The load's methods none of whose calls started within [since, until) succeeded (a
    service that stopped serving them); "conditional write" when no weave of a new
    Message-ID did."""
    ok = [c for c in load.calls if since <= c.at < until and c.code == grpc.StatusCode.OK]
    silent = METHODS - {c.method for c in ok}
    return silent | (set() if any(c.conditional for c in ok) else {"conditional write"})


def silent_slices(load: MixedLoad, since: float, until: float) -> list[tuple[float, set[str]]]:
    """(offset, silent methods) of each `SLICE_S` slice of [since, until) in which some
    method had no call that succeeded."""
    found = []
    start = since
    while start + SLICE_S <= until + 0.5:
        silent = silent_methods(load, start, start + SLICE_S)
        if silent:
            found.append((start - since, silent))
        start += SLICE_S
    return found


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


async def test_a_schema_change_waits_for_agreement_not_for_one_statement() -> None:
    """Three nodes take about a second to agree on a new table (more on a loaded machine).
    With every statement bounded at 0.5 s, the stores still create a fresh keyspace's whole
    schema and serve from it: a schema change is bounded by the wait for agreement, not by
    `request_timeout_s` (which once failed start-up on a slow cluster)."""
    settings = settings_of(cluster_env(), request_timeout_s=0.5)
    threads = await factory.open_thread_store(settings)
    try:
        assert await threads.get_thread_uts([ThreadKey("g", "t")]) == {}
    finally:
        await threads.close()
    inbox = await factory.open_inbox_store(settings)
    try:
        assert await inbox.unread_count("i") == 0
    finally:
        await inbox.close()


@pytest.mark.cluster_alone
async def test_one_node_killed_mid_load_fails_no_call_and_loses_nothing(tmp_path: Path) -> None:
    """kill -9 of one node under weaves, posts and reads, after a 20,000-recipient
    announcement: from the kill until the restart no call fails, for any reason, and every
    method (GetDelivery and conditional writes included) keeps succeeding; after the restart
    every failure is a retryable status naming its cause; nothing acknowledged is lost; the
    announcement reaches all 20,000; the restarted node holds every row (read at ALL)."""
    env = cluster_env()
    async with two_replicas(tmp_path, env) as (servers, chans):
        load = MixedLoad(chans, random.Random(23), rate=RATE)
        async with running(load, servers):
            await asyncio.sleep(2)
            await load.announce()
            await load.check_announcement()
            killed_at = time.monotonic()
            os.kill(node_pid(3), signal.SIGKILL)
            await asyncio.sleep(40)
            restart_at = time.monotonic()
        # The restart (commit log replay, gossip) starves under load on two cores; the load
        # resumes once the node is back, while hints and read repair catch it up.
        await asyncio.to_thread(node, "start-node", "3")
        async with running(load, servers):
            await asyncio.sleep(10)
        dead = load.failures(since=killed_at, until=restart_at)
        assert dead == [], load.report(dead, killed=killed_at, restarted=restart_at)
        assert silent_slices(load, killed_at, restart_at - LONGEST_S) == []
        assert not_serving(load, killed_at, restart_at) == []
        failed = load.failures()
        assert {c.code for c in failed} <= ANSWERED, load.report(failed)
        assert all(_named(c.details) for c in failed), load.report(failed)
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


@pytest.mark.cluster_alone
async def test_one_node_frozen_for_30_s_fails_no_call(tmp_path: Path) -> None:
    """SIGSTOP of one node for 30 s mid-load: from the freeze until 10 s after the thaw no
    call fails, for any reason; every method, GetDelivery and conditional writes included,
    keeps succeeding through the freeze; every service stays SERVING on both replicas (no
    breaker opens); nothing acknowledged is lost."""
    async with two_replicas(tmp_path, cluster_env()) as (servers, chans):
        load = MixedLoad(chans, random.Random(29), rate=RATE)
        async with running(load, servers):
            await asyncio.sleep(2)
            # The announcement fans out to 20,000 inboxes first, as in the killed-node test:
            # its three replica writes per inbox, with a CPU burner beside three JVMs, starved
            # the freeze's first seconds in a CI rehearsal (weaves at their deadline, before
            # any call waited on the frozen node), which is the machine, not the fault.
            await load.announce()
            await load.check_announcement()
            frozen = node_pid(2)
            frozen_at = time.monotonic()
            os.kill(frozen, signal.SIGSTOP)
            try:
                await asyncio.sleep(30)
            finally:
                thawed_at = time.monotonic()
                os.kill(frozen, signal.SIGCONT)
            await asyncio.sleep(10)
        failed = load.failures(since=frozen_at)
        assert failed == [], load.report(failed, frozen=frozen_at, thawed=thawed_at)
        assert silent_slices(load, frozen_at, thawed_at) == []
        assert not_serving(load, frozen_at, thawed_at + 10) == []
        await load.check_announcement()
        await _acknowledged_are_kept(load)


async def test_a_node_killed_then_one_frozen_loses_nothing_and_fails_only_retryably(
    tmp_path: Path,
) -> None:
    """Under weaves, posts and reads: node 3 killed for 15 s and restarted, then node 2 frozen
    for 15 s and thawed. Every call that fails is a retryable status naming its cause; every
    method succeeds again once the nodes are back; nothing acknowledged is lost; the restarted
    node holds every row (read at ALL). (That no call fails at all is the `cluster_alone`
    tests' assertion.)"""
    env = cluster_env()
    async with two_replicas(tmp_path, env) as (servers, chans):
        load = MixedLoad(chans, random.Random(37), rate=RATE)
        async with running(load, servers):
            await asyncio.sleep(2)
            killed_at = time.monotonic()
            os.kill(node_pid(3), signal.SIGKILL)
            await asyncio.sleep(15)
        await asyncio.to_thread(node, "start-node", "3")
        async with running(load, servers):
            await asyncio.sleep(2)
            frozen = node_pid(2)
            os.kill(frozen, signal.SIGSTOP)
            try:
                await asyncio.sleep(15)
            finally:
                os.kill(frozen, signal.SIGCONT)
        window = await until_a_clean_window(load, servers)
        assert not load.failures(since=window), load.report(load.failures(since=window))
        assert silent_methods(load, window, time.monotonic()) <= {"GetDelivery"}
        failed = load.failures(since=killed_at)
        assert {c.code for c in failed} <= ANSWERED, load.report(failed)
        assert all(_named(c.details) for c in failed), load.report(failed)
        resolved = await _acknowledged_are_kept(load)
    await _replicas_hold_every_row(env, load, resolved)


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
        window = await until_a_clean_window(load, servers)
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
