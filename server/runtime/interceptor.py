"""One server interceptor applies the cross-cutting rules to every Loom RPC.

For each call: a request id (the caller's ``x-request-id`` or a new one), the method's
bulkhead (full: RESOURCE_EXHAUSTED at once), the effective deadline (the method default, or
the client's when shorter; exceeded: the work is cancelled and DEADLINE_EXCEEDED returned),
error mapping (`server.runtime.status`), one JSON log line with method, status, duration
and request id, and the call's span when tracing is on (`server.runtime.tracing`). Health and reflection calls pass through untouched.

A request whose bytes are not a valid message (corrupt wire format, invalid UTF-8 in a string
field) never reaches the handler: the deserializer grpc calls is wrapped so that it returns a
`_Malformed` marker instead of raising (an exception there becomes UNKNOWN with a Python class
name in the details), and the call answers INVALID_ARGUMENT "request is not a valid <type>".

The last guard: an exception no layer mapped (`server.runtime.status.is_unmapped`) — raised by
a handler, by the token check, or by this interceptor's own bookkeeping — answers INTERNAL
"internal error (request id …)", never UNKNOWN with a Python class name and message (grpc's
answer to anything that escapes). It is a bug: its call's one log line is an error carrying
the traceback, and ``loom_rpc_unmapped_errors_total`` counts it.
"""

from __future__ import annotations

import asyncio
import inspect
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, NoReturn

import grpc
import structlog
from google.protobuf.message import DecodeError

from server.runtime import tracing
from server.runtime.auth import Authenticator, method_scope
from server.runtime.bulkhead import BulkheadFull
from server.runtime.deadlines import serving
from server.runtime.errors import (
    DeadlineExceeded,
    FieldViolation,
    InvalidArgument,
    LoomError,
    Unavailable,
)
from server.runtime.logs import get_logger
from server.runtime.metrics import Metrics
from server.runtime.policies import PolicyTable
from server.runtime.status import code_for, is_unmapped, rich_status

__all__ = ["RpcInterceptor"]

_log = get_logger("rpc")
_LOOM_PREFIX = "/loom."
# Outcomes that are part of normal operation: load shedding under a flood is the bulkhead
# doing its job, and a warning per refused call would itself load the loop being protected.
_ROUTINE = (grpc.StatusCode.OK, grpc.StatusCode.NOT_FOUND, grpc.StatusCode.RESOURCE_EXHAUSTED)


def _request_id(context: grpc.aio.ServicerContext) -> str:
    for key, value in context.invocation_metadata() or ():
        if key == "x-request-id" and isinstance(value, str) and 0 < len(value) <= 128:
            return value
    return uuid.uuid4().hex


def _effective_deadline(context: grpc.aio.ServicerContext, default_s: float) -> float:
    remaining = context.time_remaining()
    return default_s if remaining is None else max(0.0, min(default_s, remaining))


_DRAINING = Unavailable("server is shutting down; retry the call (another replica will take it)")


class _Malformed:
    """What the wrapped deserializer returns for bytes that are not a valid request."""

    __slots__ = ("error",)

    def __init__(self, type_name: str, reason: str) -> None:
        self.error = InvalidArgument(
            [FieldViolation("", f"not a valid {type_name}: {reason}")],
            f"request is not a valid {type_name}: {reason}",
        )


def _tolerant(deserializer: Callable[[bytes], Any] | None) -> Callable[[bytes], Any] | None:
    """`deserializer`, answering `_Malformed` instead of raising on undecodable bytes."""
    if deserializer is None:
        return None
    owner = getattr(deserializer, "__self__", None)
    descriptor = getattr(owner, "DESCRIPTOR", None)
    type_name = descriptor.full_name if descriptor is not None else "request message"

    def parse(data: bytes) -> Any:
        try:
            return deserializer(data)
        except DecodeError as exc:
            # upb says "Error parsing message with type 'X': <reason>"; keep only the reason.
            reason = str(exc).rpartition(": ")[2] or "undecodable bytes"
            return _Malformed(type_name, reason[:1].lower() + reason[1:])

    return parse


