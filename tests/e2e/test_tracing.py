"""Traces of real calls, read back from a real OpenTelemetry Collector.

The collector is `scripts/engines/otelcol.sh` (the OTLP receiver and the file exporter): the
server exports to it over OTLP/gRPC as ``OTEL_EXPORTER_OTLP_ENDPOINT`` says, and the test
reads the spans the collector wrote. Each test names its own ``OTEL_SERVICE_NAME`` and
caller trace ids, so the spans of other runs in the same file never match.
"""

from __future__ import annotations

import asyncio
import json
import os
import urllib.request
from collections.abc import AsyncIterator, Iterator, MutableMapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import grpc
import pytest
import pytest_asyncio
import structlog
from loom.v1 import inbox_pb2, inbox_pb2_grpc, iterator_pb2_grpc, templates_pb2, templates_pb2_grpc
from loom.v1 import iterator_pb2 as it

from server.runtime import tracing
from storage.sqlite.demo_source import write_demo_source
from tests.engines import COLLECTOR, REPO, require, settings_for, unique
from tests.serving import Running, eventually, free_port, loom_process, running_server

pytestmark = pytest.mark.engine(COLLECTOR)

SERVER, CLIENT, CONSUMER = 2, 3, 5  # OTLP span kinds
RECIPIENTS = 55  # over sync_fanout_max (10): fanned out in the background, 3 batches of 20


@dataclass
class Traced:
    """A server exporting its spans to the collector, under a service name of its own."""

    running: Running
    service: str
    spans_file: Path
    metrics_port: int

    def spans(self) -> list[dict[str, Any]]:
        """This server's spans the collector has written so far (OTLP/JSON, flattened)."""
        return _exported(self.spans_file, self.service)


def _exported(spans_file: Path, service: str) -> list[dict[str, Any]]:
    """The spans of `service` in the collector's file so far (OTLP/JSON, flattened)."""
    found: list[dict[str, Any]] = []
    for line in spans_file.read_text(encoding="utf-8").splitlines():
        for resource in json.loads(line).get("resourceSpans", ()):
            names = [
                a["value"].get("stringValue")
                for a in resource["resource"].get("attributes", ())
                if a["key"] == "service.name"
            ]
            if names != [service]:
                continue
            for scope in resource.get("scopeSpans", ()):
                found.extend(scope.get("spans", ()))
    return found


def _attrs(span: dict[str, Any]) -> dict[str, Any]:
    return {a["key"]: next(iter(a["value"].values()), None) for a in span.get("attributes", ())}


def _caller() -> tuple[str, str, tuple[tuple[str, str], ...]]:
    """A caller's trace id, span id and the metadata carrying them as a W3C traceparent."""
    trace_id, span_id = os.urandom(16).hex(), os.urandom(8).hex()
    return trace_id, span_id, (("traceparent", f"00-{trace_id}-{span_id}-01"),)


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def traced(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Traced]:
    """A server on the embedded engines, tracing on as the OTEL_* variables turn it on."""
    require(COLLECTOR)
    service = unique("loom-test-")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", os.environ["LOOM_TEST_OTELCOL_ENDPOINT"])
        patch.setenv("OTEL_SERVICE_NAME", service)
        assert tracing.configure()
    try:
        data = Path(tmp_path_factory.mktemp("tracing"))
        settings = settings_for("sqlite", data)
        write_demo_source(Path(settings.sqlite.data_dir))
        metrics_port = free_port()
        settings = replace(
            settings,
            server=replace(settings.server, metrics_port=metrics_port),
            inbox=replace(settings.inbox, sync_fanout_max=10, fanout_chunk=20),
        )
        async with running_server(settings) as running:
            yield Traced(
                running, service, Path(os.environ["LOOM_TEST_OTELCOL_SPANS"]), metrics_port
            )
    finally:
        tracing.shutdown()


