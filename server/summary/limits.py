"""Typed limits of the Summary domain, in one place so the service layer validates against them.

The gRPC handler turns violations into ``INVALID_ARGUMENT`` field violations *before* calling the
domain; the domain re-checks the cheap ones (and raises ``ValueError``) so a bad caller can never
write an undecodable or oversized row.
"""

from __future__ import annotations

from typing import Final

__all__ = [
    "DEFAULT_EXACT_BYTE_BUDGET",
    "DEFAULT_EXACT_THRESHOLD",
    "DYNAMODB_ITEM_LIMIT_BYTES",
    "ENCODED_SUMMARY_TARGET_BYTES",
    "MAX_EVENTS_PER_REQUEST",
    "MAX_EXACT_THRESHOLD",
    "MAX_MESSAGE_ID_BYTES",
    "MAX_RECIPIENT_ID_BYTES",
]

MAX_RECIPIENT_ID_BYTES: Final = 256
"""UTF-8 length of one recipient id; the exact encoding stores it behind a u16 length."""

MAX_MESSAGE_ID_BYTES: Final = 256
"""UTF-8 length of a message id (the storage key)."""

MAX_EVENTS_PER_REQUEST: Final = 10_000
"""Events per RecordDeliveryEvents call; a 10K batch records in a few ms of CPU."""

DEFAULT_EXACT_THRESHOLD: Final = 250
"""Remind: 99 % of announcements have <= 250 recipients, so those summaries stay exact."""

MAX_EXACT_THRESHOLD: Final = 65_535
"""The exact member count is stored as a u16."""

DEFAULT_EXACT_BYTE_BUDGET: Final = 16 * 1024
"""UTF-8 bytes of exact ids per status before promotion, whatever the count. 250 UUIDs (36 B)
use 9 KB and stay exact; 250 ids of 256 B would use 64 KB per status, so the budget keeps the
worst-case row at ~50 KB instead of ~194 KB."""

DYNAMODB_ITEM_LIMIT_BYTES: Final = 400 * 1024
"""DynamoDB's hard item-size limit (name + value of every attribute)."""

ENCODED_SUMMARY_TARGET_BYTES: Final = 64 * 1024
"""Design target for one encoded summary (all statuses); even the uncompressed worst case of the
default parameters (3 x (4 KiB bitmap + 16 KiB registers) + header) is ~61.5 KB."""
