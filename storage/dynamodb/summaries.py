"""SummaryStore on DynamoDB: one item per message, optimistic concurrency on a version number.

Item shape (table ``<table_prefix>summaries``, hash key ``message_id``)::

    {message_id: S, version: N, data: B}

That is Remind's layout: a whole summary per item, kept far below the 400 KB item limit by the
domain's encoding (worst case ~62 KB uncompressed, ~31 KB stored). A write is a PutItem with a
ConditionExpression — ``attribute_not_exists(message_id)`` to create, ``version = :expected``
to replace — so two servers that read the same version cannot both win; the loser gets
ConditionalCheckFailedException, reported as False, and re-reads. Reads are strongly
consistent so a retry after a lost race sees the winner's write.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from botocore.exceptions import ClientError

from storage.dynamodb import versions
from storage.dynamodb.client import DynamoDBClient, errors, is_conditional_failure
from storage.errors import StorageCorrupt
from storage.ports import StoredSummary
from storage.settings import DynamoDBSettings

__all__ = ["TABLE_SUFFIX", "DynamoDBSummaryStore"]

TABLE_SUFFIX = "summaries"
_KEY = "message_id"


class DynamoDBSummaryStore:
    """`storage.ports.SummaryStore` on one DynamoDB table."""

    def __init__(self, client: DynamoDBClient) -> None:
        self._client = client
        self._table = client.table_name(TABLE_SUFFIX)

    @classmethod
    async def open(cls, settings: DynamoDBSettings) -> DynamoDBSummaryStore:
        """Opens the long-lived client; creates the table when ``create_tables`` is set."""
        client = await DynamoDBClient.open(settings)
        try:
            table = client.table_name(TABLE_SUFFIX)
            await versions.upgrade(
                client,
                table,
                versions.SUMMARIES,
                lambda: client.ensure_tables([(table, (_KEY, "S"))]),
            )
        except BaseException:
            await client.close()
            raise
        return cls(client)

    async def get(self, message_id: str) -> StoredSummary | None:
        with errors("get_item"):
            response = await self._client.raw.get_item(
                TableName=self._table,
                Key={_KEY: {"S": message_id}},
                ConsistentRead=True,
                ProjectionExpression="version, #d",
                ExpressionAttributeNames={"#d": "data"},
            )
        item = response.get("Item")
        if item is None:
            return None
        try:
            return StoredSummary(bytes(item["data"]["B"]), int(item["version"]["N"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise StorageCorrupt(f"dynamodb summary {message_id!r}: malformed item") from exc

    async def put_if_version(
        self, message_id: str, data: bytes, expected_version: int | None
    ) -> bool:
        new_version = 1 if expected_version is None else expected_version + 1
        item = {
            _KEY: {"S": message_id},
            "version": {"N": str(new_version)},
            "data": {"B": bytes(data)},
        }
        if expected_version is None:
            condition: dict[str, object] = {
                "ConditionExpression": "attribute_not_exists(message_id)"
            }
        else:
            condition = {
                "ConditionExpression": "version = :expected",
                "ExpressionAttributeValues": {":expected": {"N": str(expected_version)}},
            }
        with errors("put_item"):
            try:
                await self._client.raw.put_item(TableName=self._table, Item=item, **condition)
            except ClientError as exc:
                if is_conditional_failure(exc):
                    return False
                raise
        return True

    async def page_after(
        self, after: str | None, limit: int
    ) -> tuple[list[tuple[str, StoredSummary]], str | None]:
        # One Scan request: the table's only key is the message id, so a cursor is the last
        # id read, fed back as ExclusiveStartKey (DynamoDB resumes a Scan from any key).
        if limit < 1:
            raise ValueError(f"page limit must be at least 1, not {limit}")
        request: dict[str, Any] = {
            "TableName": self._table,
            "Limit": limit,
            "ConsistentRead": True,
            "ProjectionExpression": "#k, version, #d",
            "ExpressionAttributeNames": {"#k": _KEY, "#d": "data"},
        }
        if after is not None:
            request["ExclusiveStartKey"] = {_KEY: {"S": after}}
        with errors("scan"):
            response = await self._client.raw.scan(**request)
        found = [_summary_of(item) for item in response.get("Items", ())]
        last = response.get("LastEvaluatedKey")
        return found, (str(last[_KEY]["S"]) if last else None)

    async def scrub(self) -> None:
        # An overwritten or deleted item is gone from every read at once; DynamoDB keeps
        # no old version a client can reach (point-in-time backups are the operator's).
        return

    async def scan(self, page: int) -> AsyncIterator[list[tuple[str, StoredSummary]]]:
        # A paginated Scan: Limit caps the items one request reads, LastEvaluatedKey resumes
        # the next one, so memory holds one page. A request may return fewer items (the 1 MB
        # response cap) or none while more remain; only non-empty pages are yielded.
        # Strongly consistent, like `get`: a summary written before the scan reached its
        # segment is read in its latest version.
        if page < 1:
            raise ValueError(f"scan page must be at least 1, not {page}")
        start: dict[str, Any] | None = None
        while True:
            request: dict[str, Any] = {
                "TableName": self._table,
                "Limit": page,
                "ConsistentRead": True,
                "ProjectionExpression": "#k, version, #d",
                "ExpressionAttributeNames": {"#k": _KEY, "#d": "data"},
            }
            if start is not None:
                request["ExclusiveStartKey"] = start
            with errors("scan"):
                response = await self._client.raw.scan(**request)
            found = [_summary_of(item) for item in response.get("Items", ())]
            if found:
                yield found
            start = response.get("LastEvaluatedKey")
            if not start:
                return

    async def close(self) -> None:
        await self._client.close()


def _summary_of(item: dict[str, Any]) -> tuple[str, StoredSummary]:
    try:
        message_id = str(item[_KEY]["S"])
        return message_id, StoredSummary(bytes(item["data"]["B"]), int(item["version"]["N"]))
    except (KeyError, TypeError, ValueError) as exc:
        raise StorageCorrupt(f"dynamodb summary {item.get(_KEY)!r}: malformed item") from exc