@pytest.fixture
def logs() -> Iterator[list[MutableMapping[str, Any]]]:
    """Every log event while the test runs, with the call's context variables merged."""
    processors: list[structlog.typing.Processor] = [structlog.contextvars.merge_contextvars]
    with structlog.testing.capture_logs(processors=processors) as entries:
        yield entries


async def _read_back(traced: Traced, done: Any, what: str) -> list[dict[str, Any]]:
    async def probe() -> list[dict[str, Any]]:
        tracing.flush()
        return traced.spans()

    return await eventually(probe, done, timeout_s=30.0, interval_s=0.2, what=what)


class TestPostMessageFanout:
    async def test_rpc_span_continues_the_caller_and_links_the_background_fanout(
        self, traced: Traced, logs: list[MutableMapping[str, Any]]
    ) -> None:
        """PostMessage's span is the caller's child with method and status; its storage calls
        are CLIENT spans under it; the fan-out it queued runs in a trace of its own linked
        back to it, one batch span per chunk, each with its store call under it."""
        trace_id, parent_id, metadata = _caller()
        stub = inbox_pb2_grpc.InboxStub(traced.running.channel)
        recipients = [unique("r") for _ in range(RECIPIENTS)]
        reply = await stub.PostMessage(
            inbox_pb2.PostMessageRequest(
                thread_id=unique("t"),
                message_id=1,
                sender_inbox_id=unique("s"),
                recipient_inbox_ids=recipients,
            ),
            metadata=metadata,
        )
        assert reply.delivery_id  # over sync_fanout_max: in the background

        def complete(spans: list[dict[str, Any]]) -> bool:
            rpc = [s for s in spans if s["traceId"] == trace_id and s["kind"] == SERVER]
            if not rpc:
                return False
            fanout = [s for s in spans if s["name"] == "inbox.fanout" and _links_to(s, rpc[0])]
            if not fanout:
                return False
            return len(_batches(spans, fanout[0])) == 3

        spans = await _read_back(traced, complete, "PostMessage and its fan-out exported")
        (rpc,) = [s for s in spans if s["traceId"] == trace_id and s["kind"] == SERVER]
        assert rpc["name"] == "loom.v1.Inbox/PostMessage"
        assert rpc["parentSpanId"] == parent_id
        attrs = _attrs(rpc)
        assert (attrs["rpc.service"], attrs["rpc.method"]) == ("loom.v1.Inbox", "PostMessage")
        assert attrs["rpc.response.status_code"] == "OK"
        assert int(attrs["rpc.grpc.status_code"]) == 0

        stored = [s for s in spans if s.get("parentSpanId") == rpc["spanId"]]
        assert stored
        assert all(s["kind"] == CLIENT for s in stored)
        assert {_attrs(s)["db.system.name"] for s in stored} == {"sqlite"}
        assert all(_attrs(s)["db.operation.name"] for s in stored)

        (fanout,) = [s for s in spans if s["name"] == "inbox.fanout" and _links_to(s, rpc)]
        assert fanout["traceId"] != trace_id  # its own trace, linked to the request
        assert fanout["kind"] == CONSUMER
        assert _attrs(fanout)["loom.delivery_id"] == reply.delivery_id
        batches = _batches(spans, fanout)
        assert sorted(int(_attrs(b)["loom.inboxes"]) for b in batches) == [15, 20, 20]
        for batch in batches:
            (call,) = [s for s in spans if s.get("parentSpanId") == batch["spanId"]]
            assert _attrs(call)["db.operation.name"] == "deliver_unread"
            assert int(_attrs(call)["loom.rows_sent"]) == int(_attrs(batch)["loom.inboxes"])

        (line,) = [e for e in logs if e.get("component") == "rpc" and e.get("trace_id")]
        assert (line["method"], line["trace_id"]) == ("loom.v1.Inbox/PostMessage", trace_id)

    async def test_latency_histogram_carries_the_trace_id_as_an_exemplar(
        self, traced: Traced
    ) -> None:
        """The OpenMetrics exposition shows a traced call's trace id on its latency bucket."""
        trace_id, _, metadata = _caller()
        stub = inbox_pb2_grpc.InboxStub(traced.running.channel)
        await stub.GetUnreadCount(
            inbox_pb2.GetUnreadCountRequest(inbox_id=unique("i")), metadata=metadata
        )
        request = urllib.request.Request(
            f"http://127.0.0.1:{traced.metrics_port}/metrics",
            headers={"Accept": "application/openmetrics-text; version=1.0.0"},
        )
        body = await asyncio.to_thread(_fetch, request)
        buckets = [
            line
            for line in body.splitlines()
            if line.startswith("loom_rpc_duration_seconds_bucket")
            and 'method="loom.v1.Inbox/GetUnreadCount"' in line
        ]
        assert any(f'# {{trace_id="{trace_id}"}}' in line for line in buckets)

    async def test_a_failed_call_carries_its_status(self, traced: Traced) -> None:
        """A call answered with an error code has that code on its span."""
        trace_id, _, metadata = _caller()
        stub = inbox_pb2_grpc.InboxStub(traced.running.channel)
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await stub.GetUnreadCount(inbox_pb2.GetUnreadCountRequest(), metadata=metadata)
        code = caught.value.code()

        def exported(spans: list[dict[str, Any]]) -> bool:
            return any(s["traceId"] == trace_id for s in spans)

        spans = await _read_back(traced, exported, "the failed call's span exported")
        (rpc,) = [s for s in spans if s["traceId"] == trace_id]
        assert _attrs(rpc)["rpc.response.status_code"] == code.name
        assert int(_attrs(rpc)["rpc.grpc.status_code"]) == code.value[0]