class _Call:
    """Bookkeeping shared by the unary and streaming wrappers."""

    __slots__ = ("context", "method", "metrics", "request_id", "span", "started", "table")

    def __init__(
        self,
        table: PolicyTable,
        method: str,
        context: grpc.aio.ServicerContext,
        metrics: Metrics,
    ) -> None:
        self.table = table
        self.method = method
        self.context = context
        self.metrics = metrics
        self.request_id = _request_id(context)
        self.started = time.perf_counter()
        metrics.call_started(method)
        structlog.contextvars.bind_contextvars(request_id=self.request_id)
        context.set_trailing_metadata((("x-request-id", self.request_id),))
        self.span = tracing.rpc_started(method, context.invocation_metadata())

    def log(self, code: grpc.StatusCode, exc: BaseException | None = None) -> None:
        seconds = time.perf_counter() - self.started
        span = self.span
        self.metrics.call_ended(self.method, code, seconds, span.trace_id if span else None)
        if isinstance(exc, BulkheadFull):
            self.metrics.refusals.labels(self.method).inc()
        fields: dict[str, Any] = {
            "method": self.method,
            "status": code.name,
            "duration_ms": round(seconds * 1000, 3),
            "request_id": self.request_id,
        }
        if exc is not None and is_unmapped(exc):
            self.metrics.unmapped.labels(self.method, type(exc).__qualname__).inc()
            _log.error("rpc", exc_info=exc, **fields)
        elif code in _ROUTINE:
            _log.info("rpc", **fields)
        elif isinstance(exc, InvalidArgument):
            # The field paths only: a violation's description may quote the caller's value
            # (an address, a Message-ID), which the caller sees and the log must not.
            _log.warning("rpc", fields=[v.field for v in exc.violations], **fields)
        else:
            _log.warning("rpc", error=str(exc) if exc else None, **fields)
        structlog.contextvars.unbind_contextvars("request_id")
        if span is not None:
            tracing.rpc_ended(span, code)

    async def fail(
        self, exc: BaseException, trailers: tuple[tuple[str, str], ...] = ()
    ) -> NoReturn:
        code = code_for(exc)
        self.log(code, exc)
        status = rich_status(exc, self.request_id)
        await self.context.abort(
            status.code, status.details, (*status.trailing_metadata, *trailers)
        )
        raise AssertionError("abort returned")  # pragma: no cover


def _wrap_unary(
    behavior: Callable[[Any, grpc.aio.ServicerContext], Awaitable[Any]],
    table: PolicyTable,
    method: str,
    metrics: Metrics,
) -> Callable[[Any, grpc.aio.ServicerContext], Awaitable[Any]]:
    async def unary(request: Any, context: grpc.aio.ServicerContext) -> Any:
        call = _Call(table, method, context, metrics)
        if type(request) is _Malformed:
            await call.fail(request.error)
        try:
            timeout_s = _effective_deadline(context, table.policy(method).deadline_s)
            serving(timeout_s)
            async with asyncio.timeout(timeout_s):
                async with table.bulkhead(method).slot():
                    response = await behavior(request, context)
        except TimeoutError:
            await call.fail(DeadlineExceeded(f"{method}: deadline exceeded"))
        except asyncio.CancelledError:
            call.log(grpc.StatusCode.CANCELLED)
            raise
        except Exception as exc:
            await call.fail(exc)
        call.log(grpc.StatusCode.OK)
        return response

    return unary


