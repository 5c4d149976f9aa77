"""Hosts marked slow by their latency go last in every query plan, and only while marked."""

from __future__ import annotations

import asyncio
from typing import Any

from cassandra.policies import RoundRobinPolicy, SimpleConvictionPolicy
from cassandra.pool import Host

from storage.cassandra import slow_hosts
from storage.cassandra.slow_hosts import AvoidSlowHosts, SlowHosts, watch


def _hosts() -> list[Host]:
    return [Host(f"127.0.0.{i}", SimpleConvictionPolicy) for i in (11, 12, 13)]


def _policy(hosts: list[Host], marks: SlowHosts) -> AvoidSlowHosts:
    child = RoundRobinPolicy()
    child.populate(None, hosts)
    policy = AvoidSlowHosts(child, marks)
    return policy


def test_a_slow_host_goes_last_and_every_host_stays_in_the_plan() -> None:
    hosts = _hosts()
    marks = SlowHosts()
    policy = _policy(hosts, marks)
    marks.mark([hosts[0]])
    for _ in range(6):  # every rotation of the round robin
        plan = list(policy.make_query_plan())
        assert sorted(plan, key=str) == sorted(hosts, key=str)
        assert plan[-1] is hosts[0]


def test_unmarked_plans_are_the_child_policy_s() -> None:
    hosts = _hosts()
    policy = _policy(hosts, SlowHosts())
    firsts = {next(iter(policy.make_query_plan())) for _ in range(3)}
    assert firsts == set(hosts)


def test_a_mark_runs_out(monkeypatch: Any) -> None:
    hosts = _hosts()
    marks = SlowHosts()
    monkeypatch.setattr(slow_hosts, "HOLD_S", 0.0)
    marks.mark([hosts[1]])
    assert marks.slow() == set()


class _Sent:
    """What `watch` reads of a driver future: the hosts it was sent to."""

    def __init__(self, hosts: list[Host]) -> None:
        self.attempted_hosts = hosts


async def test_a_statement_unanswered_past_the_threshold_marks_its_hosts(monkeypatch: Any) -> None:
    hosts = _hosts()
    marks = SlowHosts()
    monkeypatch.setattr(slow_hosts, "SLOW_AFTER_S", 0.01)
    loop = asyncio.get_running_loop()
    answered: asyncio.Future[None] = loop.create_future()
    stalled: asyncio.Future[None] = loop.create_future()
    watch(loop, _Sent([hosts[0]]), answered, marks)
    watch(loop, _Sent([hosts[1], hosts[2]]), stalled, marks)
    answered.set_result(None)
    await asyncio.sleep(0.05)
    assert marks.slow() == {hosts[1], hosts[2]}
    stalled.set_result(None)