def _batches(spans: list[dict[str, Any]], fanout: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        s
        for s in spans
        if s.get("parentSpanId") == fanout["spanId"] and s["name"] == "inbox.fanout.batch"
    ]


def _fetch(request: urllib.request.Request) -> str:
    with urllib.request.urlopen(request, timeout=10) as answer:
        return str(answer.read().decode())


def _links_to(span: dict[str, Any], target: dict[str, Any]) -> bool:
    return any(
        (link["traceId"], link["spanId"]) == (target["traceId"], target["spanId"])
        for link in span.get("links", ())
    )


class TestIteratorChunks:
    async def test_each_chunk_links_back_through_its_queue(self, traced: Traced) -> None:
        """Every chunk of a job is a span in its own trace whose link leads, through the
        work messages that carried the trace context, back to StartIteration's span; the
        chunk's storage calls are its children."""
        trace_id, _, metadata = _caller()
        stub = iterator_pb2_grpc.IteratorStub(traced.running.channel)
        job = await stub.StartIteration(
            it.StartIterationRequest(enterprise_id=3, level="file"), metadata=metadata
        )
        async for _batch in stub.StreamObjects(it.StreamObjectsRequest(job_id=job.job_id)):
            pass  # ends once the job is complete

        def chunks(spans: list[dict[str, Any]]) -> list[dict[str, Any]]:
            return [
                s
                for s in spans
                if s["name"] == "iterator.chunk" and _attrs(s)["loom.job_id"] == job.job_id
            ]

        def complete(spans: list[dict[str, Any]]) -> bool:
            started = [s for s in spans if s["traceId"] == trace_id and s["kind"] == SERVER]
            return bool(started) and any(_links_to(c, started[0]) for c in chunks(spans))

        spans = await _read_back(traced, complete, "StartIteration and its chunks exported")
        (started,) = [s for s in spans if s["traceId"] == trace_id and s["kind"] == SERVER]
        assert started["name"] == "loom.v1.Iterator/StartIteration"
        by_id = {s["spanId"]: s for s in spans}
        for chunk in chunks(spans):
            assert chunk["kind"] == CONSUMER
            assert chunk["traceId"] != trace_id
            # Follow the links back: every chunk descends from the request that started it.
            hop = chunk
            for _ in range(100):
                (link,) = hop["links"]
                hop = by_id[link["spanId"]]
                if hop["name"] != "iterator.chunk":
                    break
            assert hop is started
            stored = [s for s in spans if s.get("parentSpanId") == chunk["spanId"]]
            assert stored
            assert all(s["kind"] == CLIENT for s in stored)


