"""Write timestamps of the Cassandra inbox tables, derived from message ids, never from clocks.

Why: Cassandra resolves concurrent writes to a cell by write timestamp (last write wins).
If the timestamp of every inbox write is a function of the message it is about, the
outcome is the one the Protocol asks for under any arrival order, with no read-before-write
lock and no LWT. Message ids grow with time but are not times, so wall-clock ("now")
timestamps are wrong here: a mark made "now" would outrank every later delivery whose id
happens to be smaller than the clock, and the thread would never become unread again.

Each message m owns the slot [m*K, (m+1)*K - 1] of timestamps (K = 1024):

- deliver m      writes the entry (last_message_id, is_read) and inserts or deletes the
                 unread row at m*K. Highest message wins; a retry writes identical cells.
- mark (read or  a row read at last_message_id m, whose is_read was last written at wt,
  unread)        is written at max(wt + 1, m*K + 1): after the delivery and every earlier
                 mark of m, before any delivery of m+1. A mark sticks until new activity;
                 a mark based on a stale read (m+1 arrived meanwhile) loses, which is right:
                 the user did not see m+1.
- trim of a row  read at m deletes entry and unread row at (m+1)*K - 1: it shadows m and all
                 its marks, and loses to any later message (the row "advanced since").

Both tables of one row always move at the same timestamp, so they agree ("an unread row
iff is_read = false") whatever interleaves. Accepted races, as Yammer accepted them
("negligible, users can correct"): two opposite marks of one thread at the same moment
read the same wt and tie, and Cassandra's tie-break (tombstone beats insert, true beats
false) settles both tables on *read*; the advanced-row count a delivery returns may count
a row twice when two deliveries of it race; after K - 2 marks of one thread without a new
message, further marks tie the same way. Message ids must be below 2**53 (so (m+1)*K fits
a signed 64-bit timestamp; also JavaScript's safe-integer bound, which the TypeScript
client needs anyway).
"""

from __future__ import annotations

__all__ = ["MAX_MESSAGE_ID", "SLOT", "delivery_ts", "mark_ts", "trim_ts"]

SLOT = 1024
"""Timestamps per message: one delivery, SLOT - 2 marks, one trim."""

MAX_MESSAGE_ID = (1 << 53) - 1
"""Largest message id whose slot fits a signed 64-bit write timestamp."""


def _check(message_id: int) -> None:
    if not 0 < message_id <= MAX_MESSAGE_ID:
        raise ValueError(
            f"message_id {message_id} is outside 1..2**53-1, the Cassandra inbox's range"
        )


def delivery_ts(message_id: int) -> int:
    """Timestamp of every write delivering `message_id` (entry and unread row)."""
    _check(message_id)
    return message_id * SLOT


def mark_ts(last_message_id: int, is_read_written_at: int) -> int:
    """Timestamp of a mark on a row showing `last_message_id` (see the module docstring)."""
    _check(last_message_id)
    base = last_message_id * SLOT
    return min(max(is_read_written_at + 1, base + 1), base + SLOT - 2)


def trim_ts(last_message_id: int) -> int:
    """Timestamp of a trim's deletes of a row the trimmer read at `last_message_id`."""
    _check(last_message_id)
    return last_message_id * SLOT + SLOT - 1
