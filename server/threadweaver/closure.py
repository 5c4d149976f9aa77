"""Merge closures, read breadth-first over the link graph: one store round trip per level.

A read is exact whatever state concurrent or crashed writers left behind: it follows
every link of every UT it reaches until no new UT appears, and links only ever join UTs
of one conversation. It is also short: writers keep each component star-complete (every
UT linked to the smallest), so from any UT the walk is {start} -> its links (the smallest
among them) -> every member -> nothing new: three levels, whatever the chain of merges
that built the component (`docs/ARCHITECTURE.md`, "ThreadWeaver").
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from server.runtime.errors import FailedPrecondition
from storage.ports import ThreadKey, ThreadStore

__all__ = ["Component", "read_component", "walk"]


def _too_big(max_size: int) -> FailedPrecondition:
    return FailedPrecondition(
        f"unified thread merges more than {max_size} unified threads; refusing to walk it"
    )


async def walk(
    store: ThreadStore, starts: Iterable[str], *, max_size: int
) -> dict[str, frozenset[str]]:
    """The complete links of every UT reachable from `starts` (each reached UT is a key).

    Raises FailedPrecondition when more than `max_size` UTs beyond the starts are reachable:
    a closure that big comes from abused Message-IDs, and walking it would hurt everyone.
    """
    frontier = sorted(set(starts))
    budget = max_size + len(frontier)
    links: dict[str, frozenset[str]] = {}
    while frontier:
        found = await store.get_links(frontier)
        for ut in frontier:
            links[ut] = found.get(ut, frozenset())
        links.update(found)  # an engine may report UTs it walked to itself
        fresh = {x for linked in links.values() for x in linked} - links.keys()
        if len(links) + len(fresh) > budget:
            raise _too_big(max_size)
        frontier = sorted(fresh)
    return links


@dataclass(slots=True)
class Component:
    """One unified thread as a team sees it, with the links that were read to find it."""

    links: dict[str, frozenset[str]] = field(default_factory=dict)
    """Complete links of every UT of the component (the keys are the component)."""
    threads: list[ThreadKey] = field(default_factory=list)
    message_count: int = 0
    last_message_at_ms: int | None = None


async def read_component(
    store: ThreadStore,
    ut: str,
    *,
    gids: frozenset[str] | None,
    thread_limit: int,
    max_size: int,
) -> Component:
    """The component of `ut` with its member threads (up to `thread_limit`) and stats.

    The same walk as `walk`, but each level also brings the level's threads and statistics
    (`ThreadStore.read_uts`), so the whole read is the walk's round trips and no more.
    """
    out = Component()
    frontier = [ut]
    while frontier:
        rows = await store.read_uts(frontier, gids, thread_limit - len(out.threads))
        out.threads.extend(rows.threads)
        out.message_count += rows.stats.message_count
        last = rows.stats.last_message_at_ms
        if last is not None and (out.last_message_at_ms is None or last > out.last_message_at_ms):
            out.last_message_at_ms = last
        for member in frontier:
            out.links[member] = rows.links.get(member, frozenset())
        out.links.update(rows.links)  # an engine may cover UTs it walked to itself
        fresh = {x for linked in out.links.values() for x in linked} - out.links.keys()
        if len(out.links) + len(fresh) > max_size + 1:
            raise _too_big(max_size)
        frontier = sorted(fresh)
    out.threads.sort(key=_by_gid_thread)  # a tuple key: the dataclass's own __lt__ is slow
    return out


def _by_gid_thread(thread: ThreadKey) -> tuple[str, str]:
    return thread.gid, thread.thread_id
