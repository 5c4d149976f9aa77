"""Schema version of the Iterator's SQS queues, recorded as a tag on each queue.

A queue holds work in flight, not a table, so its version is that of the messages it carries
(the Iterator's task bodies): the tag ``loom-schema-version`` on every queue of the store. A
queue that exists untagged was made by 1.0.0 (version 1); a queue created by ``create_queues``
is tagged at the current version. The sequence is `storage.versions`': read the tags
(GetQueueUrl, ListQueueTags: no write), refuse a newer version, create the queues, run the
pending steps, tag each queue after each step.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Final

from botocore.exceptions import BotoCoreError, ClientError

from storage.errors import DriverErrors
from storage.versions import Layout, Plan, apply, plan

__all__ = ["QUEUE", "TAG", "SqsLayout", "inspect", "upgrade"]

SqsStep = Callable[[Any, Sequence[str]], Awaitable[None]]
"""A step gets the client and the queues' URLs."""
SqsLayout = Layout[SqsStep]

TAG: Final = "loom-schema-version"
QUEUE: Final[SqsLayout] = Layout(store="queue", current=1)
_GONE = {"AWS.SimpleQueueService.NonExistentQueue", "QueueDoesNotExist"}
_errors = DriverErrors("sqs", (BotoCoreError, ClientError, OSError))


async def _url(client: Any, name: str) -> str | None:
    try:
        reply = await client.get_queue_url(QueueName=name)
    except ClientError as exc:
        if str(exc.response.get("Error", {}).get("Code", "")) in _GONE:
            return None
        raise
    return str(reply["QueueUrl"])


async def inspect(client: Any, queues: Sequence[str], layout: SqsLayout) -> Plan[SqsStep]:
    """What opening the queues named `queues` (full names) would do, read-only. The lowest
    version tagged on any of them is the store's (a queue missed by a killed upgrade)."""
    with _errors("read schema version"):
        return await _inspect(client, queues, layout)


async def _inspect(client: Any, queues: Sequence[str], layout: SqsLayout) -> Plan[SqsStep]:
    versions: list[int] = []
    untagged = False
    existing = 0
    for name in queues:
        url = await _url(client, name)
        if url is None:
            continue
        existing += 1
        tags = (await client.list_queue_tags(QueueUrl=url)).get("Tags") or {}
        if TAG in tags:
            versions.append(int(tags[TAG]))
        else:
            untagged = True
    newest = max(versions, default=None)
    recorded = None if untagged or not versions else min(versions)
    if newest is not None and newest > layout.current:
        recorded = newest  # any queue from a later release stops start-up
    where = f"sqs queues {', '.join(queues)} ({layout.store})"
    return plan(layout, where, recorded=recorded, has_data=existing > 0)


async def upgrade(
    client: Any,
    queues: Sequence[str],
    layout: SqsLayout,
    create: Callable[[], Awaitable[Sequence[str]]],
) -> Plan[SqsStep]:
    """Brings the queues to `layout.current`; `create` resolves (or creates) them and returns
    their URLs. Raises `storage.versions.StoreTooNew` before any write."""
    urls: list[str] = []

    async def create_all() -> None:
        urls.extend(await create())

    async def recordable() -> bool:
        return True

    async def run_step(step: SqsStep) -> None:
        await step(client, urls)

    async def record(version: int) -> None:
        with _errors("record schema version"):
            for url in urls:
                await client.tag_queue(QueueUrl=url, Tags={TAG: str(version)})

    found = await inspect(client, queues, layout)
    return await apply(
        found, create=create_all, recordable=recordable, run_step=run_step, record=record
    )
