"""Inbox's settings: the trim cap, probabilistic trimming and the bounded fan-out stage.

Loaded with every other setting by `server.config` (``[inbox]``). Two fan-out knobs depend
on the engine the InboxStore runs on; `server.config` fills them in from that engine's
defaults (`storage.engines.INBOX_STORES`) unless the operator sets them, so the values a
service reads are final.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["InboxSettings"]


@dataclass(frozen=True, slots=True)
class InboxSettings:
    """Inbox: the trim cap, probabilistic trimming and the bounded fan-out stage."""

    max_entries: int = 5000
    """Threads kept per inbox (Yammer: 5,000 entries is ~75 KB and four years of activity)."""
    trim_probability: float = 0.02
    """Chance that one delivery to an inbox schedules an async trim of it (~1 per 50)."""
    trim_queue: int = 10_000
    """Distinct inboxes waiting for a trim; beyond that a trim request is dropped."""
    trim_workers: int = 2
    """Tasks trimming inboxes concurrently."""
    scan_limit: int = 20_000
    """Rows read per inbox at most (list, trim): a bound even on an overgrown inbox."""
    sync_fanout_max: int = 1000
    """Recipients up to which PostMessage delivers within the call; more go to the background."""
    fanout_workers: int = 2
    """Background fan-outs running at once."""
    fanout_queue: int = 64
    """Background fan-outs waiting for a worker; beyond that RESOURCE_EXHAUSTED."""
    fanout_chunk: int = 500
    """Inboxes per store call of a fan-out (a 300,000-recipient post is 300 calls)."""
    fanout_rate_per_s: float = 0.0
    """Deliveries per second of the whole background stage (0 = unpaced). Unless set, the
    InboxStore engine's default: 50,000 on the embedded engine, whose fan-out is the
    server's own CPU, so interactive calls keep theirs; unpaced on a distributed one."""
    fanout_chunks_in_flight: int = 1
    """Chunks of one fan-out delivered at once. Unless set, the InboxStore engine's default:
    1 on the embedded engine's single writer, 4 on a distributed one, where several requests
    in flight hide the round trips."""
    max_recipients: int = 1_000_000
    """Recipient ids per PostMessage."""
    progress_interval_s: float = 0.5
    """Least time between two progress writes of one background fan-out."""
    stall_after_s: float = 30.0
    """A RUNNING delivery with no progress write for this long is adopted by whichever
    server looks first (its own server died); its owner writes progress every
    `progress_interval_s`, so this is many missed writes."""
    adopt_interval_s: float = 2.0
    """How often each server looks for stalled or released deliveries to adopt."""
    default_page_size: int = 50
    """ListInbox page size when the request says 0."""
    sweep_page: int = 5000
    """Inbox rows per step of the deletion sweep's walk (one store request, one write
    transaction on the embedded engine)."""
    sweep_interval_s: float = 5.0
    """How often each server looks for deleted threads whose rows are still to be swept
    (a DeleteThreads on this server wakes it at once)."""
    delete_settle_s: float = 1.0
    """A deleted thread is swept once its deletion is this old, so a post or fan-out chunk
    that passed its "is the thread deleted?" check just before the deletion has landed
    (a chunk takes well under a second) and the walk removes its rows too."""
    watch_poll_s: float = 0.05
    """How often a server that holds WatchInbox streams reads the tail of the change log for
    inboxes that changed (a few small store reads per poll per process, whatever the number
    of streams; none while it holds no stream). Unless set, the InboxStore engine's default:
    0.05 s on the embedded engine; 0.2 s on Cassandra, whose changes become readable only
    after its 1 s settle window anyway (`storage.cassandra.inbox_changes`)."""
    watch_batch: int = 500
    """Changes a stream reads from the store at once (and holds until they are written)."""
    watch_slow_consumer_s: float = 10.0
    """A stream whose client has not taken an event for this long ends UNAVAILABLE (reason
    RESUME): its client resumes from its last token, and the server holds nothing for it."""
    change_retention_s: float = 86_400.0
    """How long the change log keeps a change: a resume token older than this fails
    FAILED_PRECONDITION (reason RESYNC_REQUIRED). At most 7 days on Cassandra, whose change
    rows expire then (their TTL)."""
    change_trim_interval_s: float = 300.0
    """How often a server that holds streams drops changes past the retention."""
