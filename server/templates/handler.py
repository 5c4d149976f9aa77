"""The TemplateInduction gRPC servicer: protobuf in, domain call, protobuf out; nothing else."""

from __future__ import annotations

import grpc
from loom.v1 import common_pb2, templates_pb2, templates_pb2_grpc

from server.runtime.erasures import ErasureRecorder
from server.runtime.policies import MethodPolicy
from server.summary.convert import ids_from_proto, operation_id_from_proto, operation_to_proto
from server.templates import convert
from server.templates.model import recipient_hash
from server.templates.service import TemplateInductionService
from server.templates.settings import TemplatesSettings

__all__ = ["POLICIES", "TemplateInductionHandler"]

_S = "loom.v1.TemplateInduction/"
POLICIES: dict[str, MethodPolicy] = {
    # A SubmitEmails call may carry up to the 16 MiB message limit: few at once bound memory.
    _S + "SubmitEmails": MethodPolicy(max_concurrency=8, max_waiting=16, deadline_s=10.0),
    _S + "AnnotateEmail": MethodPolicy(max_concurrency=64, max_waiting=128, deadline_s=5.0),
    _S + "GetTemplate": MethodPolicy(max_concurrency=64, max_waiting=128, deadline_s=5.0),
    _S + "ListTemplates": MethodPolicy(max_concurrency=16, max_waiting=32, deadline_s=10.0),
    _S + "GetInductionStats": MethodPolicy(max_concurrency=8, max_waiting=16, deadline_s=2.0),
    # Answers at once; the walk runs in the background (GetOperation).
    _S + "EraseRecipients": MethodPolicy(
        max_concurrency=4, max_waiting=8, deadline_s=5.0, scope="templates:admin"
    ),
    _S + "GetOperation": MethodPolicy(max_concurrency=16, max_waiting=32, deadline_s=2.0),
}


class TemplateInductionHandler(templates_pb2_grpc.TemplateInductionServicer):
    """Serves `loom.v1.TemplateInduction` from a `TemplateInductionService`."""

    def __init__(
        self,
        service: TemplateInductionService,
        limits: TemplatesSettings,
        erasures: ErasureRecorder,
    ) -> None:
        self._service = service
        self._limits = limits
        self._erasures = erasures

    async def SubmitEmails(  # noqa: N802 - gRPC method name
        self, request: templates_pb2.SubmitEmailsRequest, context: grpc.aio.ServicerContext
    ) -> templates_pb2.SubmitEmailsResponse:
        got = self._service.submit(convert.emails_from_proto(request, self._limits))
        return templates_pb2.SubmitEmailsResponse(
            accepted=got.accepted, dropped=got.dropped, duplicates=got.duplicates
        )

    async def AnnotateEmail(  # noqa: N802
        self, request: templates_pb2.AnnotateEmailRequest, context: grpc.aio.ServicerContext
    ) -> templates_pb2.AnnotateEmailResponse:
        email = convert.email_from_proto(request, self._limits)
        return convert.annotation_to_proto(await self._service.annotate(email))

    async def GetTemplate(  # noqa: N802
        self, request: templates_pb2.GetTemplateRequest, context: grpc.aio.ServicerContext
    ) -> templates_pb2.Template:
        template_id = convert.template_id_from_proto(request)
        return convert.template_to_proto(await self._service.get_template(template_id))

    async def ListTemplates(  # noqa: N802
        self, request: templates_pb2.ListTemplatesRequest, context: grpc.aio.ServicerContext
    ) -> templates_pb2.ListTemplatesResponse:
        sender, size, after = convert.list_request_from_proto(request)
        page, last = await self._service.list_templates(sender, size, after)
        return templates_pb2.ListTemplatesResponse(
            templates=[convert.template_to_proto(t) for t in page],
            next_page_token=last.hex() if last is not None else "",
        )

    async def GetInductionStats(  # noqa: N802
        self, request: templates_pb2.GetInductionStatsRequest, context: grpc.aio.ServicerContext
    ) -> templates_pb2.InductionStats:
        c = self._service.counters
        cpu, io, form = self._service.queue_depths()
        return templates_pb2.InductionStats(
            accepted=c.accepted,
            dropped_cpu=c.dropped_cpu,
            dropped_io=c.dropped_io,
            dropped_formations=c.dropped_formations,
            fingerprinted=c.fingerprinted,
            processed=c.processed,
            skipped_full=c.skipped_full,
            formations=c.formations,
            templates_formed=c.templates_formed,
            failed=c.failed,
            cpu_queue_depth=cpu,
            io_queue_depth=io,
            formation_queue_depth=form,
        )

    async def EraseRecipients(  # noqa: N802
        self,
        request: templates_pb2.TemplateInductionEraseRecipientsRequest,
        context: grpc.aio.ServicerContext,
    ) -> common_pb2.Operation:
        ids = ids_from_proto("recipient_ids", request.recipient_ids, max_bytes=convert.MAX_ID_BYTES)
        # The store knows a recipient only by its keyed hash; the log names that, so a
        # restore can match what the store holds (first: a restore finishes what stops).
        key = self._limits.recipient_hash_key.encode()
        await self._erasures.erased("templates", [recipient_hash(r, key) for r in ids])
        return operation_to_proto(await self._service.erase_recipients(ids))

    async def GetOperation(  # noqa: N802
        self, request: common_pb2.GetOperationRequest, context: grpc.aio.ServicerContext
    ) -> common_pb2.Operation:
        operation_id = operation_id_from_proto(request)
        return operation_to_proto(self._service.operations.get(operation_id))
