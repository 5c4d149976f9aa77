"""Summary's protobuf <-> domain translation, with every input check.

Bounds (from ``limits.py``): message and recipient ids 1..256 bytes of UTF-8 without NUL,
1..10,000 events per call, status DELIVERED, READ or FAILED. proto3 enums are open, so an
unknown status number arrives intact and is rejected here like UNSPECIFIED, by field path
(``events[3].status``). At most `MAX_REPORTED_VIOLATIONS` are listed: a 10,000-event batch of
garbage should not produce a megabyte of error details.
"""

from __future__ import annotations

from collections.abc import Sequence

from loom.v1 import common_pb2, summary_pb2

from server.runtime.validation import Violations
from server.summary.limits import (
    MAX_EVENTS_PER_REQUEST,
    MAX_MESSAGE_ID_BYTES,
    MAX_RECIPIENT_ID_BYTES,
)
from server.summary.model import STATUS_ORDER, DeliveryEvent, DeliveryStatus, SummaryView
from server.summary.operations import OperationRecord, OperationState
from server.summary.recipients import Tier

__all__ = [
    "MAX_IDS_PER_DELETION",
    "MAX_REPORTED_VIOLATIONS",
    "events_from_proto",
    "ids_from_proto",
    "message_id_from_proto",
    "operation_id_from_proto",
    "operation_to_proto",
    "summary_to_proto",
]

MAX_REPORTED_VIOLATIONS = 100
MAX_IDS_PER_DELETION = 1000
_STATE: dict[OperationState, common_pb2.OperationState.ValueType] = {
    OperationState.RUNNING: common_pb2.OPERATION_STATE_RUNNING,
    OperationState.DONE: common_pb2.OPERATION_STATE_DONE,
    OperationState.FAILED: common_pb2.OPERATION_STATE_FAILED,
}

_FROM_PROTO: dict[int, DeliveryStatus] = {
    summary_pb2.DELIVERY_STATUS_DELIVERED: DeliveryStatus.DELIVERED,
    summary_pb2.DELIVERY_STATUS_READ: DeliveryStatus.READ,
    summary_pb2.DELIVERY_STATUS_FAILED: DeliveryStatus.FAILED,
}
_TO_PROTO: dict[DeliveryStatus, summary_pb2.DeliveryStatus.ValueType] = {
    DeliveryStatus.DELIVERED: summary_pb2.DELIVERY_STATUS_DELIVERED,
    DeliveryStatus.READ: summary_pb2.DELIVERY_STATUS_READ,
    DeliveryStatus.FAILED: summary_pb2.DELIVERY_STATUS_FAILED,
}
_ESTIMATOR: dict[Tier, summary_pb2.Estimator.ValueType] = {
    Tier.EXACT: summary_pb2.ESTIMATOR_EXACT,
    Tier.BITMAP: summary_pb2.ESTIMATOR_LINEAR_COUNTING,
    Tier.HLL: summary_pb2.ESTIMATOR_HYPERLOGLOG,
    Tier.CPC: summary_pb2.ESTIMATOR_CPC,
}


def message_id_from_proto(message_id: str) -> str:
    """Validates the message id of any Summary call."""
    v = Violations()
    v.identifier("message_id", message_id, max_bytes=MAX_MESSAGE_ID_BYTES)
    v.raise_if_any()
    return message_id


def events_from_proto(
    request: summary_pb2.RecordDeliveryEventsRequest,
) -> tuple[str, list[DeliveryEvent]]:
    """(message id, events) of a RecordDeliveryEvents call; InvalidArgument names bad fields."""
    v = Violations()
    v.identifier("message_id", request.message_id, max_bytes=MAX_MESSAGE_ID_BYTES)
    events: list[DeliveryEvent] = []
    if v.count("events", request.events, minimum=1, maximum=MAX_EVENTS_PER_REQUEST):
        bad = 0
        for i, event in enumerate(request.events):
            status = _FROM_PROTO.get(event.status)
            id_ok = v.identifier(
                f"events[{i}].recipient_id", event.recipient_id, max_bytes=MAX_RECIPIENT_ID_BYTES
            )
            status_ok = v.check(
                status is not None,
                f"events[{i}].status",
                f"must be DELIVERED, READ or FAILED (got {event.status})",
            )
            if id_ok and status is not None:
                events.append(DeliveryEvent(event.recipient_id, status))
                continue
            bad += (not id_ok) + (not status_ok)
            if bad >= MAX_REPORTED_VIOLATIONS:
                v.add("events", f"too many invalid events; stopped after events[{i}]")
                break
    v.raise_if_any()
    return request.message_id, events


def summary_to_proto(message_id: str, view: SummaryView) -> summary_pb2.MessageSummary:
    """A GetMessageSummary response: DELIVERED, READ, FAILED in that order."""
    return summary_pb2.MessageSummary(
        message_id=message_id,
        encoded_size_bytes=view.encoded_size_bytes,
        statuses=[
            summary_pb2.StatusSummary(
                status=_TO_PROTO[status],
                count=sv.count,
                exact=sv.exact,
                recipient_ids=sv.recipient_ids,
                relative_error_bound=sv.relative_error_bound,
                estimator=_ESTIMATOR[sv.tier],
            )
            for status in STATUS_ORDER
            for sv in (view.statuses[status],)
        ],
    )


def ids_from_proto(field: str, ids: Sequence[str], *, max_bytes: int) -> list[str]:
    """1..`MAX_IDS_PER_DELETION` ids of a deletion or erasure, each named by its index when
    malformed (``message_ids[3]``); duplicates are fine (deleting twice is deleting once)."""
    v = Violations()
    if v.count(field, ids, minimum=1, maximum=MAX_IDS_PER_DELETION):
        bad = 0
        for i, value in enumerate(ids):
            bad += not v.identifier(f"{field}[{i}]", value, max_bytes=max_bytes)
            if bad >= MAX_REPORTED_VIOLATIONS:
                v.add(field, f"too many invalid ids; stopped after {field}[{i}]")
                break
    v.raise_if_any()
    return list(ids)


def operation_id_from_proto(request: common_pb2.GetOperationRequest) -> str:
    """The id of a GetOperation call."""
    v = Violations()
    v.identifier("operation_id", request.operation_id, max_bytes=64)
    v.raise_if_any()
    return request.operation_id


def operation_to_proto(op: OperationRecord) -> common_pb2.Operation:
    """A background operation as GetOperation (and the call that started it) answers."""
    return common_pb2.Operation(
        operation_id=op.operation_id,
        kind=op.kind,
        state=_STATE[op.state],
        progress=common_pb2.Progress(done=op.done, total=op.total),
        error=op.error,
    )