class TestTemplateInductionCpuStage:
    async def test_a_cpu_batch_links_to_the_request_of_its_emails(self, traced: Traced) -> None:
        """SubmitEmails answers at once; the CPU stage's batch that parses its emails later
        is a span of its own trace, linked to the SubmitEmails span."""
        trace_id, _, metadata = _caller()
        stub = templates_pb2_grpc.TemplateInductionStub(traced.running.channel)
        emails = [
            templates_pb2.Email(
                email_id=unique("e"),
                sender="orders@shop.example",
                recipient_id=unique("u"),
                subject=f"Your order {i}",
                html_body=f"<html><body><p>Thanks for your order {i}</p></body></html>",
            )
            for i in range(3)
        ]
        await stub.SubmitEmails(templates_pb2.SubmitEmailsRequest(emails=emails), metadata=metadata)

        def complete(spans: list[dict[str, Any]]) -> bool:
            submitted = [s for s in spans if s["traceId"] == trace_id and s["kind"] == SERVER]
            return bool(submitted) and any(
                s["name"] == "templates.cpu_batch" and _links_to(s, submitted[0]) for s in spans
            )

        spans = await _read_back(traced, complete, "SubmitEmails and its CPU batch exported")
        (submitted,) = [s for s in spans if s["traceId"] == trace_id and s["kind"] == SERVER]
        assert submitted["name"] == "loom.v1.TemplateInduction/SubmitEmails"
        batches = [
            s for s in spans if s["name"] == "templates.cpu_batch" and _links_to(s, submitted)
        ]
        assert sum(int(_attrs(b)["loom.emails"]) for b in batches) >= 1
        assert all(b["traceId"] != trace_id and b["kind"] == CONSUMER for b in batches)


class TestLoomServe:
    async def test_a_serving_process_exports_as_its_otel_variables_say(
        self, tmp_path: Path
    ) -> None:
        """`loom serve` with OTEL_EXPORTER_OTLP_ENDPOINT exports its spans (the last ones on
        SIGTERM), and its JSON log line of the call names the trace."""
        require(COLLECTOR)
        service = unique("loom-serve-")
        env = {
            "OTEL_EXPORTER_OTLP_ENDPOINT": os.environ["LOOM_TEST_OTELCOL_ENDPOINT"],
            "OTEL_SERVICE_NAME": service,
            "PYTHONPATH": str(REPO),  # this tree's server, whichever the venv installed
        }
        trace_id, parent_id, metadata = _caller()
        async with (
            loom_process(tmp_path, env=env) as served,
            grpc.aio.insecure_channel(served.target) as channel,
        ):
            stub = inbox_pb2_grpc.InboxStub(channel)
            await stub.GetUnreadCount(
                inbox_pb2.GetUnreadCountRequest(inbox_id=unique("i")), metadata=metadata
            )
        # Stopped: its last batch went out at shutdown, before the process exited.
        spans_file = Path(os.environ["LOOM_TEST_OTELCOL_SPANS"])

        def exported(spans: list[dict[str, Any]]) -> bool:
            return any(s["traceId"] == trace_id for s in spans)

        spans = await eventually(
            lambda: asyncio.to_thread(_exported, spans_file, service),
            exported,
            timeout_s=10.0,
            what="the process's spans exported",
        )
        (rpc,) = [s for s in spans if s["traceId"] == trace_id and s["kind"] == SERVER]
        assert (rpc["name"], rpc["parentSpanId"]) == ("loom.v1.Inbox/GetUnreadCount", parent_id)
        assert any(s.get("parentSpanId") == rpc["spanId"] for s in spans)  # its storage call
        (line,) = [e for e in served.log_lines() if e.get("method") == rpc["name"]]
        assert line["trace_id"] == trace_id
