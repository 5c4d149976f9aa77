"""Iterator's protobuf <-> domain translation, with every input check.

Bounds: job ids are 32 hex characters; rate 0..1,000,000,000 objects/s; ack timeout
0..86,400 s; max_batch_size 0..100,000; 0..10,000 object ids and chunk ids per ack (at
least one in all); page_size 0..1,000.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Sequence

from google.protobuf import json_format
from google.protobuf.timestamp_pb2 import Timestamp
from loom.v1 import iterator_pb2

from server.iterator import model
from server.iterator.scope import Scope, resolve_scope
from server.iterator.service import JobView
from server.iterator.settings import IteratorLevel
from server.runtime.validation import Violations

__all__ = [
    "ack_from_proto",
    "batch_to_proto",
    "job_id_from_proto",
    "job_to_proto",
    "list_from_proto",
    "list_to_proto",
    "start_from_proto",
    "stream_from_proto",
]

MAX_RATE = 1_000_000_000
MAX_ACK_TIMEOUT_S = 86_400
MAX_BATCH = 100_000
MAX_ACK_IDS = 10_000
MAX_PAGE = 1000
DEFAULT_PAGE = 100
_JOB_ID = re.compile(r"^[0-9a-f]{32}$")
_STATES = {
    "running": iterator_pb2.JOB_STATE_RUNNING,
    "paused": iterator_pb2.JOB_STATE_PAUSED,
    "completed": iterator_pb2.JOB_STATE_COMPLETED,
    "cancelled": iterator_pb2.JOB_STATE_CANCELLED,
    "failed": iterator_pb2.JOB_STATE_FAILED,
}


def _job_id(v: Violations, job_id: str) -> None:
    v.check(bool(_JOB_ID.match(job_id)), "job_id", "must be a job id (32 hex characters)")


def job_id_from_proto(job_id: str) -> str:
    """A validated job id."""
    v = Violations()
    _job_id(v, job_id)
    v.raise_if_any()
    return job_id


def start_from_proto(
    request: iterator_pb2.StartIterationRequest, levels: Sequence[IteratorLevel]
) -> tuple[Scope, int, bool, int, str]:
    """(scope, rate, require_ack, ack_timeout_s, request as JSON) of StartIteration."""
    v = Violations()
    kind = request.WhichOneof("scope")
    first: list[int] = []
    last: list[int] = []
    field, level_name = "scope", ""
    if kind == "enterprise_range":
        r = request.enterprise_range
        first, last, field = [r.first_enterprise_id], [r.last_enterprise_id], "enterprise_range"
    elif kind == "enterprise_id":
        first, field = [request.enterprise_id], "enterprise_id"
    elif kind == "user_id":
        first, field = [request.user_id], "user_id"
    elif kind == "level_scope":
        s = request.level_scope
        first, last, field, level_name = list(s.first_key), list(s.last_key), "level_scope", s.level
    scope = resolve_scope(
        v,
        levels,
        kind=kind,
        level_name=level_name,
        first=first,
        last=last,
        field=field,
        emit_name=request.level,
    )
    v.check(
        0 <= request.rate_limit_per_second <= MAX_RATE,
        "rate_limit_per_second",
        f"must lie in 0..{MAX_RATE} (0 = unlimited)",
    )
    v.check(
        0 <= request.ack_timeout_s <= MAX_ACK_TIMEOUT_S,
        "ack_timeout_s",
        f"must lie in 0..{MAX_ACK_TIMEOUT_S} (0 = the server's default)",
    )
    v.raise_if_any()
    assert scope is not None
    text = json_format.MessageToJson(request, indent=None)
    return scope, request.rate_limit_per_second, request.require_ack, request.ack_timeout_s, text


def stream_from_proto(request: iterator_pb2.StreamObjectsRequest, default: int) -> tuple[str, int]:
    """(job id, most objects per message) of StreamObjects."""
    v = Violations()
    _job_id(v, request.job_id)
    v.check(
        0 <= request.max_batch_size <= MAX_BATCH,
        "max_batch_size",
        f"must lie in 0..{MAX_BATCH} (0 = {default})",
    )
    v.raise_if_any()
    return request.job_id, request.max_batch_size or default


def ack_from_proto(request: iterator_pb2.AckObjectsRequest) -> tuple[str, list[str], list[int]]:
    """(job id, chunk ids, object ids) of AckObjects."""
    v = Violations()
    _job_id(v, request.job_id)
    chunks, objects = list(request.chunk_ids), list(request.object_ids)
    v.check(len(chunks) <= MAX_ACK_IDS, "chunk_ids", f"at most {MAX_ACK_IDS} ids")
    v.check(len(objects) <= MAX_ACK_IDS, "object_ids", f"at most {MAX_ACK_IDS} ids")
    v.check(bool(chunks or objects), "chunk_ids", "give chunk_ids or object_ids")
    if any(not c or len(c) > 512 for c in chunks):
        v.add("chunk_ids", "each must be 1..512 characters")
    v.raise_if_any()
    return request.job_id, chunks, objects


def rate_from_proto(request: iterator_pb2.UpdateJobRequest) -> tuple[str, int]:
    """(job id, rate) of UpdateJob."""
    v = Violations()
    _job_id(v, request.job_id)
    v.check(
        0 <= request.rate_limit_per_second <= MAX_RATE,
        "rate_limit_per_second",
        f"must lie in 0..{MAX_RATE} (0 = unlimited)",
    )
    v.raise_if_any()
    return request.job_id, request.rate_limit_per_second


def list_from_proto(request: iterator_pb2.ListJobsRequest) -> tuple[int, tuple[int, str] | None]:
    """(page size, position after which to list) of ListJobs."""
    v = Violations()
    v.check(0 <= request.page_size <= MAX_PAGE, "page_size", f"must lie in 0..{MAX_PAGE}")
    before = None
    if request.page_token:
        try:
            raw = base64.urlsafe_b64decode(request.page_token.encode()).decode()
            created, _, job_id = raw.partition(":")
            before = (int(created), job_id)
            if not _JOB_ID.match(job_id):
                raise ValueError(job_id)
        except (ValueError, binascii.Error, UnicodeDecodeError):
            v.add("page_token", "is not a token this service issued")
    v.raise_if_any()
    return request.page_size or DEFAULT_PAGE, before


def list_to_proto(views: Sequence[JobView], limit: int) -> iterator_pb2.ListJobsResponse:
    """A ListJobs page; a next token only when the page is full."""
    token = ""
    if len(views) == limit and views:
        last = views[-1].record
        token = base64.urlsafe_b64encode(f"{last.created_ms}:{last.job_id}".encode()).decode()
    return iterator_pb2.ListJobsResponse(
        jobs=[job_to_proto(v) for v in views], next_page_token=token
    )


def _timestamp(ms: int) -> Timestamp:
    ts = Timestamp()
    ts.FromMilliseconds(ms)
    return ts


def job_to_proto(view: JobView) -> iterator_pb2.Job:
    """The Job message of a job view."""
    r, p = view.record, view.progress
    request = iterator_pb2.StartIterationRequest()
    json_format.Parse(view.spec.request, request)
    job = iterator_pb2.Job(
        job_id=r.job_id,
        state=_STATES[r.state],
        request=request,
        objects_emitted=p.emitted_objects,
        objects_acked=p.acked_objects,
        created_at=_timestamp(r.created_ms),
        error=r.error,
        objects_per_second=round(view.objects_per_second, 1),
        eta_seconds=round(view.eta_seconds, 1),
        rate_limit_per_second=r.rate,
        chunks_emitted=p.emitted_chunks,
        chunks_acked=p.acked_chunks,
        chunks_resent=view.counters.get(model.RESENT_CHUNKS, 0),
        ignored_acks=view.counters.get(model.IGNORED_ACKS, 0),
        chunks_reread=view.counters.get(model.REREAD_CHUNKS, 0),
        iteration_complete=p.iteration_complete,
    )
    if r.finished_ms:
        job.finished_at.CopyFrom(_timestamp(r.finished_ms))
    for lv in p.levels:
        job.levels.append(
            iterator_pb2.LevelProgress(
                level=lv.name,
                discovered=lv.discovered,
                completed=lv.completed,
                emitted=lv.emitted,
                acked=lv.acked,
                all_discovered=lv.all_discovered,
                ranges=lv.ranges,
                ranges_closed=lv.ranges_closed,
            )
        )
    # The binding counters of the default hierarchy: users are its second level.
    users = [lv for i, lv in enumerate(p.levels) if view.spec.scope_level + i == 1]
    if users:
        job.users_discovered = users[0].discovered
        job.users_completed = users[0].completed
        job.all_users_discovered = users[0].all_discovered
    return job


def batch_to_proto(job_id: str, batch: model.ChunkBatch) -> iterator_pb2.ObjectBatch:
    """One stream message from leased chunks (positions unpacked into parents and keys)."""
    message = iterator_pb2.ObjectBatch(job_id=job_id, level=batch.level)
    for c in batch.chunks:
        flat = model.unpack(c.width, c.keys)
        out = message.chunks.add(chunk_id=c.chunk_id, resent=c.sends > 1)
        if batch.scope_read:
            out.key_width = c.width
            out.object_keys.extend(flat)
        else:
            out.key_width = c.width - 1
            out.parent_ids.extend(flat[:: c.width])
            if c.width == 2:
                out.object_keys.extend(flat[1::2])
            else:
                out.object_keys.extend(v for i, v in enumerate(flat) if i % c.width)
    return message