def _wrap_stream(
    behavior: Callable[[Any, grpc.aio.ServicerContext], AsyncIterator[Any]],
    table: PolicyTable,
    method: str,
    metrics: Metrics,
) -> Callable[[Any, grpc.aio.ServicerContext], AsyncIterator[Any]]:
    """Server streams hold the bulkhead for their whole life; the deadline is the client's.

    A handler either yields its messages (an async generator) or writes them itself with
    ``context.write`` (a coroutine: how a handler bounds how long one write may wait for a
    client that stopped reading: `_wrap_writer`)."""

    async def stream(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
        call = _Call(table, method, context, metrics)
        if type(request) is _Malformed:
            await call.fail(request.error)
        try:
            async with table.bulkhead(method).slot():
                async for item in behavior(request, context):
                    yield item
        except asyncio.CancelledError:
            call.log(grpc.StatusCode.CANCELLED)
            raise
        except Exception as exc:
            await call.fail(exc)
        call.log(grpc.StatusCode.OK)

    return stream


def _wrap_writer(
    behavior: Callable[[Any, grpc.aio.ServicerContext], Awaitable[None]],
    table: PolicyTable,
    method: str,
    metrics: Metrics,
) -> Callable[[Any, grpc.aio.ServicerContext], Awaitable[None]]:
    """`_wrap_stream` for a handler that writes its messages with ``context.write``."""

    async def stream(request: Any, context: grpc.aio.ServicerContext) -> None:
        call = _Call(table, method, context, metrics)
        if type(request) is _Malformed:
            await call.fail(request.error)
        try:
            async with table.bulkhead(method).slot():
                await behavior(request, context)
        except asyncio.CancelledError:
            call.log(grpc.StatusCode.CANCELLED)
            raise
        except Exception as exc:
            await call.fail(exc)
        call.log(grpc.StatusCode.OK)

    return stream


def _refusal(
    handler: grpc.RpcMethodHandler,
    table: PolicyTable,
    method: str,
    error: Exception,
    metrics: Metrics,
    *,
    trailers: tuple[tuple[str, str], ...] = (),
) -> grpc.RpcMethodHandler:
    """A handler that answers `error` (with `trailers`) without parsing the request.

    Decided when the call arrives, before its message is deserialized: a flood of refused
    calls carrying large payloads (20,000-recipient posts) or of unauthenticated calls must
    not cost the event loop a parse each, or the shedding itself starves the methods the
    bulkheads protect.
    """

    async def refuse(request: bytes, context: grpc.aio.ServicerContext) -> Any:
        call = _Call(table, method, context, metrics)
        await call.fail(error, trailers)

    async def refuse_stream(
        request: bytes, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[Any]:
        await refuse(request, context)
        yield  # pragma: no cover - never reached; makes this an async generator

    if handler.unary_stream is not None or handler.stream_stream is not None:
        return grpc.unary_stream_rpc_method_handler(
            refuse_stream, response_serializer=handler.response_serializer
        )
    return grpc.unary_unary_rpc_method_handler(
        refuse, response_serializer=handler.response_serializer
    )


async def _reject(request: Any, context: grpc.aio.ServicerContext) -> None:
    """Aborts a health or reflection call whose request (or stream message) was malformed."""
    if type(request) is _Malformed:
        await context.abort_with_status(rich_status(request.error))


def _decoding_guarded(handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
    """Health and reflection: untouched, except that undecodable bytes get INVALID_ARGUMENT."""
    parse = _tolerant(handler.request_deserializer)
    out = handler.response_serializer
    if handler.unary_unary is not None:
        inner_uu = handler.unary_unary

        async def unary(request: Any, context: grpc.aio.ServicerContext) -> Any:
            await _reject(request, context)
            return await inner_uu(request, context)

        return grpc.unary_unary_rpc_method_handler(unary, parse, out)
    if handler.unary_stream is not None and not inspect.isasyncgenfunction(handler.unary_stream):
        inner_uw = handler.unary_stream  # writes with context.write (health's Watch)

        async def unary_write(request: Any, context: grpc.aio.ServicerContext) -> None:
            await _reject(request, context)
            await inner_uw(request, context)

        return grpc.unary_stream_rpc_method_handler(unary_write, parse, out)
    if handler.unary_stream is not None:
        inner_us = handler.unary_stream

        async def unary_stream(
            request: Any, context: grpc.aio.ServicerContext
        ) -> AsyncIterator[Any]:
            await _reject(request, context)
            async for item in inner_us(request, context):
                yield item

        return grpc.unary_stream_rpc_method_handler(unary_stream, parse, out)
    if handler.stream_stream is not None and inspect.isasyncgenfunction(handler.stream_stream):
        inner_ss = handler.stream_stream

        async def stream_stream(
            requests: AsyncIterator[Any], context: grpc.aio.ServicerContext
        ) -> AsyncIterator[Any]:
            async def checked() -> AsyncIterator[Any]:
                async for request in requests:
                    await _reject(request, context)
                    yield request

            async for item in inner_ss(checked(), context):
                yield item

        return grpc.stream_stream_rpc_method_handler(stream_stream, parse, out)
    return handler


class RpcInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """Wraps every ``/loom.*`` handler with auth, bulkhead, deadline, error mapping and logging."""

    def __init__(
        self,
        table: PolicyTable,
        auth: Authenticator | None = None,
        metrics: Metrics | None = None,
    ) -> None:
        self._table = table
        self._auth = auth
        self._metrics = metrics or Metrics()
        self._metrics.bulkheads = table.bulkheads
        self._draining = False
        self._drain_trailers: tuple[tuple[str, str], ...] = ()
        self._scopes: dict[str, str] = {}

    def drain(self, retry_after_s: float = 0.0) -> None:
        """From now on every new Loom call is refused with UNAVAILABLE (retry elsewhere);
        calls already running continue. Health and reflection still answer.

        With `retry_after_s`, each refusal tells the caller's gRPC retry policy to wait that
        long before its next attempt (``grpc-retry-pushback-ms``), so that attempt goes
        to the server's next incarnation, or another replica, not to this one's shutdown."""
        self._draining = True
        if retry_after_s > 0:
            self._drain_trailers = (("grpc-retry-pushback-ms", str(round(retry_after_s * 1000))),)

    def _denied(self, details: grpc.HandlerCallDetails, method: str) -> LoomError | None:
        """The auth error of this call, if any (checked before the request is parsed).

        Anything but a `LoomError` is a bug and propagates to the last guard."""
        if self._auth is None or self._auth.is_open(method.partition("/")[0]):
            return None
        scope = self._scopes.get(method)
        if scope is None:
            scope = method_scope(method, self._table.policy(method).scope)
            self._scopes[method] = scope
        try:
            self._auth.check(details.invocation_metadata or (), scope)
        except LoomError as exc:
            return exc
        return None

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(handler_call_details)
        if handler is None:
            return handler
        method = handler_call_details.method[1:]
        try:
            return self._intercepted(handler, handler_call_details, method)
        except Exception as exc:  # the last guard; escaping here, grpc would answer UNKNOWN
            return _refusal(handler, self._table, method, exc, self._metrics)

    def _intercepted(
        self, handler: grpc.RpcMethodHandler, details: grpc.HandlerCallDetails, method: str
    ) -> grpc.RpcMethodHandler:
        """`handler` as this call must run it: refused, guarded for decoding, or wrapped."""
        full = details.method
        denied = self._denied(details, method)
        if denied is not None:
            return _refusal(handler, self._table, method, denied, self._metrics)
        if not full.startswith(_LOOM_PREFIX):
            return _decoding_guarded(handler)
        if self._draining:
            return _refusal(
                handler,
                self._table,
                method,
                _DRAINING,
                self._metrics,
                trailers=self._drain_trailers,
            )
        return self._wrapped(handler, method)

    def _wrapped(self, handler: grpc.RpcMethodHandler, method: str) -> grpc.RpcMethodHandler:
        """A Loom method's handler behind its bulkhead, deadline, error mapping and log line."""
        if self._table.bulkhead(method).full:
            return _refusal(
                handler,
                self._table,
                method,
                BulkheadFull(f"{method}: too many concurrent calls"),
                self._metrics,
            )
        if handler.unary_unary is not None:
            return grpc.unary_unary_rpc_method_handler(
                _wrap_unary(handler.unary_unary, self._table, method, self._metrics),
                request_deserializer=_tolerant(handler.request_deserializer),
                response_serializer=handler.response_serializer,
            )
        if handler.unary_stream is not None:
            inner: Any = handler.unary_stream
            wrap: Any = _wrap_stream if inspect.isasyncgenfunction(inner) else _wrap_writer
            return grpc.unary_stream_rpc_method_handler(
                wrap(inner, self._table, method, self._metrics),
                request_deserializer=_tolerant(handler.request_deserializer),
                response_serializer=handler.response_serializer,
            )
        return handler
