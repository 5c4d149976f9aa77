"""Two replicas: two `loom serve` processes against the same distributed engines.

Horizontal scale is more replicas against the distributed engines (docs/ARCHITECTURE.md, "More than one core"). Clients are
spread over both replicas call by call, and what they write together must be exactly what
one server would have written (tests/replicas.py): ThreadWeaver's unified threads equal
union-find's components, Inbox unread counts are exact, Summary loses no delivery event.
(ThreadWeaver's own two-process property test and the Iterator's shared job have their own
modules.)
"""

from __future__ import annotations

import random
from contextlib import AsyncExitStack
from pathlib import Path

import pytest

from tests.engines import server_env
from tests.replicas import channels, post_and_count, record_and_sum, weave_and_check
from tests.serving import loom_process


@pytest.mark.engine("cassandra")
@pytest.mark.engine("dynamodb")
async def test_two_replicas_on_cassandra_and_dynamodb_answer_as_one(tmp_path: Path) -> None:
    """Two `loom serve` on one Cassandra and DynamoDB: writes through either read back through
    both, and each replica takes its share of the calls."""
    env = server_env(
        threadweaver_store="cassandra", inbox_store="cassandra", summary_store="dynamodb"
    )
    rng = random.Random(21)
    async with (
        loom_process(tmp_path / "a", env=env, data_dir=tmp_path / "a") as first,
        loom_process(tmp_path / "b", env=env, data_dir=tmp_path / "b") as second,
        AsyncExitStack() as stack,
    ):
        chans = await channels([first.target, second.target], stack)
        await weave_and_check(chans, rng)
        await post_and_count(chans, rng)
        await record_and_sum(chans, rng)
    for served in (first, second):
        rpcs = [line for line in served.log_lines() if line.get("event") == "rpc"]
        assert len(rpcs) > 100, "a replica took (almost) no calls"
