"""The Iterator's values: a job's spec, work messages, counter names, packed chunk keys,
and the batches a stream sends.

Names of counters are the contract between the worker (which moves them inside each
committed step) and progress/completion (which read them):

    found.<L>       rows of level L discovered
    closed.<L>      rows of level L whose children have all been read (L above the emitted one)
    tasks.<L>       ranges created that read level L
    tasks_done.<L>  ranges that read level L and are closed
    emitted_objects / emitted_chunks           written to the chunk ledger
    delivered_* / acked_*                      settled by streams / acknowledgements
    resent_chunks, ignored_acks, reread_chunks statistics (reread: a chunk read again by
                                               a copy of a message whose step was committed)
"""

from __future__ import annotations

import json
from array import array
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Literal

from storage.ports import ChunkRecord, Key

__all__ = [
    "EMITTED_CHUNKS",
    "EMITTED_OBJECTS",
    "FINISHED",
    "IGNORED_ACKS",
    "REREAD_CHUNKS",
    "RESENT_CHUNKS",
    "ChunkBatch",
    "JobSpec",
    "WorkMessage",
    "closed",
    "found",
    "pack",
    "settled",
    "tasks",
    "tasks_done",
    "unpack",
]

FINISHED = ("completed", "cancelled", "failed")
"""Job states nothing moves on from: what DeleteJob, retention and a dump accept."""

EMITTED_OBJECTS = "emitted_objects"
EMITTED_CHUNKS = "emitted_chunks"
RESENT_CHUNKS = "resent_chunks"
IGNORED_ACKS = "ignored_acks"
REREAD_CHUNKS = "reread_chunks"


def found(level: int) -> str:
    """Counter: rows of `level` discovered."""
    return f"found.{level}"


def closed(level: int) -> str:
    """Counter: rows of `level` whose children have all been read."""
    return f"closed.{level}"


def tasks(level: int) -> str:
    """Counter: ranges created that read `level`."""
    return f"tasks.{level}"


def tasks_done(level: int) -> str:
    """Counter: ranges that read `level` and are closed."""
    return f"tasks_done.{level}"


def settled(require_ack: bool, what: Literal["chunks", "objects"]) -> str:
    """Counter of chunks/objects that count as done for the consumer."""
    return f"{'acked' if require_ack else 'delivered'}_{what}"


@dataclass(frozen=True, slots=True)
class JobSpec:
    """What a job iterates: stored with the job (as JSON), fixed for its life."""

    scope_level: int
    """Index of the level the scope names (the first range reads it)."""
    first: Key
    last: Key
    emit_level: int
    """Index of the level whose objects are emitted (>= scope_level)."""
    require_ack: bool
    ack_timeout_s: int
    request: str
    """The StartIterationRequest as JSON, echoed back by GetJob."""

    def dumps(self) -> str:
        """The stored form."""
        return json.dumps(asdict(self), separators=(",", ":"))

    @classmethod
    def loads(cls, text: str) -> JobSpec:
        """Parses the stored form."""
        raw = json.loads(text)
        raw["first"] = tuple(raw["first"])
        raw["last"] = tuple(raw["last"])
        return cls(**raw)


@dataclass(frozen=True, slots=True)
class WorkMessage:
    """A queue message: "do step `seq` of task `task` of job `job`". Everything else about
    the range lives in the task record, the single source of truth.

    With tracing on, `trace` is the W3C ``traceparent`` of the span that queued the step: it
    travels in the body (a fourth element), so whichever server takes the step links its
    chunk's span to it. Without it the body is the three elements every release reads."""

    job: str
    task: str
    seq: int
    trace: str = field(default="", kw_only=True)

    def dumps(self) -> str:
        """The message body."""
        body: list[str | int] = [self.job, self.task, self.seq]
        if self.trace:
            body.append(self.trace)
        return json.dumps(body, separators=(",", ":"))

    @staticmethod
    def prefix(job: str) -> str:
        """What every message body of `job` starts with (to discard a deleted job's work)."""
        return json.dumps([job], separators=(",", ":"))[:-1] + ","

    @classmethod
    def loads(cls, body: str) -> WorkMessage | None:
        """Parses a body; None when it is not one of ours (it is then dropped)."""
        try:
            job, task, seq, *rest = json.loads(body)
        except (ValueError, TypeError):
            return None
        if not (isinstance(job, str) and isinstance(task, str) and isinstance(seq, int)):
            return None
        trace = rest[0] if len(rest) == 1 and isinstance(rest[0], str) else ""
        return cls(job, task, seq, trace=trace)


@dataclass(frozen=True, slots=True)
class ChunkBatch:
    """Leased chunks of one stream message, with what a consumer needs to read them."""

    level: str
    """The name of the emitted level."""
    scope_read: bool
    """The emitted level is the scope's own: keys are whole, with no parent ids."""
    chunks: Sequence[ChunkRecord]


def pack(positions: list[Key]) -> tuple[int, bytes]:
    """(width, bytes) of positions of equal width as little-endian int64s."""
    if not positions:
        return 0, b""
    width = len(positions[0])
    flat = array("q", [v for p in positions for v in p])
    return width, flat.tobytes()


def unpack(width: int, data: bytes) -> list[int]:
    """The flat integers of packed positions (`width` per position)."""
    if not width or not data:
        return []
    flat = array("q")
    flat.frombytes(data)
    return flat.tolist()
