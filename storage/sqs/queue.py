"""WorkQueue on Amazon SQS (ElasticMQ in tests): one standard queue per hierarchy level.

Standard queues are exactly the seed's MQS contract — at-least-once, unordered, with a
visibility timeout — and the pipeline de-duplicates work itself (marker compare-and-set),
so FIFO queues' throughput limits would buy nothing. Sends and deletes go in batches of
10 (SQS's maximum); a receipt handle is only valid for its own delivery, so a worker whose
message already reappeared cannot delete the new delivery. Driver errors become
`storage.errors.StorageUnavailable` here, once (`_errors`).

With ``create_queues`` a queue that has gone (an in-memory ElasticMQ restarted, an
operator deleted it) is created again on first use and the call retried once; the work
its messages named is sent again by the Iterator's stall check.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

import aioboto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from storage.errors import DriverErrors, StorageUnavailable
from storage.ports import QueuedMessage
from storage.settings import SqsSettings
from storage.sqs import versions

__all__ = ["SqsWorkQueue", "client_options"]

_CONFIG = Config(
    connect_timeout=2.0,
    read_timeout=25.0,
    retries={"max_attempts": 3, "mode": "standard"},
    max_pool_connections=64,
)
_errors = DriverErrors("sqs", (BotoCoreError, ClientError, OSError))
_STALE = {"ReceiptHandleIsInvalid", "MessageNotInflight", "InvalidParameterValue"}
_GONE = {"AWS.SimpleQueueService.NonExistentQueue", "QueueDoesNotExist"}
T = TypeVar("T")
_DISCARD_MAX = 10_000
"""Most messages one `discard` looks at (a queue holds work in flight, not history)."""
_DISCARD_HIDE_S = 30
"""How long `discard` hides the messages it keeps, should it fail before showing them."""


def client_options(settings: SqsSettings) -> dict[str, Any]:
    """The aioboto3 client's arguments for `settings` (the queue store's, and
    `storage.upgrades`' read-only check)."""
    kwargs: dict[str, Any] = {"region_name": settings.region, "config": _CONFIG}
    if settings.endpoint_url:
        kwargs["endpoint_url"] = settings.endpoint_url
    return kwargs


def _code(exc: BaseException) -> str:
    if isinstance(exc, ClientError):
        return str(exc.response.get("Error", {}).get("Code", ""))
    return ""


