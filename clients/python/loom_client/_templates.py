"""Typed async calls to ``loom.v1.TemplateInduction``: email template induction."""

from __future__ import annotations

import grpc
from loom.v1 import common_pb2, templates_pb2, templates_pb2_grpc

from ._calls import CallDefaults, Metadata, ServiceClient
from ._retry import RetryPolicy

__all__ = ["TemplatesClient"]


class TemplatesClient(ServiceClient):
    """One snake_case method per RPC of ``loom.v1.TemplateInduction``; see `LoomClient`."""

    __slots__ = ("_stub",)

    def __init__(self, channel: grpc.aio.Channel, defaults: CallDefaults) -> None:
        super().__init__(defaults)
        self._stub = templates_pb2_grpc.TemplateInductionStub(channel)

    async def submit_emails(
        self,
        request: templates_pb2.SubmitEmailsRequest,
        *,
        timeout: float | None = None,
        metadata: Metadata = (),
        retry: RetryPolicy | None = None,
    ) -> templates_pb2.SubmitEmailsResponse:
        """Queues emails for induction; reports how many were accepted and dropped."""
        return await self._unary(self._stub.SubmitEmails, request, timeout, metadata, retry)

    async def annotate_email(
        self,
        request: templates_pb2.AnnotateEmailRequest,
        *,
        timeout: float | None = None,
        metadata: Metadata = (),
        retry: RetryPolicy | None = None,
    ) -> templates_pb2.AnnotateEmailResponse:
        """Fingerprints one email and annotates it with its template, if any."""
        return await self._unary(self._stub.AnnotateEmail, request, timeout, metadata, retry)

    async def get_template(
        self,
        request: templates_pb2.GetTemplateRequest,
        *,
        timeout: float | None = None,
        metadata: Metadata = (),
        retry: RetryPolicy | None = None,
    ) -> templates_pb2.Template:
        """One template. NOT_FOUND when unknown."""
        return await self._unary(self._stub.GetTemplate, request, timeout, metadata, retry)

    async def list_templates(
        self,
        request: templates_pb2.ListTemplatesRequest,
        *,
        timeout: float | None = None,
        metadata: Metadata = (),
        retry: RetryPolicy | None = None,
    ) -> templates_pb2.ListTemplatesResponse:
        """One page of templates, in template id order."""
        return await self._unary(self._stub.ListTemplates, request, timeout, metadata, retry)

    async def get_induction_stats(
        self,
        request: templates_pb2.GetInductionStatsRequest,
        *,
        timeout: float | None = None,
        metadata: Metadata = (),
        retry: RetryPolicy | None = None,
    ) -> templates_pb2.InductionStats:
        """Counters of the induction pipeline (counts only, never content)."""
        return await self._unary(self._stub.GetInductionStats, request, timeout, metadata, retry)

    async def erase_recipients(
        self,
        request: templates_pb2.TemplateInductionEraseRecipientsRequest,
        *,
        timeout: float | None = None,
        metadata: Metadata = (),
        retry: RetryPolicy | None = None,
    ) -> common_pb2.Operation:
        """Erases recipients' stored emails in the background (poll `get_operation`);
        needs ``templates:admin``. Idempotent."""
        return await self._unary(self._stub.EraseRecipients, request, timeout, metadata, retry)

    async def get_operation(
        self,
        request: common_pb2.GetOperationRequest,
        *,
        timeout: float | None = None,
        metadata: Metadata = (),
        retry: RetryPolicy | None = None,
    ) -> common_pb2.Operation:
        """Progress of an EraseRecipients operation. NOT_FOUND for an unknown operation."""
        return await self._unary(self._stub.GetOperation, request, timeout, metadata, retry)
