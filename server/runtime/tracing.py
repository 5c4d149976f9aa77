"""OpenTelemetry tracing: off unless the standard ``OTEL_*`` variables ask for it.

`configure` installs an SDK tracer provider exporting over OTLP only when
``OTEL_TRACES_EXPORTER=otlp`` or an ``OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT`` is set (and
``OTEL_SDK_DISABLED`` is not ``true``). Otherwise nothing is installed and every hook below
costs one module-global check: no span, no context, no id is made.

What is traced, when on:

- one SERVER span per Loom RPC (`rpc_started` / `rpc_ended`, from the interceptor), named
  after the method, with ``rpc.service``, ``rpc.method`` and the final status
  (``rpc.grpc.status_code``, ``rpc.response.status_code``); a caller's W3C ``traceparent``
  (gRPC metadata) is continued;
- one CLIENT span per storage call (`stored`, from `server.runtime.guard`) under whatever
  span is current: ``db.system.name`` (the engine), ``db.operation.name`` (the port method),
  ``loom.rows_sent`` and ``db.response.returned_rows`` where the arguments or the answer
  have a length. A storage call with no span around it (an idle worker polling) makes none;
- work that leaves the request starts a new trace whose first span links to the span that
  queued it (`linked`): the Inbox fan-out of a large post, each Iterator chunk (the
  ``traceparent`` travels inside the queued work message, so another process continues it),
  each TemplateInduction CPU-stage batch (linked to the requests whose emails it holds).

The trace id of the current call is bound into the structlog context (``trace_id`` on every
log line of the call) and attached as an exemplar to the RPC latency histogram.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Awaitable, Iterable, Iterator, Mapping, Sequence
from typing import Any

import grpc
import structlog
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

__all__ = [
    "RpcSpan",
    "child",
    "configure",
    "current_link",
    "enabled",
    "flush",
    "linked",
    "parse_traceparent",
    "rpc_ended",
    "rpc_started",
    "shutdown",
    "stored",
    "traceparent",
]

_tracer: trace.Tracer | None = None
_provider: Any = None
_W3C = TraceContextTextMapPropagator()
# The gRPC codes the OpenTelemetry conventions count as a server's error (the others are
# the caller's: NOT_FOUND, INVALID_ARGUMENT, ...).
_SERVER_ERRORS = frozenset(
    {
        grpc.StatusCode.UNKNOWN,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.UNIMPLEMENTED,
        grpc.StatusCode.INTERNAL,
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DATA_LOSS,
    }
)
_MAX_LINKS = 32


def _wanted(env: Mapping[str, str]) -> bool:
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporter = env.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if exporter == "none":
        return False
    if exporter:
        if exporter != "otlp":
            msg = f"OTEL_TRACES_EXPORTER={exporter!r}: Loom exports traces over OTLP only"
            raise ValueError(msg)
        return True
    return bool(
        env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    )


def configure() -> bool:
    """Turns tracing on when the ``OTEL_*`` variables ask for it; whether it is on.

    The exporter (OTLP over gRPC; another ``OTEL_EXPORTER_OTLP_PROTOCOL`` is refused), its
    endpoint, headers, TLS and timeout, the sampler and the batch processor
    read their own standard variables; ``OTEL_SERVICE_NAME`` names the service (``loom``
    when unset). Called once per serving process."""
    global _tracer, _provider  # noqa: PLW0603 - one provider per process, like logging's set-up
    env = os.environ
    if _tracer is not None or not _wanted(env):
        return _tracer is not None
    # Imported only when on: a server with tracing off never loads the SDK or the exporter.
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    protocol = env.get(
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", env.get("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
    ).strip()
    if protocol != "grpc":
        msg = f"OTEL_EXPORTER_OTLP_PROTOCOL={protocol!r}: Loom exports OTLP over gRPC only"
        raise ValueError(msg)
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

    resource = Resource.create({"service.name": env.get("OTEL_SERVICE_NAME") or "loom"})
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    _provider = provider
    _tracer = provider.get_tracer("loom")
    return True


def flush(timeout_s: float = 10.0) -> bool:
    """Exports every span ended so far now (instead of at the batch's next tick); whether
    all went out in `timeout_s`."""
    return _provider is None or bool(_provider.force_flush(int(timeout_s * 1000)))


def shutdown() -> None:
    """Exports the spans still buffered and turns tracing off (server stop)."""
    global _tracer, _provider  # noqa: PLW0603
    if _provider is not None:
        _provider.shutdown()
    _tracer = _provider = None


def enabled() -> bool:
    """Whether spans are being made (the one check the hot path pays when off)."""
    return _tracer is not None


class RpcSpan:
    """The span of one RPC, current while the call runs."""

    __slots__ = ("span", "token", "trace_id")

    def __init__(self, span: trace.Span, token: object) -> None:
        self.span = span
        self.token = token
        found = span.get_span_context()
        self.trace_id = format(found.trace_id, "032x") if found.trace_flags.sampled else ""
        """The trace id when the trace is kept ("" when the sampler dropped it: no log line
        or exemplar then names a trace that was never exported)."""


def rpc_started(method: str, metadata: Sequence[tuple[str, Any]] | None) -> RpcSpan | None:
    """Starts the span of the call `method` (``pkg.Service/Method``), continuing the caller's
    ``traceparent``; None when tracing is off."""
    if _tracer is None:
        return None
    carrier = {k: v for k, v in metadata or () if isinstance(v, str)}
    parent = _W3C.extract(carrier) if "traceparent" in carrier else None
    service, _, name = method.partition("/")
    span = _tracer.start_span(
        method,
        context=parent,
        kind=SpanKind.SERVER,
        attributes={"rpc.system": "grpc", "rpc.service": service, "rpc.method": name},
    )
    rpc = RpcSpan(span, otel_context.attach(trace.set_span_in_context(span)))
    if rpc.trace_id:
        structlog.contextvars.bind_contextvars(trace_id=rpc.trace_id)
    return rpc


def rpc_ended(rpc: RpcSpan, code: grpc.StatusCode) -> None:
    """Ends the call's span with its final status."""
    span = rpc.span
    span.set_attribute("rpc.grpc.status_code", code.value[0])
    span.set_attribute("rpc.response.status_code", code.name)
    if code in _SERVER_ERRORS:
        span.set_status(Status(StatusCode.ERROR, code.name))
    span.end()
    with contextlib.suppress(ValueError):  # a stream's last step may run in another context
        otel_context.detach(rpc.token)  # type: ignore[arg-type]
    if rpc.trace_id:
        structlog.contextvars.unbind_contextvars("trace_id")


def _length(value: object) -> int | None:
    if isinstance(value, str | bytes):
        return None
    try:
        return len(value)  # type: ignore[arg-type]
    except TypeError:
        return None


async def stored(engine: str, operation: str, call: Awaitable[Any], args: Sequence[object]) -> Any:
    """Awaits the storage call `call` inside a CLIENT span when a span is current."""
    if _tracer is None or not trace.get_current_span().is_recording():
        return await call
    attributes: dict[str, Any] = {"db.system.name": engine, "db.operation.name": operation}
    for arg in args:
        sent = _length(arg)
        if sent is not None:
            attributes["loom.rows_sent"] = sent
            break
    with _tracer.start_as_current_span(
        f"{engine} {operation}", kind=SpanKind.CLIENT, attributes=attributes
    ) as span:
        result = await call
        returned = _length(result)
        if returned is not None:
            span.set_attribute("db.response.returned_rows", returned)
        return result


def current_link() -> SpanContext | None:
    """The current span's context, for work queued now to link back to (None when off)."""
    if _tracer is None:
        return None
    found = trace.get_current_span().get_span_context()
    return found if found.is_valid else None


def traceparent() -> str:
    """The current span as a W3C ``traceparent`` ("" when off or outside a span)."""
    if _tracer is None:
        return ""
    carrier: dict[str, str] = {}
    _W3C.inject(carrier)
    return carrier.get("traceparent", "")


def parse_traceparent(value: str) -> SpanContext | None:
    """The span a ``traceparent`` names (None when tracing is off or it is not one)."""
    if _tracer is None or not value:
        return None
    found = trace.get_current_span(_W3C.extract({"traceparent": value})).get_span_context()
    return found if found.is_valid else None


@contextlib.contextmanager
def linked(
    name: str, links: Iterable[SpanContext | None], attributes: Mapping[str, str | int]
) -> Iterator[None]:
    """A span in a new trace, current inside the block, linked to `links` (each queued the
    work it does); nothing when tracing is off."""
    if _tracer is None:
        yield
        return
    found: dict[tuple[int, int], SpanContext] = {}
    for link in links:
        if link is not None and len(found) < _MAX_LINKS:
            found.setdefault((link.trace_id, link.span_id), link)
    with _tracer.start_as_current_span(
        name,
        context=otel_context.Context(),
        kind=SpanKind.CONSUMER,
        links=[Link(c) for c in found.values()],
        attributes=attributes,
    ):
        yield


@contextlib.contextmanager
def child(name: str, attributes: Mapping[str, str | int]) -> Iterator[None]:
    """A span under the current one (nothing when off or outside a span)."""
    if _tracer is None or not trace.get_current_span().is_recording():
        yield
        return
    with _tracer.start_as_current_span(name, attributes=attributes):
        yield