class SqsWorkQueue:
    """`storage.ports.WorkQueue` on SQS queues ``<queue_prefix><name>``."""

    def __init__(
        self,
        client: Any,
        urls: dict[str, str],
        stack: contextlib.AsyncExitStack,
        *,
        prefix: str = "",
        create: bool = False,
    ) -> None:
        self._client = client
        self._urls = urls
        self._stack = stack
        self._prefix = prefix
        self._create = create

    @classmethod
    async def open(cls, settings: SqsSettings, names: Sequence[str]) -> SqsWorkQueue:
        """Resolves (or, with ``create_queues``, creates) one queue per name."""
        stack = contextlib.AsyncExitStack()
        kwargs = client_options(settings)
        try:
            with _errors("open"):
                client = await stack.enter_async_context(aioboto3.Session().client("sqs", **kwargs))
                queue = cls(
                    client, {}, stack, prefix=settings.queue_prefix, create=settings.create_queues
                )
                full = [f"{settings.queue_prefix}{name}" for name in names]

                async def resolve_all() -> list[str]:
                    return [await queue._resolve(name) for name in names]

                await versions.upgrade(client, full, versions.QUEUE, resolve_all)
        except BaseException:
            await stack.aclose()
            raise
        return queue

    async def _resolve(self, name: str) -> str:
        """Finds (or, with ``create_queues``, creates) queue `name` and remembers its URL."""
        full = f"{self._prefix}{name}"
        if self._create:
            reply = await self._client.create_queue(QueueName=full)
        else:
            reply = await self._client.get_queue_url(QueueName=full)
        self._urls[name] = str(reply["QueueUrl"])
        return self._urls[name]

    async def _on(self, queue: str, call: Callable[[str], Awaitable[T]]) -> T:
        """`call(url)`; a queue found gone is created again (``create_queues``) and the
        call made once more."""
        try:
            return await call(self._urls[queue])
        except ClientError as exc:
            if not (self._create and _code(exc) in _GONE):
                raise
        return await call(await self._resolve(queue))

    async def send(self, queue: str, bodies: Sequence[str]) -> None:
        async def run(url: str) -> None:
            for start in range(0, len(bodies), 10):
                part = bodies[start : start + 10]
                reply = await self._client.send_message_batch(
                    QueueUrl=url,
                    Entries=[{"Id": str(i), "MessageBody": b} for i, b in enumerate(part)],
                )
                if reply.get("Failed"):
                    raise StorageUnavailable(f"sqs send: {reply['Failed'][:3]}")

        with _errors("send"):
            await self._on(queue, run)

    async def receive(
        self, queue: str, *, max_messages: int, visibility_s: float, wait_s: float
    ) -> list[QueuedMessage]:
        async def run(url: str) -> dict[str, Any]:
            reply: dict[str, Any] = await self._client.receive_message(
                QueueUrl=url,
                MaxNumberOfMessages=max(1, min(10, max_messages)),
                VisibilityTimeout=max(0, math.ceil(visibility_s)),
                WaitTimeSeconds=max(0, min(20, int(wait_s))),
                MessageSystemAttributeNames=["ApproximateReceiveCount"],
            )
            return reply

        with _errors("receive"):
            reply = await self._on(queue, run)
        return [
            QueuedMessage(
                body=m["Body"],
                receipt=m["ReceiptHandle"],
                receive_count=int(m.get("Attributes", {}).get("ApproximateReceiveCount", "1")),
            )
            for m in reply.get("Messages", [])
        ]

    async def delete(self, queue: str, receipts: Sequence[str]) -> None:
        url = self._urls[queue]
        with _errors("delete"):
            try:
                for start in range(0, len(receipts), 10):
                    part = receipts[start : start + 10]
                    await self._client.delete_message_batch(
                        QueueUrl=url,
                        Entries=[{"Id": str(i), "ReceiptHandle": r} for i, r in enumerate(part)],
                    )
            except ClientError as exc:
                if _code(exc) not in _STALE | _GONE:
                    raise
                # the delivery is over (or its queue is gone, and with it the message)

    async def set_visibility(self, queue: str, receipt: str, visibility_s: float) -> None:
        with _errors("change_message_visibility"):
            try:
                await self._client.change_message_visibility(
                    QueueUrl=self._urls[queue],
                    ReceiptHandle=receipt,
                    VisibilityTimeout=max(0, math.ceil(visibility_s)),
                )
            except ClientError as exc:
                if _code(exc) not in _STALE | _GONE:
                    raise

    async def discard(self, queue: str, body_prefix: str) -> int:
        # SQS cannot select messages by body: receive what is visible, ten at a time (up to
        # `_DISCARD_MAX`), delete the matching ones and keep the others hidden until the
        # pass ends (so it never sees one twice), then make them visible again at once.
        # A message a worker holds meanwhile is not seen: that worker drops it (its job is
        # gone). Should the pass fail, the others reappear after `_DISCARD_HIDE_S`.
        url = self._urls[queue]
        kept: list[str] = []
        removed = 0
        with _errors("discard"):
            try:
                while removed + len(kept) < _DISCARD_MAX:
                    reply = await self._client.receive_message(
                        QueueUrl=url,
                        MaxNumberOfMessages=10,
                        VisibilityTimeout=_DISCARD_HIDE_S,
                        WaitTimeSeconds=0,
                    )
                    messages = reply.get("Messages", [])
                    if not messages:
                        break
                    mine = [
                        m["ReceiptHandle"] for m in messages if m["Body"].startswith(body_prefix)
                    ]
                    kept += [
                        m["ReceiptHandle"]
                        for m in messages
                        if not m["Body"].startswith(body_prefix)
                    ]
                    await self.delete(queue, mine)
                    removed += len(mine)
            finally:
                for start in range(0, len(kept), 10):
                    await self._client.change_message_visibility_batch(
                        QueueUrl=url,
                        Entries=[
                            {"Id": str(i), "ReceiptHandle": r, "VisibilityTimeout": 0}
                            for i, r in enumerate(kept[start : start + 10])
                        ],
                    )
        return removed

    async def depth(self, queue: str) -> int:
        async def run(url: str) -> dict[str, Any]:
            reply: dict[str, Any] = await self._client.get_queue_attributes(
                QueueUrl=url,
                AttributeNames=[
                    "ApproximateNumberOfMessages",
                    "ApproximateNumberOfMessagesNotVisible",
                ],
            )
            return reply

        with _errors("get_queue_attributes"):
            reply = await self._on(queue, run)
        attrs = reply.get("Attributes", {})
        return int(attrs.get("ApproximateNumberOfMessages", 0)) + int(
            attrs.get("ApproximateNumberOfMessagesNotVisible", 0)
        )

    async def close(self) -> None:
        await self._stack.aclose()
